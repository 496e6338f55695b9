"""Watch mode on real files: clips encoded with PyAV and the real MSR-VTT clips, copied in slowly (a writer that
appends in chunks), moved, changed and deleted under a FolderWatcher (inotify, and polling); `reelsearch index DIR
--watch` killed with SIGKILL mid-way and restarted; `serve --watch` through the HTTP API and the page."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from browser import chromium_page
from conftest import shared_path
from in_process import cli_here
from reelsearch.cli.main import app
from reelsearch.errors import ConfigError
from reelsearch.index import EmbeddedCatalog
from reelsearch.index.catalog import CatalogError
from reelsearch.index.embedded.catalog import SQLITE_NAME
from reelsearch.indexing import watch
from reelsearch.indexing.watch import FolderWatcher
from reelsearch.search import Searcher
from reelsearch.service.server import build_app
from test_search_support import ServerThread, small_model, write_clip

pytest.importorskip("watchdog", reason="watch mode needs reelsearch[watch]")
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SETTLE = 1.0
#: A change is reflected within this many seconds (it takes SETTLE plus the embedding of one short clip).
WITHIN = 20.0


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """Real clips: three encoded here, the two MSR-VTT clips; and a small model folder."""
    root = tmp_path_factory.mktemp("watch-media")
    clips = [write_clip(root / f"clip{i}.mp4", [((40 + 70 * i, 200 - 60 * i, 90), 1.5)], seed=i) for i in range(3)]
    real = sorted(shared_path("msrvtt", "clips").glob("*.mp4"))
    model_dir = small_model("cosine").save(root / "model")
    return root, clips, real, model_dir


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wait_for(check, timeout: float = WITHIN, what: str = "") -> float:
    """Seconds until ``check()`` is true (AssertionError after ``timeout``)."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - start


def slow_copy(src: Path, dest: Path, chunks: int = 8, pause: float = 0.3, during=None) -> None:
    """Copy ``src`` to ``dest`` in ``chunks`` appends, ``pause`` seconds apart (a slow copy); ``during()`` is called
    after each chunk but the last."""
    data = src.read_bytes()
    step = -(-len(data) // chunks)
    with open(dest, "wb") as fh:
        for i in range(0, len(data), step):
            fh.write(data[i:i + step])
            fh.flush()
            os.fsync(fh.fileno())
            if i + step < len(data):
                if during is not None:
                    during()
                time.sleep(pause)


class Indexed:
    """What the index holds, read from its SQLite file (read-only, as another process would): {path: sha256}."""

    def __init__(self, index_dir: Path):
        self.db = index_dir / SQLITE_NAME

    def __call__(self) -> dict[str, str]:
        if not self.db.exists():
            return {}
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)) as db:
            try:
                return {os.fsdecode(p): h for p, h in db.execute("SELECT path, sha256 FROM videos")}
            except sqlite3.OperationalError:  # the tables are not made yet
                return {}


@pytest.mark.parametrize("poll", [None, 0.5], ids=["inotify", "polling"])
def test_new_changed_moved_deleted_files_are_followed(media, tmp_path, poll):
    root, clips, real, model_dir = media
    watched = tmp_path / "watched"
    (watched / "sub").mkdir(parents=True)
    shutil.copyfile(clips[0], watched / "first.mp4")
    indexed = Indexed(tmp_path / "index")
    runs = []
    with Searcher(tmp_path / "index", model_dir) as searcher, \
            FolderWatcher(searcher, [watched], poll=poll, settle=SETTLE, on_sync=runs.append) as watcher:
        wait_for(lambda: indexed() == {str(watched / "first.mp4"): sha256(clips[0])}, what="the first sync")

        # a real clip copied in slowly: waited for while it grows, indexed complete once it stops
        dest = watched / "sub" / real[0].name
        seen_waiting = []

        def check_not_indexed():
            assert str(dest) not in indexed()
            seen_waiting.append(display_name(watcher) if watcher.status()["waiting"] else None)

        slow_copy(real[0], dest, during=check_not_indexed)
        took = wait_for(lambda: indexed().get(str(dest)) == sha256(real[0]), what="the copied clip")
        assert any(seen_waiting), "the watcher never said it waits for the file being copied"
        assert took < WITHIN
        assert not [r for r in runs if r.report.failed], [r.failure_lines() for r in runs]  # no half file tried

        # moved within the folder: one entry, at its new path, its embeddings reused
        moved = watched / "moved.mp4"
        os.rename(dest, moved)
        wait_for(lambda: set(indexed()) == {str(watched / "first.mp4"), str(moved)}, what="the move")
        wait_for(lambda: any(r.report.reused and r.report.removed for r in runs), what="the move's run")

        # changed in place: re-embedded (its content hash follows)
        shutil.copyfile(clips[1], watched / "first.mp4")
        wait_for(lambda: indexed().get(str(watched / "first.mp4")) == sha256(clips[1]), what="the change")

        # deleted: dropped
        os.remove(moved)
        wait_for(lambda: set(indexed()) == {str(watched / "first.mp4")}, what="the deletion")

        # a folder copied in, then deleted
        album = tmp_path / "album"
        album.mkdir()
        shutil.copyfile(clips[2], album / "x.mp4")
        shutil.copyfile(real[1], album / "y.mp4")
        shutil.copytree(album, watched / "album")
        wait_for(lambda: set(indexed()) == {str(watched / n) for n in ("first.mp4", "album/x.mp4", "album/y.mp4")},
                 what="the folder copied in")
        shutil.rmtree(watched / "album")
        wait_for(lambda: set(indexed()) == {str(watched / "first.mp4")}, what="the folder deleted")
        wait_for(lambda: watcher.status()["state"] == "idle", what="idle")
        status = watcher.status()
    assert status["roots"] == [str(watched)] and status["waiting"] == [] and status["error"] is None
    assert status["last"]["summary"].endswith(f"1 in {tmp_path / 'index'}")


def segment_cover(index_dir: Path) -> tuple[dict[str, tuple[int, int]], int]:
    """({path: (frames, frames its segments cover)}, segment rows of no video), read as ``Indexed`` reads."""
    with contextlib.closing(sqlite3.connect(f"file:{index_dir / SQLITE_NAME}?mode=ro", uri=True, timeout=10)) as db:
        cover = {os.fsdecode(p): (n, c) for p, n, c in db.execute(
            "SELECT v.path, v.n_frames, (SELECT COALESCE(SUM(s.n_frames), 0) FROM video_segments s "
            "WHERE s.video_id = v.id) FROM videos v")}
        orphans = db.execute("SELECT COUNT(*) FROM video_segments WHERE video_id NOT IN (SELECT id FROM videos)")
        return cover, orphans.fetchone()[0]


def test_watched_files_keep_their_segments(media, tmp_path):
    """A long clip added, then replaced by a short one, then deleted while watched: each indexed file's segments
    cover its frames, a replaced file's segments are its new content's, a deleted file leaves none."""
    root, clips, real, model_dir = media
    watched = tmp_path / "watched"
    watched.mkdir()
    indexed = Indexed(tmp_path / "index")
    clip = watched / "clip.mp4"
    with Searcher(tmp_path / "index", model_dir) as searcher, \
            FolderWatcher(searcher, [watched], poll=0.5, settle=SETTLE):
        shutil.copyfile(real[0], clip)
        wait_for(lambda: indexed().get(str(clip)) == sha256(real[0]), what="the long clip")
        cover, orphans = segment_cover(tmp_path / "index")
        long_frames = cover[str(clip)][0]
        assert cover[str(clip)] == (long_frames, long_frames) and long_frames >= 10 and orphans == 0
        shutil.copyfile(clips[1], clip)
        wait_for(lambda: indexed().get(str(clip)) == sha256(clips[1]), what="the change")
        cover, orphans = segment_cover(tmp_path / "index")
        frames = cover[str(clip)][0]
        assert cover[str(clip)] == (frames, frames) and frames < long_frames and orphans == 0
        os.remove(clip)
        wait_for(lambda: indexed() == {}, what="the deletion")
        assert segment_cover(tmp_path / "index") == ({}, 0)


def display_name(watcher) -> str:
    return ",".join(watcher.status()["waiting"])


def _sigint_as_in_a_terminal() -> None:
    """In the child before it runs Python: SIGINT at its default disposition and not blocked (Python installs its
    KeyboardInterrupt handler only then; a disposition ignored by an earlier test of the suite is inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_index_watch_resumes_after_kill_9(media, tmp_path):
    root, clips, real, model_dir = media
    watched, index = tmp_path / "watched", tmp_path / "index"
    watched.mkdir()
    for i in range(6):  # distinct real clips: encoded here and the MSR-VTT ones
        write_clip(watched / f"c{i}.mp4", [((30 * i, 120, 250 - 30 * i), 1.0), ((200, 20 * i, 60), 1.0)], seed=10 + i)
    for clip in real:
        shutil.copyfile(clip, watched / clip.name)
    indexed = Indexed(index)
    cmd = [sys.executable, "-m", "reelsearch", "index", str(watched), "--watch", "--index", str(index),
           "--model", str(model_dir), "--no-speech", "--no-ocr", "--settle", str(SETTLE)]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1",  # SIGABRT dumps every thread's stack: what a hang waits on
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}

    def start():  # Ctrl-C as in a terminal: SIGINT at its default even where the suite left it ignored or blocked
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=_sigint_as_in_a_terminal)

    def on_disk() -> dict[str, str]:
        return {str(p): sha256(p) for p in sorted(watched.iterdir()) if p.suffix == ".mp4"}

    # killed while it catches up with the folder (the first sync), then restarted: it finishes the job
    proc = start()
    wait_for(lambda: (index / SQLITE_NAME).exists(), timeout=60, what="the index")
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc = start()
    try:
        wait_for(lambda: indexed() == on_disk(), timeout=120, what="the restarted first sync")
        # a slow copy under way when it is killed again, and a file deleted while nothing watches
        copier = threading.Thread(target=slow_copy, args=(clips[2], watched / "late.mp4"), kwargs={"pause": 0.4})
        copier.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        copier.join()
        os.remove(watched / "c0.mp4")
        proc = start()
        wait_for(lambda: indexed() == on_disk(), timeout=120, what="catching up after the second kill")
        assert str(watched / "late.mp4") in indexed() and str(watched / "c0.mp4") not in indexed()
        # and it watches again
        shutil.copyfile(clips[0], watched / "after.mp4")
        wait_for(lambda: indexed() == on_disk(), what="a file added after the restart")
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop, exit status 0
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=60)
            pytest.fail(f"Ctrl-C did not stop `index --watch` within 60 s; its threads:\n{err}")
    assert proc.returncode == 0, err
    assert "watching " in err and out.strip().splitlines()[-1].endswith(f"{len(on_disk())} in {index}")
    with EmbeddedCatalog(index) as lib:  # one vector per video, nothing left over from the kills
        lib.refresh()
        assert sorted(lib.ids()) == sorted(v.id for v in lib.videos()) and len(lib.ids()) == len(on_disk())


#: `reelsearch index DIR --watch` whose sync never ends (it sleeps inside SQLite's reach) and whose interpreter
#: shutdown, if it comes to one, says so on stderr; Ctrl-C waits STOP_WAIT = 1 s for it.
_HANGING_SYNC = """
import atexit, sys, time
from reelsearch.indexing import watch
def hang(self, paths, full):
    print("sync started", file=sys.stderr, flush=True)
    time.sleep(120)
watch.FolderWatcher._sync = hang
watch.STOP_WAIT = 1.0
atexit.register(lambda: print("interpreter shutdown", file=sys.stderr, flush=True))
from reelsearch.cli.main import main
sys.argv = ["reelsearch", *sys.argv[1:]]
main()
"""


def test_ctrl_c_during_a_sync_ends_the_process_at_once_without_its_shutdown(media, tmp_path):
    """A sync still under way STOP_WAIT seconds after Ctrl-C: the process ends there (exit status 0, as a kill would:
    no interpreter shutdown, which crashed with a segfault when the sync's thread was inside SQLite), and says so."""
    watched = tmp_path / "watched"
    watched.mkdir()
    cmd = [sys.executable, "-c", _HANGING_SYNC, "index", str(watched), "--watch", "--index", str(tmp_path / "index"),
           "--model", str(media[3]), "--no-speech", "--no-ocr", "--poll", "0.2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_sigint_as_in_a_terminal)
    try:
        lines = []
        while not any("sync started" in line for line in lines):
            line = proc.stderr.readline()
            assert line, f"ended before its first sync: {''.join(lines)}"
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    err = "".join(lines) + err
    assert proc.returncode == 0 and time.monotonic() - start < 30, err
    assert "the sync under way is cut short" in err and "interpreter shutdown" not in err and "Fatal" not in err


def test_watch_bad_input_is_a_clear_error(media, tmp_path):
    root, clips, real, model_dir = media
    proc = cli_here("index", clips[0], "--watch", "--index", tmp_path / "i", "--model", model_dir)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {clips[0]}: not a folder (watch mode follows folders)"
    runner = CliRunner()
    res = runner.invoke(app, ["index", str(root), "--poll", "1", "--index", str(tmp_path / "i")])
    assert res.exit_code == 2 and "--poll" in res.output and "goes with --watch" in res.output
    res = runner.invoke(app, ["serve", "--watch", str(root / "nowhere"), "--index", str(tmp_path / "i")])
    assert isinstance(res.exception, ConfigError) and "nowhere: not a folder" in str(res.exception)
    res = runner.invoke(app, ["serve", "--watch", str(root), "--workers", "2", "--index", str(tmp_path / "i"),
                              "--model", str(model_dir)])
    assert isinstance(res.exception, ConfigError) and "--workers 1" in str(res.exception)
    with Searcher(tmp_path / "i", model_dir) as searcher, pytest.raises(ConfigError, match="polling interval"):
        FolderWatcher(searcher, [root], poll=0)


def _serve_settings(index: Path, model_dir: Path, watched: Path) -> dict:
    return {"index": str(index), "model": str(model_dir), "threads": 1,
            "access_log": False, "watch": [str(watched)], "poll": None, "settle": SETTLE, "cues": []}


def test_serve_watch_health_and_search_follow_the_folder(media, tmp_path):
    root, clips, real, model_dir = media
    watched = tmp_path / "watched"
    watched.mkdir()
    shutil.copyfile(clips[0], watched / "a.mp4")
    (watched / "notes.txt").write_text("not media")
    app_ = build_app(_serve_settings(tmp_path / "index", model_dir, watched), None)
    client = TestClient(app_)
    try:
        wait_for(lambda: client.get("/health").json()["videos"] == 1, what="the first sync")
        wait_for(lambda: client.get("/health").json()["watch"].get("last"), what="the first sync's report")
        first = client.get("/health").json()["watch"]["last"]  # the whole folder's: its other file named
        assert first["whole"] and first["skipped"] == [
            f"skipped: {watched / 'notes.txt'}: not a photo, video or audio format reelsearch reads"]
        dest = watched / real[1].name
        states = []
        slow_copy(real[1], dest, during=lambda: states.append(client.get("/health").json()["watch"]))
        assert any(dest.name in " ".join(s["waiting"]) for s in states), states
        wait_for(lambda: client.get("/health").json()["videos"] == 2, what="the copied clip")
        found = client.get("/search", params={"q": "a video", "k": 5}).json()["results"]
        assert {r["name"] for r in found} == {"a.mp4", dest.name}  # the serving index sees what the watcher wrote
        os.remove(watched / "a.mp4")
        wait_for(lambda: client.get("/health").json()["videos"] == 1, what="the deletion")
        health = client.get("/health").json()
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        assert "watch" in schema["Health"]["properties"] and "waiting" in schema["WatchStatus"]["properties"]
        assert health["watch"]["roots"] == [str(watched)] and health["watch"]["last"]["failed"] == []
    finally:
        app_.state.watcher.stop()
        app_.state.searcher.close()


def test_page_shows_what_is_being_indexed(media, tmp_path):
    root, clips, real, model_dir = media
    watched = tmp_path / "watched"
    watched.mkdir()
    shutil.copyfile(clips[0], watched / "a.mp4")
    app_ = build_app(_serve_settings(tmp_path / "index", model_dir, watched), None)
    try:
        with ServerThread(app_) as server, chromium_page(tmp_path / "profile") as (page, errors):
            page.goto(server.url + "/", wait_until="networkidle")
            page.wait_for_function("() => document.getElementById('watch').dataset.state === 'idle'",
                                   timeout=30_000)
            assert f"watching {watched}" in page.inner_text("#watch")
            assert page.inner_text("#library").startswith("1 videos indexed")
            dest = watched / real[0].name
            shown = []
            slow_copy(real[0], dest, chunks=10, pause=0.5,
                      during=lambda: shown.append(page.inner_text("#watch")))
            assert any(f"waiting for {dest.name} (still being copied)" in s for s in shown), shown
            page.wait_for_function("() => document.getElementById('library').textContent.startsWith('2 videos')",
                                   timeout=30_000)
            page.fill("#q", "a video")
            page.click("#go")
            page.wait_for_selector(".card", timeout=20_000)
            assert page.locator(".card").count() == 2
            assert not errors, errors
    finally:
        app_.state.watcher.stop()
        app_.state.searcher.close()


def test_a_failed_sync_is_reported_and_tried_again(media, tmp_path, monkeypatch):
    """A sync that fails as a whole (a full disk, say: the library raises CatalogError) leaves the watcher alive: its
    status says why, and the same work is tried again RETRY seconds later."""
    root, clips, real, model_dir = media
    monkeypatch.setattr(watch, "RETRY", 0.5)
    watched = tmp_path / "watched"
    watched.mkdir()
    shutil.copyfile(clips[0], watched / "a.mp4")
    seen = []
    with Searcher(tmp_path / "index", model_dir) as searcher:
        index = searcher.index

        def full_disk_once(*args, **kwargs):
            seen.append(watcher.status())
            if len(seen) == 1:
                raise CatalogError(f"{tmp_path / 'index'}: cannot write the index (No space left on device)")
            return index(*args, **kwargs)

        monkeypatch.setattr(searcher, "index", full_disk_once)
        watcher = FolderWatcher(searcher, [watched], settle=SETTLE)  # bound before it starts calling index
        with watcher:
            wait_for(lambda: set(Indexed(tmp_path / "index")()) == {str(watched / "a.mp4")}, what="the retry")
            wait_for(lambda: watcher.status()["last"] is not None, what="the retry's report")
            status = watcher.status()
    assert len(seen) == 2 and "No space left on device" in seen[1]["error"]
    assert status["error"] is None and status["last"]["summary"].startswith("1 added")
