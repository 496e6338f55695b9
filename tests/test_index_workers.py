"""Cooperating index workers over one PostgreSQL catalog (issue 23, point 3): three processes sync one folder of 60
real Flickr8k photos at once and one is killed with kill -9 mid-run; every photo is indexed exactly once (one
``index_log`` row each), the dead worker's claims are taken over once their lease expires, and a file that fails is
reported, not indexed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

from conftest import shared_path
from reelsearch.index.pg import LATEST, PostgresCatalog
from reelsearch.index.sync_records import SyncReport
from reelsearch.indexing.index_folder import IndexRun
from reelsearch.indexing.index_ray import merge_runs

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

#: One worker: the library API's sync (what `reelsearch index PATH --db URL` runs) with the tests' embedder over the
#: files' bytes, slowed to 0.1 s a file so that the kill lands mid-run; a 2-second lease; commits of 4 files.
WORKER = """
import json, sys, time
from fake_embedder import FakeEmbedder
from reelsearch.index.pg import PostgresCatalog

class Slow(FakeEmbedder):
    def __call__(self, path):
        time.sleep(0.1)
        return super().__call__(path)

with PostgresCatalog(sys.argv[1], lease=2.0) as lib:
    report = lib.sync([sys.argv[2]], Slow(fail_on={"broken.jpg"}), progress=False, commit_every=4)
print(json.dumps({"added": report.added, "failed": report.failed}))
"""


def _held(conn, pid: int) -> list[bytes]:
    """Paths the worker process ``pid`` holds a live claim on."""
    return [bytes(r[0]) for r in conn.execute("SELECT path FROM claims WHERE worker LIKE %s AND error IS NULL",
                                              (f"%:{pid}:%",))]


def test_three_workers_one_killed_index_every_file_exactly_once(pg_url, tmp_path):
    photos = sorted(shared_path("flickr8k", "images").glob("*.jpg"))[:60]
    assert len(photos) == 60
    folder = tmp_path / "photos"
    folder.mkdir()
    for p in photos:
        shutil.copyfile(p, folder / p.name)
    (folder / "broken.jpg").write_bytes(b"not a picture")
    with PostgresCatalog(pg_url):
        pass  # the schema, made once
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, pg_url, str(folder)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, text=True) for _ in range(3)]
    victim, survivors = workers[0], workers[1:]
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            deadline = time.monotonic() + 120
            while not (conn.execute("SELECT count(*) FROM index_log").fetchone()[0] >= 10 and _held(conn, victim.pid)):
                assert victim.poll() is None and time.monotonic() < deadline, "the victim never held a claim mid-run"
                time.sleep(0.01)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            orphaned = _held(conn, victim.pid)  # what it held when it died: no one renews these leases now
            reports = []
            for w in survivors:
                out, err = w.communicate(timeout=300)
                assert w.returncode == 0, err
                reports.append(json.loads(out.splitlines()[-1]))
            logged = dict(conn.execute("SELECT path, count(*) FROM index_log GROUP BY path").fetchall())
            videos = {bytes(r[0]) for r in conn.execute("SELECT path FROM videos")}
            left = conn.execute("SELECT path, error FROM claims").fetchall()
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    want = {os.fsencode(str(folder / p.name)) for p in photos}
    assert videos == want  # 0 lost
    assert {bytes(p) for p in logged} == want and set(logged.values()) == {1}  # 0 indexed twice
    assert orphaned and set(orphaned) <= videos  # the dead worker's files were taken over
    # the worker that took the dead one's claim over indexed it; the survivors' reports add up with the victim's
    added = [os.fsencode(p) for r in reports for p in r["added"]]
    assert len(added) == len(set(added)) and set(orphaned) <= set(added)
    broken = os.fsencode(str(folder / "broken.jpg"))
    failed = [p for r in reports for p, _ in r["failed"]]
    assert broken not in videos and failed.count(str(folder / "broken.jpg")) <= 1
    assert failed or any(bytes(p) == broken and e for p, e in left)  # reported by a survivor, or the victim's claim
    assert all(bytes(p) == broken for p, _ in left)  # no claim left behind but the failed file's


#: A writer that commits one batch of every file, printing each file's name once embedded, 0.1 s a file; 1-second lease.
BATCH_WORKER = """
import sys, time
from fake_embedder import FakeEmbedder
from reelsearch.index.pg import PostgresCatalog

class Slow(FakeEmbedder):
    def __call__(self, path):
        time.sleep(0.1)
        print(path, flush=True)
        return super().__call__(path)

with PostgresCatalog(sys.argv[1], lease=1.0) as lib:
    lib.sync([sys.argv[2]], Slow(), progress=False, commit_every=1000, commit_seconds=600)
"""


def test_a_batch_killed_mid_way_commits_nothing_and_a_rerun_indexes_each_of_its_files_once(pg_url, tmp_path):
    """A writer killed (kill -9) half-way through a batch: none of the batch is committed, its claims stay until
    their lease runs out (no one renews them), then a rerun takes them over and indexes every file exactly once."""
    from test_index_library import FakeEmbedder, write_png

    folder = tmp_path / "photos"
    for i in range(12):
        write_png(folder / f"img{i:02d}.png", seed=i)
    with PostgresCatalog(pg_url):
        pass  # the schema, made once
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    victim = subprocess.Popen([sys.executable, "-c", BATCH_WORKER, pg_url, str(folder)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, text=True)
    try:
        embedded = [victim.stdout.readline() for _ in range(5)]
        assert all(embedded), victim.stderr.read()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM videos").fetchone()[0] == 0  # the batch was never committed
        assert conn.execute("SELECT count(*) FROM index_log").fetchone()[0] == 0
        orphaned = _held(conn, victim.pid)
    assert len(orphaned) >= 5  # the files it embedded (and those claimed with them) stay claimed until the lease ends
    with PostgresCatalog(pg_url, lease=1.0) as rerun:
        report = rerun.sync([folder], FakeEmbedder(), progress=False)
    assert len(report.added) == 12 and report.failed == []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        logged = dict(conn.execute("SELECT path, count(*) FROM index_log GROUP BY path").fetchall())
        assert conn.execute("SELECT count(*) FROM claims").fetchone()[0] == 0
    assert {bytes(p) for p in logged} == {os.fsencode(str(p)) for p in folder.glob("*.png")}
    assert set(logged.values()) == {1} and set(orphaned) <= {bytes(p) for p in logged}


def test_a_file_indexed_by_another_writer_since_the_plan_is_skipped(pg_url, tmp_path):
    """A writer's plan is made before it claims: a file another writer committed meanwhile is not embedded again
    (the claim compares the stored row with the file), and claims are released by the commit."""
    from test_index_library import FakeEmbedder, write_png

    folder = tmp_path / "photos"
    for i in range(4):
        write_png(folder / f"img{i}.png", seed=i)
    with PostgresCatalog(pg_url) as first, PostgresCatalog(pg_url) as second:
        report = first.sync([folder], FakeEmbedder(), progress=False)
        plan_items = second._plan_sync([str(folder)], "default", False, type(report)()).todo
        assert plan_items == []  # committed: nothing to do
        item = first._plan_sync([str(folder)], "other", False, type(report)()).todo[0]
        claimed = second._claim([item], "default")[0]
        assert claimed is None  # indexed (with this model) already: skipped, the claim released
        claimed = second._claim([item], "other")[0]
        assert claimed is not None and claimed.stored is None  # another model's row: embedded again
        assert first._claim([item], "other")[0] is False  # held by the second writer, whose lease lives
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM claims").fetchone()[0] == 0  # closed writers release theirs
        assert conn.execute("SELECT count(*) FROM index_log").fetchone()[0] == 4


def test_workers_starting_at_once_on_a_new_database_both_open_it(pg_url):
    """Two workers opening an empty database at the same instant both create the extensions: the second's
    ``CREATE EXTENSION IF NOT EXISTS`` waits for the first's and then fails on its unique key; it is not an error
    (the extension is there), and the schema is migrated once."""
    result = {}

    def second():
        try:
            with PostgresCatalog(pg_url) as lib:
                result["schema"] = lib.schema
        except Exception as exc:  # reported below
            result["error"] = exc

    with psycopg.connect(pg_url) as first:  # a transaction: the extension created, not committed yet
        first.execute("CREATE EXTENSION IF NOT EXISTS vector")
        thread = threading.Thread(target=second)
        thread.start()
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while not watcher.execute("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND "
                                      "wait_event_type = 'Lock'").fetchone():
                assert thread.is_alive() and time.monotonic() < deadline, result
                time.sleep(0.01)
        first.commit()
    thread.join(60)
    assert "error" not in result and result["schema"] == LATEST, result


def test_a_late_worker_sees_the_others_files_as_unchanged_and_the_merged_report_counts_each_file_once(pg_url, tmp_path):
    """``index --ray``'s merged report: a worker that plans its sync after another committed the files reports them
    unchanged; the merge counts each file once, under what was done to it (the failure CI once saw: "10 added, 2
    unchanged" for 10 files)."""
    from test_index_library import FakeEmbedder, write_png

    folder = tmp_path / "photos"
    for i in range(4):
        write_png(folder / f"img{i}.png", seed=i)
    (folder / "broken.jpg").write_bytes(b"not a picture")
    with PostgresCatalog(pg_url) as first, PostgresCatalog(pg_url) as late:
        runs = [IndexRun(lib.sync([folder], FakeEmbedder(fail_on={"broken.jpg"}), progress=False), 0, lib.location)
                for lib in (first, late)]
        total = len(late)
    assert len(runs[0].report.added) == 4 and len(runs[1].report.unchanged) == 4  # the late worker's view
    merged = merge_runs(runs, total, runs[0].location)
    assert sorted(merged.report.added) == sorted(str(p) for p in folder.glob("img*.png"))
    assert merged.report.unchanged == [] and [p for p, _ in merged.report.failed] == [str(folder / "broken.jpg")]
    assert merged.report.summary() == "4 added, 0 updated, 0 removed, 0 unchanged, 1 failed"


def test_the_merged_report_names_each_file_once_under_what_was_done_to_it():
    """A file one worker failed on and another indexed after the claim's lease ran out is indexed, not failed; a
    file both failed on is one failure (the first worker's problem); unchanged only counts what no worker did."""
    one = SyncReport(added=["a"], unchanged=["u"], failed=[("b", "corrupt"), ("c", "timeout")])
    two = SyncReport(added=["c"], unchanged=["a", "u", "b"], failed=[("b", "corrupt again"), ("m", "missing")])
    merged = merge_runs([IndexRun(one, 3, "db"), IndexRun(two, 3, "db")], 3, "db").report
    assert merged.added == ["a", "c"] and merged.unchanged == ["u"]
    assert merged.failed == [("b", "corrupt"), ("m", "missing")]
    assert merged.summary() == "2 added, 0 updated, 0 removed, 1 unchanged, 2 failed"
