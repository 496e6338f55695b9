"""The CPU of a served search's parts, one by one in one process: what each thread of ``serve`` spends a request on.

Over an index built by ``bench_serve.py`` (``--work``, ``--videos``), with the bundled model and ``--text-encoder``:

* ``search``: a search with its verdict (``Searcher.answer``) with the query vector cached, the index stage run
  inline (this thread's CPU time): the index stage's share of a request;
* ``encode_per_query``: the text encoder on batches of ``--batch`` new captions (``model.encode_text``, the process's
  CPU time, so a tokenizer's own threads count): the encoder thread's share (``serve`` batches 2-4 queries a call
  with 8 clients);
* ``app``: ``GET /search`` through the ASGI app (no uvicorn) with the search answered from a dict: FastAPI, the route,
  the query's checks and the JSON: the event loop's share, less uvicorn's.

Prints one JSON line (ms). Run with ``PYTHONPATH`` at each source to compare, alternating:

PYTHONPATH=src .venv/bin/python benchmarks/bench_served_parts.py --videos 20000 --work /tmp/reelsearch-bench-serve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import torch

from bench_serve import query_texts
from reelsearch.search import Searcher
from reelsearch.service.app import create_app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=20_000)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-serve")
    ap.add_argument("--text-encoder", default="student")
    ap.add_argument("--batch", type=int, default=3, help="captions a call of the encoder")
    ap.add_argument("--searches", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)  # as serve runs
    texts = query_texts(args.searches + 5000 + 200 * args.batch)
    out = {}
    with Searcher(args.work / f"index-{args.videos}-{args.frames}", "default",
                  text_encoder=args.text_encoder) as searcher:
        searcher.index_stage.one = lambda q: list(searcher._search_batch([q]))[0]  # inline: this thread's time
        asked = texts[:args.searches]
        for text in asked:  # encoded once, and every lazy part loaded
            searcher.answer(text, 10)
        start = time.thread_time()
        for _ in range(2):
            for text in asked:
                searcher.answer(text, 10)
        out["search"] = (time.thread_time() - start) / (2 * len(asked)) * 1000
        new = iter(texts[5000:])
        batches = [[next(new) for _ in range(args.batch)] for _ in range(180)]
        for batch in batches[:30]:
            searcher.model.encode_text(batch)
        start = time.process_time()
        for batch in batches[30:]:
            searcher.model.encode_text(batch)
        out["encode_per_query"] = (time.process_time() - start) / (150 * args.batch) * 1000
        out["app"] = app_cost(searcher, asked[:50])
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))


def app_cost(searcher: Searcher, asked: list[str], rounds: int = 20) -> float:
    """ms of CPU a ``GET /search?q=...&k=10`` through the app, its search answered from a dict."""
    answers = {text: searcher.answer(text, 10) for text in asked}

    async def answer_async(text, k=10, **options):
        return answers[text]

    searcher.answer_async = answer_async
    app = create_app(searcher)

    async def one(text: str) -> None:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": "/search", "raw_path": b"/search",
                 "query_string": urlencode({"q": text, "k": 10}).encode(), "root_path": "",
                 "headers": [(b"host", b"bench")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            pass

        await app(scope, receive, send)

    async def run(n: int) -> None:
        for _ in range(n):
            for text in asked:
                await one(text)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run(2))
        start = time.process_time()
        loop.run_until_complete(run(rounds))
        return (time.process_time() - start) / (rounds * len(asked)) * 1000
    finally:
        loop.close()


if __name__ == "__main__":
    main()
