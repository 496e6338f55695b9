"""The generated speech / on-screen-text clips: real photos, espeak-ng speech where it is said to be, text where it
is said to be, deterministic bytes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from conftest import shared_path
from reelsearch.errors import DataFormatError, ReelsearchError

av = pytest.importorskip("av")
pytest.importorskip("cv2")
cc = pytest.importorskip("reelsearch.datasets.cue_clips")


def test_streams_duration_and_audio(cue_clips):
    from reelsearch.media.decode import decode_audio, probe

    recipe = probe(cue_clips["recipe"])
    assert recipe["streams"] == ["video", "audio"]
    assert (recipe["video"]["width"], recipe["video"]["height"], recipe["video"]["fps"]) == (640, 360, 25.0)
    silent = probe(cue_clips["silent"])
    assert silent["streams"] == ["video"] and decode_audio(cue_clips["silent"], 16000) is None
    wave = decode_audio(cue_clips["recipe"], 16000)
    rms = [float(np.sqrt(np.mean(wave[int(a * 16000):int(b * 16000)] ** 2))) for a, b in ((0.0, 0.45), (0.6, 3.0))]
    assert rms[0] < 0.01 < rms[1], f"speech should start at 0.5 s (rms before/after: {rms})"


def test_text_is_drawn_only_while_shown(cue_clips):
    from reelsearch.media.decode import decode_frames

    frames = decode_frames(cue_clips["slides"], "interval:1.0")  # slide on [2, 4) s, still picture otherwise
    bright = frames.images.mean(axis=(1, 2, 3))
    on = (frames.timestamps >= 2.0) & (frames.timestamps < 4.0)
    assert on.sum() == 2 and bright[on].min() > 200 > bright[~on].max()  # the slide is white, the photo is not
    assert np.abs(frames.images[0].astype(int) - frames.images[-1].astype(int)).mean() < 2.0  # a still shot


def test_same_spec_same_bytes_and_seed_matters(tmp_path):
    if not cc.espeak_available():
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng)")
    images = shared_path("flickr8k", "images")
    clip = cc.CueClip("tiny", ("1679557684_50a206e4a9",), (cc.Utterance("hello there", 0.2),),
                      (cc.OnScreenText(("Hi",), 0.5, 1.5),), duration=2.0, seed=3)
    digests = {hashlib.sha256(cc.make_clip(clip, tmp_path / d, images).read_bytes()).hexdigest() for d in "ab"}
    other = cc.make_clip(cc.CueClip("tiny", clip.photos, clip.speech, clip.texts, duration=2.0, seed=4),
                         tmp_path / "c", images)
    assert len(digests) == 1
    assert hashlib.sha256(other.read_bytes()).hexdigest() not in digests


def test_bad_specs_are_clear_errors(tmp_path):
    with pytest.raises(ReelsearchError, match="position"):
        cc.OnScreenText(("x",), 0.0, 1.0, "middle")
    with pytest.raises(ReelsearchError, match="start < end"):
        cc.OnScreenText(("x",), 2.0, 1.0)
    with pytest.raises(DataFormatError, match="nope.jpg: photo missing"):
        cc.make_clip(cc.CueClip("x", ("nope",), audio=False, duration=1.0), tmp_path, tmp_path)
    with pytest.raises(ReelsearchError, match="no cue clip 'nope'"):
        cc.cue_script("nope")


def test_scripts_are_distinct():
    """Each standard clip's keyword queries use words of its own speech / text that no other clip has them all of."""
    import re

    def words(text):
        return set(re.findall(r"\w+", text.lower()))

    ids = [c.id for c in cc.CUE_SCRIPTS]
    assert len(set(ids)) == len(ids)
    for clip in cc.CUE_SCRIPTS:
        for kind in ("speech", "ocr"):
            if kind in clip.queries:
                query = words(clip.queries[kind]) - {"the", "a", "to"}
                owners = [c.id for c in cc.CUE_SCRIPTS if query <= words(c.spoken if kind == "speech" else c.written)]
                assert owners == [clip.id], (kind, clip.queries[kind], owners)
