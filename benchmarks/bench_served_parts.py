"""The CPU of a served search's parts, one by one: what each thread of ``serve`` spends a request on, for this source
and, paired in time, another (``--base-src``).

Over an index built by ``bench_serve.py`` (``--work``, ``--videos``), with the bundled model and ``--text-encoder``,
a worker process per source measures, chunk by chunk on the driver's word:

* ``search``: 25 searches with their verdict (``Searcher.answer``), the query vectors cached, the index stage run
  inline (the thread's CPU time, ms a search): the index stage's share of a request;
* ``encode``: 10 calls of the text encoder on ``--batch`` new captions each (``model.encode_text``, the process's CPU
  time, ms a query, so a tokenizer's own threads count): the encoder thread's share (``serve`` batches 2-4 queries a
  call with 8 clients);
* ``app``: 100 ``GET /search`` through the ASGI app (no uvicorn) with the search answered from a dict (FastAPI, the
  route, the query's checks, the JSON; ms a request): the event loop's share, less uvicorn's and the hand-offs.

The driver alternates the two workers chunk by chunk (``--chunks`` of each kind, the order swapped every time), so
that a shared machine's changing load falls on both alike, and prints each part's median per source and the median
of the paired differences (new - base), one JSON line per part:

PYTHONPATH=src .venv/bin/python benchmarks/bench_served_parts.py --videos 20000 --work /tmp/reelsearch-bench-serve \
    --base-src /tmp/base/src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

PARTS = ("search", "encode", "app")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", choices=["drive", "worker"], default="drive")
    ap.add_argument("--videos", type=int, default=20_000)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-serve")
    ap.add_argument("--text-encoder", default="student")
    ap.add_argument("--batch", type=int, default=3, help="captions a call of the encoder")
    ap.add_argument("--chunks", type=int, default=30, help="chunks of each part measured per source")
    ap.add_argument("--base-src", type=Path, help="the other source folder (src/) measured beside this one")
    args = ap.parse_args()
    if args.mode == "worker":
        return worker(args)
    sources = {"new": Path("src").resolve()}
    if args.base_src is not None:
        sources = {"base": args.base_src.resolve(), **sources}
    workers = {name: start(src, args) for name, src in sources.items()}
    got = {name: {part: [] for part in PARTS} for name in workers}
    for i in range(args.chunks):
        for part in PARTS:
            for name in (list(workers) if i % 2 == 0 else list(workers)[::-1]):
                proc = workers[name]
                proc.stdin.write(part + "\n")
                proc.stdin.flush()
                got[name][part].append(float(proc.stdout.readline()))
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    for part in PARTS:
        line = {"part": part, **{name: round(statistics.median(got[name][part]), 3) for name in workers}}
        if "base" in got:
            line["paired_difference"] = round(statistics.median(
                [n - b for b, n in zip(got["base"][part], got["new"][part], strict=True)]), 3)
        print(json.dumps(line))


def start(src: Path, args) -> subprocess.Popen:
    """A worker process running ``src``, loaded and warmed up."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(Path(__file__).resolve().parent)]))
    proc = subprocess.Popen([sys.executable, __file__, "worker", "--videos", str(args.videos), "--frames",
                             str(args.frames), "--work", str(args.work), "--text-encoder", args.text_encoder,
                             "--batch", str(args.batch)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the worker of {src} did not start")
    return proc


def worker(args) -> None:
    """Measure a chunk of the part named on each line of stdin; print its CPU ms a unit."""
    import torch  # noqa: PLC0415 - the worker's source is on its PYTHONPATH, not the driver's

    from bench_serve import query_texts  # noqa: PLC0415
    from reelsearch.search import Searcher  # noqa: PLC0415
    from reelsearch.service.app import create_app  # noqa: PLC0415

    torch.set_num_threads(1)  # as serve runs
    texts = query_texts(30_000)
    searcher = Searcher(args.work / f"index-{args.videos}-{args.frames}", "default", text_encoder=args.text_encoder)
    searcher.index_stage.one = lambda q: list(searcher._search_batch([q]))[0]  # inline: this thread's time
    asked = texts[:200]
    for text in asked:  # encoded once, and every lazy part loaded
        searcher.answer(text, 10)
    new = iter(texts[5000:])
    for _ in range(20):
        searcher.model.encode_text([next(new) for _ in range(args.batch)])
    answers = {text: searcher.answer(text, 10) for text in asked[:50]}
    served = Searcher.__new__(Searcher)  # the app's searcher: its search answered from a dict
    served.__dict__.update(searcher.__dict__)

    async def answer_async(text, k=10, **options):
        return answers[text]

    served.answer_async = answer_async
    app = create_app(served)
    loop = asyncio.new_event_loop()
    requests = [one_request(app, text) for text in asked[:50]]
    loop.run_until_complete(each(requests, 100))
    done = 0
    print("ready", flush=True)
    for line in sys.stdin:
        part = line.strip()
        if part == "search":
            start = time.thread_time()
            for _ in range(25):
                searcher.answer(asked[done % len(asked)], 10)
                done += 1
            spent = (time.thread_time() - start) / 25
        elif part == "encode":
            start = time.process_time()
            for _ in range(10):
                searcher.model.encode_text([next(new) for _ in range(args.batch)])
            spent = (time.process_time() - start) / (10 * args.batch)
        else:
            start = time.process_time()
            loop.run_until_complete(each(requests, 100))
            spent = (time.process_time() - start) / 100
        print(spent * 1000, flush=True)
    searcher.close()


def one_request(app, text: str):
    """A coroutine function making one ``GET /search?q=text&k=10`` of ``app``."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": "/search", "raw_path": b"/search", "query_string": urlencode({"q": text, "k": 10}).encode(),
             "root_path": "", "headers": [(b"host", b"bench")], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    async def request() -> None:
        await app(dict(scope), receive, send)

    return request


async def each(requests: list, n: int) -> None:
    for i in range(n):
        await requests[i % len(requests)]()


if __name__ == "__main__":
    main()
