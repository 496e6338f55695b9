"""Time the chunked order-violation similarity (Torabi et al. 2016 eq. 3) on CPU: forward, and forward + backward.

.venv/bin/python benchmarks/bench_order_similarity.py --captions 1000 --videos 5000 --dim 1024 --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch

from reelsearch.similarity import DEFAULT_CHUNK_ELEMENTS, cosine_similarity, order_similarity


def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", type=int, default=1000)
    ap.add_argument("--videos", type=int, default=5000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunk-size", type=int, nargs="+", default=[DEFAULT_CHUNK_ELEMENTS])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--backward", action="store_true", help="also time forward + backward")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    c = torch.rand(args.captions, args.dim, generator=g)
    v = torch.rand(args.videos, args.dim, generator=g)
    pairs = args.captions * args.videos
    print(f"{args.captions} x {args.videos} x {args.dim}, float32, {args.threads} thread(s), torch {torch.__version__}")
    t = _time(lambda: cosine_similarity(c, v), args.repeats)
    print(f"cosine (reference)            {t:7.3f} s")
    for chunk in args.chunk_size:
        t = _time(lambda chunk=chunk: order_similarity(c, v, chunk_size=chunk), args.repeats)
        print(f"order forward  chunk={chunk:>9d} {t:7.3f} s  ({pairs * args.dim / t / 1e9:.2f} G coord/s)")
        if args.backward:
            cg, vg = c.clone().requires_grad_(), v.clone().requires_grad_()

            def fwd_bwd(chunk=chunk, cg=cg, vg=vg):
                order_similarity(cg, vg, chunk_size=chunk).sum().backward()

            t = _time(fwd_bwd, args.repeats)
            print(f"order fwd+bwd  chunk={chunk:>9d} {t:7.3f} s")


if __name__ == "__main__":
    main()
