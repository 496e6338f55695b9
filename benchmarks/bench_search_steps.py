"""Where a search's CPU time goes, step by step, with the query vector cached (the encoder out).

Over an index built by ``bench_serve.py`` (``--work``, ``--videos``), a Searcher with the bundled model answers real
MSVD captions (each encoded once first, then from the query cache) with ``no_good_match`` after each, as a
``GET /search`` does, in this one thread (the index stage run inline). Each step is a function wrapped by a counter
of this thread's CPU time; the steps nest (the re-rank holds its rows' read, the results hold the moments and the
reads), so the figures do not add up. Run it with ``PYTHONPATH`` set to each source to compare, alternating:

PYTHONPATH=src .venv/bin/python benchmarks/bench_search_steps.py --videos 20000 --work /tmp/reelsearch-bench-serve
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_serve import query_texts
from reelsearch.index import tables
from reelsearch.index.embedded import catalog, vectors
from reelsearch.models import calibration
from reelsearch.search import Searcher, query, sources

#: (owner, function name, label) of each step timed.
STEPS = [(vectors.FaissIndex, "_reranked", "re-rank (FAISS codes + exact rows)"),
         (catalog, "video_rows", "  its exact rows read (SQLite)"),
         (query, "_results", "results"),
         (query, "_moments", "  the best moments"),
         (tables.SqlCatalog, "segments", "    their segments read (SQLite)"),
         (tables.SqlCatalog, "stored", "  the hits' frames read (SQLite)"),
         (calibration.Calibration, "__call__", "the calibration (every call)"),
         (query, "fuse", "the fusion"),
         (sources.Visual, "expert_scores", "each expert's score"),
         (Searcher, "no_good_match", "no_good_match")]


def timed(owner, name: str, label: str, spent: Counter) -> None:
    """Replace ``owner.name`` by itself counting its thread CPU time in ``spent[label]``."""
    inner = getattr(owner, name)

    def step(*args, **kwargs):
        start = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - start

    setattr(owner, name, step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=20_000)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-serve")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    spent: Counter = Counter()
    for step in STEPS:
        timed(*step, spent)
    texts = query_texts(args.queries)
    with Searcher(args.work / f"index-{args.videos}-{args.frames}", "default", text_encoder="float32") as searcher:
        searcher.index_stage.one = lambda q: list(searcher._search_batch([q]))[0]  # inline: this thread's time
        for text in texts:  # encoded once, and every lazy part loaded
            searcher.no_good_match(text, searcher.search(text, 10))
        spent.clear()
        start = time.thread_time()
        for _ in range(args.rounds):
            for text in texts:
                searcher.no_good_match(text, searcher.search(text, 10))
        n, total = args.rounds * len(texts), time.thread_time() - start
    print(f"{args.videos} videos, {n} searches: Searcher.search + no_good_match {total / n * 1000:.3f} ms of CPU per "
          "search")
    for _, _, label in STEPS:
        print(f"  {label:40s} {spent[label] / n * 1000:.3f} ms")


if __name__ == "__main__":
    main()
