"""Writers and readers of one index at once, with real processes: two `reelsearch index` runs (the second waits,
then finds the work done; `--wait 0` fails clearly), `serve` answering while `index` adds files (which appear once
committed), and a full disk during `index` (a clear error; the index stays searchable and the next run completes)."""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from in_process import cli_here
from reelsearch.index.embedded.catalog import LOCK_NAME, SQLITE_NAME, EmbeddedCatalog
from reelsearch.search import Searcher
from reelsearch.service import create_app
from test_search_support import CAPTIONS, ServerThread, make_media, small_model, write_clip

torch.set_num_threads(1)
SRC = Path(__file__).resolve().parents[1] / "src"


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def _index_cmd(paths, index: Path, model: Path, *extra) -> list[str]:
    return [sys.executable, "-m", "reelsearch", "index", *map(str, paths), "--index", str(index), "--model",
            str(model), "--quiet", "--no-speech", "--no-ocr", *extra]


def _clips(folder: Path, n: int, seed: int = 0) -> list[Path]:
    """n distinct 3-second clips (each is embedded: no two share content)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [write_clip(folder / f"clip{seed + i:02d}.mp4", [((40 + 20 * i, 200 - 15 * i, 90), 1.5),
                                                             ((200, 40 + 10 * i, 30), 1.5)], seed=seed + i)
            for i in range(n)]


def _consistent(index: Path, expected: int) -> None:
    """Every file once, every video with its frames, and the vector index agrees with SQLite."""
    db = sqlite3.connect(index / SQLITE_NAME)
    rows, paths, frames = db.execute("SELECT COUNT(*), COUNT(DISTINCT path), "
                                     "(SELECT COUNT(DISTINCT video_id) FROM frame_vectors) FROM videos").fetchone()
    db.close()
    assert rows == paths == frames == expected
    with EmbeddedCatalog(index) as library:
        assert len(library) == len(library.vectors) == expected


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return small_model("cosine").save(tmp_path_factory.mktemp("model") / "model")


def test_two_index_runs_at_once(tmp_path, model_dir):
    clips = _clips(tmp_path / "media", 6)
    index = tmp_path / "index"
    first = subprocess.Popen(_index_cmd([tmp_path / "media"], index, model_dir), env=_env(), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (index / LOCK_NAME).exists() or (index / LOCK_NAME).read_text().strip() != str(first.pid):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    # hold the first writer still while the second starts (on a slow machine it could otherwise finish first)
    os.kill(first.pid, signal.SIGSTOP)
    waiting = f"waiting for another process (pid {first.pid}) that is updating this index"
    try:
        second = subprocess.Popen(_index_cmd([tmp_path / "media"], index, model_dir), env=_env(), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err2: list[str] = []
        reader = threading.Thread(target=lambda: err2.extend(second.stderr), daemon=True)
        reader.start()
        while not any(waiting in line for line in err2):
            assert second.poll() is None and time.monotonic() < deadline + 120, "".join(err2)
            time.sleep(0.05)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out1, err1 = first.communicate(timeout=300)
    out2 = second.stdout.read()
    second.wait(timeout=300)
    reader.join(timeout=60)
    assert first.returncode == 0, err1
    assert second.returncode == 0, "".join(err2)
    assert out1.startswith(f"{len(clips)} added, 0 updated, 0 removed, 0 unchanged, 0 failed")
    # it ran after the first one: nothing left to do
    assert out2.startswith(f"0 added, 0 updated, 0 removed, {len(clips)} unchanged, 0 failed")
    _consistent(index, len(clips))


def test_index_that_must_not_wait_fails_clearly(tmp_path, model_dir):
    make_media(tmp_path / "media")
    index = tmp_path / "index"
    index.mkdir()
    with open(index / LOCK_NAME, "a+") as lock:  # another writer holds the index
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write("4242")
        lock.flush()
        for wait, took in (("0", 0.0), ("1.5", 1.5)):  # a real process, then the command in this one (cli_here)
            start = time.monotonic()
            command = _index_cmd([tmp_path / "media"], index, model_dir, "--wait", wait)
            proc = subprocess.run(command, env=_env(), text=True, capture_output=True, timeout=300) if wait == "0" \
                else cli_here(*command[3:])
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
            assert proc.stderr.strip().endswith(f"error: {index}: another process (pid 4242) is updating this index; "
                                                "try again when it is done")
            assert time.monotonic() - start >= took


def test_serve_answers_while_index_adds_files(tmp_path, model_dir):
    make_media(tmp_path / "media")
    index = tmp_path / "index"
    with Searcher(index, str(model_dir)) as searcher:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        before = len(searcher.catalog)
        new = _clips(tmp_path / "more", 4, seed=20)
        with ServerThread(create_app(searcher)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
            writer = subprocess.Popen(_index_cmd([tmp_path / "media", tmp_path / "more"], index, model_dir),
                                      env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            seen, answers = [], 0

            def ask(i):
                res = http.get("/search", params={"q": CAPTIONS[i % len(CAPTIONS)], "k": 20})
                assert res.status_code == 200, res.text
                return {r["path"] for r in res.json()["results"]}

            with ThreadPoolExecutor(4) as pool:
                while writer.poll() is None:
                    for found in pool.map(ask, range(4)):
                        seen.append(len(found))
                        answers += 1
                        assert found >= {str(p) for p in sorted((tmp_path / "media").iterdir())}
            out, err = writer.communicate()
            assert writer.returncode == 0, err
            assert answers >= 4 and set(seen) <= {before, before + len(new)}  # answered all along, whole commits
            # once committed, the new files are found (the next query picks the change up)
            assert ask(0) == {str(p) for p in sorted((tmp_path / "media").iterdir())} | {str(p) for p in new}
            assert http.get("/health").json()["videos"] == before + len(new)
    _consistent(index, before + len(new))


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_full_disk_during_index_is_a_clear_error(tmp_path, model_dir):
    make_media(tmp_path / "media")
    index = tmp_path / "index"
    with Searcher(index, str(model_dir)) as searcher:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        want = [r.id for r in searcher.search("a yellow flower", 10)]
    new = _clips(tmp_path / "more", 3, seed=40)
    full = subprocess.run(_index_cmd([tmp_path / "media", tmp_path / "more"], index, model_dir), env=_env(),
                          text=True, capture_output=True, timeout=300, preexec_fn=_file_size_limit(32 << 10))
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr
    assert f"error: {index}: cannot write the index" in full.stderr
    assert "every batch committed before is kept and the index stays usable" in full.stderr
    _consistent(index, 5)
    with Searcher(index, str(model_dir)) as searcher:  # still usable: the same answers, and the next run completes
        assert [r.id for r in searcher.search("a yellow flower", 10)] == want
        report = searcher.index([tmp_path / "media", tmp_path / "more"], progress=False, cues=())
        assert (len(report.added), len(report.unchanged), report.failed) == (len(new), 5, [])
    _consistent(index, 5 + len(new))
