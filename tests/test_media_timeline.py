"""reelsearch.media.timeline: frames sampled by time in one streaming pass, and what it says about bad files."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from reelsearch.errors import MediaError, NoVideoStream, ReelsearchError
from reelsearch.media.decode import SamplingPolicy, decode_frames
from reelsearch.media.timeline import FrameStream
from test_media_decode import make_clip, make_image, make_wav, read_index, stripes

av = pytest.importorskip("av")


def make_vfr_clip(path: Path, times_ms: list[int], w: int = 64, h: int = 48, *, rate: int = 25,
                  picture=lambda i: i, gop: int | None = None) -> Path:
    """Stripe frames at the given times (ms): a variable frame rate, in a 1/1000 time base. Frame i shows the
    stripes of ``picture(i)`` (its index); ``rate``: the stream's nominal rate; ``gop``: frames between keyframes."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        if gop is not None:
            stream.gop_size = gop
        stream.codec_context.time_base = Fraction(1, 1000)
        for i, t in enumerate(times_ms):
            frame = av.VideoFrame.from_ndarray(stripes(picture(i), w, h), format="rgb24")
            frame.pts, frame.time_base = t, Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def displayed(times: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The index of the frame displayed at each target (the last frame whose time is <= it; the first before it)."""
    return np.maximum(np.searchsorted(times, targets + 1e-6, side="right") - 1, 0)


@pytest.mark.parametrize("rate", [1.0, 2.0, 0.3])
def test_stream_equals_interval_decoding(tmp_path, rate):
    """The stream keeps exactly the frames and times ``decode_frames(interval:1/rate)`` keeps (its reference)."""
    clip = make_clip(tmp_path / "c.mp4", n=200, fps=25, gop=12)  # 8 s
    with FrameStream(clip, rate) as stream:
        got = list(stream)
    ref = decode_frames(clip, SamplingPolicy("interval", 1 / rate), strategy="sequential")
    assert [read_index(img) for _, img in got] == [read_index(img) for img in ref.images]
    np.testing.assert_allclose([t for t, _ in got], ref.timestamps, atol=1e-9)
    rep = stream.report
    assert rep.complete and rep.line() is None and rep.decoded == 200 and rep.sampled == len(got)
    assert (rep.width, rep.height, rep.fps) == (64, 48, 25.0) and rep.end == pytest.approx(8.0)


def test_variable_frame_rate_uses_each_frames_time(tmp_path):
    """Frames 40 ms apart, then a still held 3.5 s, then 100 ms apart: each target gets the frame on screen then,
    and the held frame is kept once, at its own time."""
    times = [40 * i for i in range(30)] + [1200 + 3500] + [4800 + 100 * i for i in range(30)]
    clip = make_vfr_clip(tmp_path / "vfr.mkv", times)
    got = list(FrameStream(clip, 2.0))
    t = np.asarray(times) / 1000
    want = np.unique(displayed(t, np.arange(0, 7.8, 0.5)))
    assert [read_index(img) for _, img in got] == want.tolist()
    np.testing.assert_allclose([s for s, _ in got], t[want], atol=1e-6)


def test_streams_lazily(tmp_path):
    """The first frame comes before the rest is decoded: the stream holds a frame or two, not the video."""
    clip = make_clip(tmp_path / "long.mp4", n=500, fps=25, gop=25)
    stream = FrameStream(clip, 1.0)
    it = iter(stream)
    t, img = next(it)
    assert t == 0.0 and read_index(img) == 0 and stream.report.decoded < 60
    assert not stream.report.finished and "not read to its end" in stream.report.line()
    assert len(list(it)) == 19 and stream.report.complete
    with pytest.raises(ReelsearchError, match="read once"):
        list(stream)


def test_resize_and_rotation(tmp_path):
    clip = make_clip(tmp_path / "big.mp4", n=30, fps=10, w=320, h=240, rotation=90)
    stream = FrameStream(clip, 1.0, short_side=120)
    frames = [img for _, img in stream]
    assert len(frames) == 3 and all(img.shape == (160, 120, 3) for img in frames)  # upright: 120 wide, 160 tall
    assert (stream.report.width, stream.report.height, stream.report.rotation) == (240, 320, 90)


def test_image_is_one_frame(tmp_path):
    stream = FrameStream(make_image(tmp_path / "p.png", index=9), 1.0)
    got = list(stream)
    assert len(got) == 1 and got[0][0] == 0.0 and read_index(got[0][1]) == 9
    assert stream.report.is_image and stream.report.complete


def truncate(path: Path, share: float) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * share)])
    return path


def test_truncated_file_yields_what_decodes_and_says_where_it_stopped(tmp_path):
    clip = truncate(make_clip(tmp_path / "cut.mkv", n=500, fps=25, gop=25), 0.5)  # 20 s declared, ~10 s left
    stream = FrameStream(clip, 1.0)
    got = list(stream)
    rep = stream.report
    assert 6 <= len(got) <= 14 and [read_index(img) for _, img in got] == [25 * k for k in range(len(got))]
    assert rep.finished and rep.short and not rep.complete
    line = rep.line()
    assert str(clip) in line and f"frames stop at {rep.end:.1f} s of 20.0 s declared" in line and "\n" not in line


def set_mkv_duration(path: Path, seconds: float) -> Path:
    """Rewrite the Matroska header's Duration (element 0x4489, a float in TimecodeScale units = ms)."""
    data = bytearray(path.read_bytes())
    i = data.find(b"\x44\x89\x88")
    assert i > 0, "no 8-byte Duration element"
    data[i + 3:i + 11] = np.array([seconds * 1000], ">f8").tobytes()
    path.write_bytes(bytes(data))
    return path


def test_container_lying_about_its_duration(tmp_path):
    """Declared 600 s but 4 s of frames: one line, the frames kept; declared 1 s but 4 s of frames: all frames."""
    long_claim = set_mkv_duration(make_clip(tmp_path / "a.mkv", n=100, fps=25), 600.0)
    stream = FrameStream(long_claim, 1.0)
    assert len(list(stream)) == 4 and stream.report.declared == pytest.approx(600.0)
    assert "frames stop at 4.0 s of 600.0 s declared (truncated, or the container's duration is wrong)" in (
        stream.report.line())
    short_claim = set_mkv_duration(make_clip(tmp_path / "b.mkv", n=100, fps=25), 1.0)
    stream = FrameStream(short_claim, 1.0)
    assert len(list(stream)) == 4 and stream.report.complete
    assert "past the 1.0 s the container declares" in stream.report.notes[0]


def test_audio_only_unreadable_and_empty_files(tmp_path):
    with pytest.raises(NoVideoStream, match="no video stream") as err:
        FrameStream(make_wav(tmp_path / "speech.wav"), 1.0)
    assert isinstance(err.value, MediaError) and "speech.wav" in str(err.value)
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all" * 100)
    with pytest.raises(MediaError, match="junk.mp4: not a readable media file"):
        FrameStream(junk, 1.0)
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(MediaError, match="empty"):
        FrameStream(tmp_path / "empty.mp4", 1.0)
    with pytest.raises(ReelsearchError, match="rate"):
        FrameStream(make_clip(tmp_path / "c.mp4", n=5), 0.0)


def test_skipping_non_reference_frames_keeps_times_close(tmp_path):
    """skip="nonref" (B-frames not decoded): each kept frame is at most a few frame intervals before the exact one."""
    clip = tmp_path / "b.mp4"
    with av.open(str(clip), "w") as container:  # x264's defaults: B-frames, some not referenced
        stream = container.add_stream("libx264", rate=25, options={"crf": "10", "preset": "veryfast"})
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        for i in range(250):
            for packet in stream.encode(av.VideoFrame.from_ndarray(stripes(i, 128, 96), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    exact = {round(t): read_index(img) for t, img in FrameStream(clip, 1.0)}
    stream = FrameStream(clip, 1.0, skip="nonref")
    fast = [(t, read_index(img)) for t, img in stream]
    assert len(fast) == len(exact) == 10 and stream.report.decoded < 200
    for t, index in fast:
        assert index == round(t * 25) and 0 <= exact[round(t)] - index <= 3
