"""One decode pass per video (issue 32, part 5): ``Searcher.index`` with the text cues on decodes each generated clip's
video frames once, every frame once (its picture stage feeds the on-screen-text reader from the same pass), and the
on-screen text it stores is what the reader finds on its own, at the same times."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
import torch

from cue_fixtures import need_module
from reelsearch.features.ocr import TextReader
from reelsearch.media import decode as decode_module
from reelsearch.media.decode import probe
from reelsearch.media.timeline import FrameStream
from reelsearch.search import Searcher

torch.set_num_threads(1)


def frame_count(path) -> int:
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_index_decodes_each_video_once_and_reads_the_same_text(cue_clips, tmp_path, monkeypatch):
    need_module("rapidocr_onnxruntime", "ocr")
    need_module("sentence_transformers", "text")
    folder = tmp_path / "media"
    folder.mkdir()
    clips = {name: shutil.copy(cue_clips[name], folder / f"{name}.mp4") for name in ("slides", "report", "weather")}
    alone = {name: TextReader(threads=1).extract(path) for name, path in clips.items()}  # the reader on its own

    opened, decoded = Counter(), Counter()
    stream_init, stream_frames = FrameStream.__init__, FrameStream._frames

    def counting_init(self, path, *args, **kwargs):
        opened[str(path)] += 1
        stream_init(self, path, *args, **kwargs)

    def counting_frames(self):
        for frame in stream_frames(self):
            decoded[str(self.path)] += 1
            yield frame

    def no_other_decoder(*args, **kwargs):
        raise AssertionError("a video decoded outside the index's FrameStream")

    monkeypatch.setattr(FrameStream, "__init__", counting_init)
    monkeypatch.setattr(FrameStream, "_frames", counting_frames)
    monkeypatch.setattr(decode_module._Decoder, "__init__", no_other_decoder)
    with Searcher(tmp_path / "index", "default") as searcher:
        report = searcher.index([folder], progress=False, cues=("speech", "ocr"))
        assert len(report.added) == 3 and not report.failed and not report.cues.failed
        assert sorted(report.cues.extracted) == sorted(searcher.catalog.find(p) for p in clips.values())
        monkeypatch.undo()
        for name, path in clips.items():
            assert opened[str(path)] == 1, name  # one stream per file: the picture stage's
            assert decoded[str(path)] == frame_count(path), name  # every frame decoded once, none twice
            stored = searcher.cues.segments(searcher.catalog.find(path), ["ocr"])
            segments, stats = alone[name]
            assert [(s.text, s.start, s.end) for s in stored] == [(s.text, s.start, s.end) for s in segments], name
            assert [s.confidence for s in stored] == pytest.approx([s.confidence for s in segments], abs=1e-4)
            assert searcher.cues.runs(searcher.catalog.find(path))["ocr"].n_segments == len(segments)
            assert stats["frames"] == pytest.approx(probe(path)["duration"], abs=1.0)  # one a second
        slides = [(s.text, s.start, s.end) for s in alone["slides"][0]]
        assert ("Quarterly revenue", 2.0, 4.0) in slides and alone["slides"][1] == {"frames": 6, "read": 3}
        assert "weather forecast" in " ".join(s.text.lower() for s in alone["weather"][0])
