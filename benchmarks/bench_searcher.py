"""Searcher query latency per scoring mode (model in the loop), and /search through HTTP.

For each library size, synthetic unit-norm rows (video vector + per-frame vectors) of the model's width are committed
through the library's own commit path with the Searcher's model id, then ``Searcher.search(text, 10)`` is timed:
query encoding + ranking + best moments + the frame strips. Models are the registry's paper-size architectures,
untrained (latency does not depend on the weights):

  ann       mithun-expert (cosine, D = 1024): vector index (FAISS exact below 20,000, HNSW above)
  scan      torabi-m1 (order violation, D = 950): exact chunked scan
  rank      mithun-style mixture of two cosine experts, rank fusion: every expert scores every video
  pairwise  torabi-m3 (frame attention, A = 300, D = 950): every video's frames attended, blocks of 256 videos
  http      the ann model through ``GET /search`` on uvicorn (httpx client, keep-alive)

.venv/bin/python benchmarks/bench_searcher.py --sizes 1000 10000 --frames 8 --pairwise-max 2000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

QUERIES = ["a man is driving a car", "a woman sings on a stage", "people dance in the street",
           "a dog runs on the beach", "a cat sleeps on a sofa", "a child rides a bike in the park"]


def models():
    from reelsearch.models import MixtureOfExperts, VocabTextProcessor, create_model

    vocab = VocabTextProcessor.build(QUERIES)
    torch.manual_seed(0)
    cosine = create_model("mithun-expert", vocab).eval()
    order = create_model("torabi-m1", vocab, model__text__glove_init=None).eval()
    pairwise = create_model("torabi-m3", vocab, model__text__glove_init=None).eval()
    moe = MixtureOfExperts({"object": cosine, "scene": create_model("mithun-expert", vocab).eval()},
                           {"kind": "rank", "weights": {"object": 1.0, "scene": 0.5}}, name="moe-rank").eval()
    return {"ann": cosine, "scan": order, "rank": moe, "pairwise": pairwise}


def fill(searcher, n: int, frames: int, seed: int = 0) -> float:
    """Commit n synthetic videos of the searcher's layout; returns seconds."""
    from reelsearch.index.media import EmbeddedMedia
    from reelsearch.index.sync_records import FileChange, FileToSync

    rng = np.random.default_rng(seed)
    lib, dim = searcher.catalog, searcher.model.row_dim
    st = types.SimpleNamespace(st_size=0, st_mtime_ns=0)
    times = np.arange(frames) * 0.5
    t = time.perf_counter()
    for start in range(0, n, 1000):
        pending = []
        for i in range(start, min(n, start + 1000)):
            rows = np.abs(rng.standard_normal((frames, dim)).astype(np.float32))
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
            video = rows.mean(0) / np.linalg.norm(rows.mean(0))
            pending.append(FileChange(FileToSync(f"/videos/{i:07d}.mp4", st, None), f"{i:064x}",
                                      EmbeddedMedia(video, rows, times, frames * 0.5)))
        lib._commit(pending, [], searcher.model_id)
    lib.refresh()
    return time.perf_counter() - t


def timed(fn, repeats: int) -> dict:
    fn(QUERIES[0])  # warm-up
    lat = []
    for i in range(repeats):
        t = time.perf_counter()
        fn(QUERIES[i % len(QUERIES)])
        lat.append((time.perf_counter() - t) * 1000)
    return {"p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--pairwise-max", type=int, default=2000, help="largest library for the attention model")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import httpx

    from reelsearch.search import Searcher
    from reelsearch.service import create_app
    from reelsearch.service.background import ServerThread

    results = []
    built = models()
    with tempfile.TemporaryDirectory() as work:
        for n in args.sizes:
            for mode, model in built.items():
                if mode == "pairwise" and n > args.pairwise_max:
                    continue
                with Searcher(Path(work) / f"{mode}-{n}", model) as searcher:
                    assert searcher.mode == mode
                    fill_s = fill(searcher, n, args.frames)
                    lat = timed(lambda q, s=searcher: s.search(q, 10), args.repeats)
                    results.append({"mode": mode, "videos": n, **lat, "fill_s": round(fill_s, 1)})
                    print(json.dumps(results[-1]), flush=True)
                    if mode == "ann":
                        with ServerThread(create_app(searcher)) as server, httpx.Client(base_url=server.url) as h:
                            lat = timed(lambda q, h=h: h.get("/search", params={"q": q, "k": 10}).raise_for_status(),
                                        args.repeats)
                        results.append({"mode": "http /search (ann)", "videos": n, **lat})
                        print(json.dumps(results[-1]), flush=True)
    print("\n| mode | videos | p50 ms | p95 ms |\n|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['mode']} | {r['videos']:,} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
