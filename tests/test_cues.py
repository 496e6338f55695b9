"""Speech and on-screen-text extraction on generated clips (real photos, espeak-ng speech, rendered text) and on a
real MSR-VTT clip: the words are found, at the right times; unchanged frames are not read twice; a clip without
sound or text has none; one failing cue never loses the other; a missing extra is a clear message."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import shared_path
from reelsearch.errors import ReelsearchError
from reelsearch.extras import MissingExtraError, missing_extra, require
from reelsearch.features.cues import CueExtractor, CueSegment, available_cues
from reelsearch.features.ocr import CHANGE_THRESHOLD, FrameSelector, TextBox, TextTracks, frame_change, grey_thumbnail
from reelsearch.media.timeline import FrameStream


def texts(segments) -> str:
    return " ".join(s.text for s in segments).lower()


# ------------------------------------------------------------------------------------------------ speech
def test_speech_words_and_times(cue_extraction, cue_clips):
    from reelsearch.media.decode import probe

    result = cue_extraction["recipe"]["speech"]
    assert result.ok and result.recipe.startswith("speech:whisper-tiny.en:int8")
    said = texts(result.segments)
    for word in ("preheat", "oven", "flour", "sugar", "bowl"):
        assert word in said, said
    duration = probe(cue_clips["recipe"])["duration"]
    for seg in result.segments:
        assert 0.0 <= seg.start <= seg.end <= duration + 1e-6 and 0.0 < seg.confidence <= 1.0
    preheat = [w for s in result.segments for w in s.words or () if "preheat" in w[2].lower()]
    assert preheat and 0.5 <= preheat[0][0] <= 3.0, preheat  # spoken from 0.5 s, after "First,"


def test_speech_is_english_only_model(speech_recognizer):
    assert speech_recognizer.language == "en" and speech_recognizer.model_name == "whisper-tiny.en"


def test_no_speech_no_segments(cue_extraction):
    assert cue_extraction["silent"]["speech"].ok and cue_extraction["silent"]["speech"].segments == []  # no track
    assert cue_extraction["silent"]["speech"].stats["has_audio"] is False
    report = cue_extraction["report"]["speech"]  # a sound track of room noise only: nothing made up
    assert report.ok and report.stats["has_audio"] and report.segments == []


def test_speech_on_a_real_clip(speech_recognizer):
    segments = speech_recognizer.transcribe(shared_path("msrvtt", "clips", "video9770.mp4"))
    said = texts(segments)
    assert "blue" in said and "short" in said, said  # a person explaining a construction toy, 11 s
    assert speech_recognizer.transcribe(shared_path("msrvtt", "clips", "video9771.mp4")) == []  # no audio track


# --------------------------------------------------------------------------------------------------- OCR
def test_ocr_reads_slide_once_with_its_time_span(cue_extraction):
    result = cue_extraction["report"]["ocr"]
    assert result.ok
    lines = {s.text.lower(): s for s in result.segments}
    assert "quarterly revenue" in lines and "up 12% in 2024" in lines, list(lines)
    seg = lines["quarterly revenue"]
    assert (seg.start, seg.end) == (1.0, 5.0)  # the slide is shown on [1, 5) s, frames every 1 s
    assert seg.confidence > 0.8 and 0.0 <= seg.box[0] < seg.box[2] <= 1.0 and seg.box[1] < 0.5
    assert sum("quarterly" in s.text.lower() for s in result.segments) == 1  # 4 frames, one segment


def test_ocr_on_moving_picture_and_no_text(cue_extraction):
    weather = cue_extraction["weather"]["ocr"]
    assert "weather" in texts(weather.segments) and weather.segments[0].box[1] < 0.25  # a band at the top
    assert weather.stats["read"] == weather.stats["frames"]  # the picture zooms: every frame changed
    for clip in ("recipe", "silent"):
        assert cue_extraction[clip]["ocr"].ok and cue_extraction[clip]["ocr"].segments == []


def test_frame_selection_skips_unchanged_frames(cue_clips, text_reader):
    from reelsearch.features.ocr import TextReader

    selected, stats = text_reader.extract(cue_clips["slides"])  # still photo, slide on [2, 4), photo: 6 frames
    every, all_stats = TextReader(threads=1, select=False).extract(cue_clips["slides"])
    assert stats == {"frames": 6, "read": 3} and all_stats == {"frames": 6, "read": 6}  # read at 0, 2 and 4 s
    assert [(s.text, s.start, s.end) for s in selected] == [(s.text, s.start, s.end) for s in every]
    assert ("Quarterly revenue", 2.0, 4.0) in [(s.text, s.start, s.end) for s in selected]


def test_ocr_on_an_image_file(tmp_path, text_reader):
    import cv2

    from reelsearch.datasets.cue_clips import OnScreenText, draw_text

    slide = draw_text(np.zeros((720, 1280, 3), np.uint8), OnScreenText(("Meeting notes", "budget 2025"), 0, 1, "slide"))
    cv2.imwrite(str(tmp_path / "slide.png"), cv2.cvtColor(slide, cv2.COLOR_RGB2BGR))
    segments, stats = text_reader.extract(tmp_path / "slide.png")  # an image: one frame at 0 s, shrunk to 480 px
    assert stats == {"frames": 1, "read": 1}
    assert [(s.text, s.start, s.end) for s in segments] == [("Meeting notes", 0.0, 0.0), ("budget 2025", 0.0, 0.0)]


def test_a_video_is_read_in_one_decode_pass(cue_clips, text_reader, monkeypatch):
    from reelsearch.features import ocr

    opened = []
    monkeypatch.setattr(ocr, "FrameStream", lambda *a, **k: opened.append(a) or FrameStream(*a, **k))
    segments, stats = text_reader.extract(cue_clips["slides"])
    assert len(opened) == 1  # one stream over the whole video: no window is decoded twice, no segment split
    assert stats == {"frames": 6, "read": 3}
    assert [(s.text, s.start, s.end) for s in segments if "quarterly" in s.text.lower()] == [
        ("Quarterly revenue", 2.0, 4.0)]


def test_change_test_on_real_frames(cue_clips):
    """Codec noise between two frames of a still shot stays under the threshold; a small caption does not."""
    import cv2

    from reelsearch.media.decode import decode_frames

    frames = decode_frames(cue_clips["slides"], "interval:1.0", short_side=480).images
    a, b = grey_thumbnail(frames[0]), grey_thumbnail(frames[1])
    assert frame_change(a, a) == 0.0 and frame_change(a, b) < CHANGE_THRESHOLD
    captioned = frames[1].copy()
    cv2.putText(captioned, "OK", (300, 330), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 2, cv2.LINE_AA)
    assert frame_change(a, grey_thumbnail(captioned)) > CHANGE_THRESHOLD
    selector = FrameSelector()
    assert [selector(f) for f in (frames[0], frames[1], captioned, captioned, frames[1])] == [
        True, False, True, False, True]


def test_text_tracks_merge_consecutive_readings():
    """Hand-worked: the same line (up to OCR noise) on consecutive reads is one segment, best reading kept."""
    box = (0.1, 0.8, 0.5, 0.9)
    tracks = TextTracks()
    tracks.observe(0.0, [TextBox("Hello world", 0.90, box), TextBox("Breaking news", 0.99, (0.1, 0.1, 0.6, 0.2))])
    tracks.observe(1.0, [TextBox("Hel1o world", 0.70, box)])  # a misreading of the same line
    tracks.observe(2.0, [TextBox("Hello world", 0.95, box)])
    tracks.observe(3.0, [])
    tracks.observe(4.0, [TextBox("Hello world", 0.90, box)])  # shown again later: a new segment
    segs = tracks.finish(6.5)
    assert [(s.text, s.start, s.end) for s in segs] == [
        ("Breaking news", 0.0, 1.0), ("Hello world", 0.0, 3.0), ("Hello world", 4.0, 6.5)]
    assert segs[1].confidence == pytest.approx((0.90 + 0.70 + 0.95) / 3, abs=1e-4)
    assert all(s.cue == "ocr" and s.box is not None for s in segs)


def test_parallel_cues_give_the_same_segments(cue_clips, cue_extraction, speech_recognizer, text_reader):
    results = CueExtractor(speech_recognizer, text_reader, parallel=True).extract(cue_clips["weather"])
    for cue in ("speech", "ocr"):
        assert results[cue].segments == cue_extraction["weather"][cue].segments and results[cue].ok


# ------------------------------------------------------------------------------------ failures and extras
def test_undecodable_file_is_an_error_per_cue_naming_the_file(tmp_path, speech_recognizer, text_reader):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40)
    results = CueExtractor(speech_recognizer, text_reader).extract(bad)
    for cue in ("speech", "ocr"):
        assert not results[cue].ok and str(bad) in results[cue].error and results[cue].segments == []


def test_one_failing_cue_keeps_the_other(cue_clips, text_reader, monkeypatch):
    from reelsearch.features.speech import SpeechRecognizer

    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # as if the speech extra were not installed
    results = CueExtractor(SpeechRecognizer(), text_reader).extract(cue_clips["report"])  # sound and a slide
    assert not results["speech"].ok and "pip install 'reelsearch[speech]'" in results["speech"].error
    assert "quarterly revenue" in texts(results["ocr"].segments)


def test_missing_extras_are_clear_messages(monkeypatch):
    from reelsearch.features.ocr import TextReader

    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    with pytest.raises(MissingExtraError, match=r"on-screen text recognition \(OCR\) needs the Python package "
                                                 r"'rapidocr_onnxruntime'.*pip install 'reelsearch\[ocr\]'"):
        TextReader().read_image(np.zeros((64, 64, 3), np.uint8))
    assert "pip install 'reelsearch[ocr]'" in missing_extra("ocr")
    assert available_cues()["ocr"] is not None
    with pytest.raises(MissingExtraError, match=r"pip install 'reelsearch\[speech\]'"):
        require("reelsearch_no_such_module", "speech", "speech recognition")


def test_unknown_cue_and_bad_settings():
    from reelsearch.features.ocr import TextReader
    from reelsearch.features.speech import SpeechRecognizer

    with pytest.raises(ReelsearchError, match="unknown cue 'smell'"):
        CueExtractor().extract("x.mp4", ["smell"])
    with pytest.raises(ReelsearchError):
        TextReader(interval=0)
    with pytest.raises(ReelsearchError):
        SpeechRecognizer(threads=0)


def test_segment_json_round_trip():
    seg = CueSegment("speech", 1.0, 2.5, "preheat the oven", 0.8, words=((1.0, 1.4, "preheat"), (1.4, 1.6, "the")))
    box = CueSegment("ocr", 0.0, 3.0, "Quarterly revenue", 0.99, box=(0.1, 0.2, 0.6, 0.3))
    for s in (seg, box):
        assert CueSegment.from_json(s.to_json()) == s
