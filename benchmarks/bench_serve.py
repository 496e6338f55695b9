"""Serving throughput: concurrent clients against `reelsearch serve` over a 100,000-video index.

The server is the real command (`python -m reelsearch serve --index DIR --workers W --batch B ...`) in its own
process; the load comes from a client in another process (this script's ``client`` mode): C concurrent keep-alive
HTTP/1.1 connections (asyncio, hand-written requests, so the client costs little CPU), each sending
``GET /search?q=<caption>&k=10`` as soon as its previous answer arrived (a closed loop). Every query is a different
real MSVD caption (none repeats, so the server's query cache never hits), every answer is checked (status 200,
valid JSON, k results). After a warm-up, requests/s, p50/p95/p99 latency and errors are measured over a fixed time.

The index is built once per model and size (cached under ``--work``): the default model's own text embeddings of
5,000 real MSVD captions are the semantic bases; each video mixes two of them plus noise, with ``--frames``
per-frame vectors and a real 96-px JPEG thumbnail per frame, committed through the library's commit path with the
searcher's model id (no decoding), then the vector index is built (HNSW above 20,000 videos).

.venv/bin/python benchmarks/bench_serve.py --videos 100000 --configs 1:1 1:32 2:1 2:32 --duration 60
(each config is WORKERS:BATCH; BATCH 1 turns batching off)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


# -- the client (a separate process) ------------------------------------------------------------------------------
async def _client(host: str, port: int, queries: list[str], k: int, until: float, warm_until: float, out: dict):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while (now := time.perf_counter()) < until:
            q = queries[out["next"] % len(queries)]
            out["next"] += 1
            start = time.perf_counter()
            writer.write(f"GET /search?{urlencode({'q': q, 'k': k})} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            ms = (time.perf_counter() - start) * 1000
            ok = status == 200 and len(json.loads(body)["results"]) == k
            if now >= warm_until:
                out["lat"].append(ms)
                out["errors"] += not ok
    finally:
        writer.close()


def run_client(url: str, queries: list[str], concurrency: int, warmup: float, duration: float, k: int) -> dict:
    host, port = url.split("//")[1].split(":")
    out = {"lat": [], "errors": 0, "next": 0}
    t0 = time.perf_counter()
    warm_until, until = t0 + warmup, t0 + warmup + duration

    async def main():
        await asyncio.gather(*(_client(host, int(port), queries, k, until, warm_until, out)
                               for _ in range(concurrency)))

    asyncio.run(main())
    lat = np.array(out["lat"])
    return {"requests": len(lat), "errors": out["errors"], "seconds": duration, "rps": len(lat) / duration,
            "p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95)),
            "p99": float(np.percentile(lat, 99)), "max": float(lat.max()), "sent": out["next"]}


# -- the index --------------------------------------------------------------------------------------------------
def build_index(directory: Path, n: int, frames: int, model: str, cache: Path) -> None:
    """n synthetic videos in the model's joint space with frame vectors and real thumbnails (skipped when built)."""
    from bench_search import caption_texts, commit_videos, joint_bases, mixed_videos
    from reelsearch.index.media import make_thumbnail
    from reelsearch.search import Searcher

    marker = directory / "bench-built.json"
    with Searcher(directory, model) as searcher:
        if marker.exists() and json.loads(marker.read_text()) == {"n": n, "frames": frames,
                                                                     "model_id": searcher.model_id}:
            return
        if len(searcher.library):
            raise SystemExit(f"{directory} holds another benchmark index; remove it")
        x = mixed_videos(joint_bases(searcher, caption_texts(6000), cache)[:5000], n)
        img = np.random.default_rng(1).integers(0, 255, (72, 128, 3), dtype=np.uint8)
        thumb = make_thumbnail(np.clip(img.astype(np.int16) // 4 + np.array([90, 120, 60]), 0, 255).astype(np.uint8))
        sql_s = commit_videos(searcher, x, frames, thumb)
        t = time.perf_counter()
        searcher.library.refresh()
        print(f"built {n} videos x {frames} frames (thumbnails {len(thumb)} B): SQLite {sql_s:.0f} s, "
              f"vector index ({searcher.library.vectors.structure}) {time.perf_counter() - t:.0f} s", flush=True)
        marker.write_text(json.dumps({"n": n, "frames": frames, "model_id": searcher.model_id}))


def query_texts(n: int) -> list[str]:
    """n distinct real MSVD captions that are not among the bases of the index."""
    from bench_search import SHARED

    captions = json.loads((SHARED / "msvd" / "captions_msvd.json").read_text())
    flat = sorted({c.strip().lower() for caps in captions.values() for c in caps if len(c.strip()) > 3})
    pick = np.random.default_rng(7).permutation(len(flat))
    return [flat[i] for i in pick[:n]]


# -- one configuration -------------------------------------------------------------------------------------------
def serve_and_measure(directory: Path, workers: int, batch: int, args) -> dict:
    import httpx

    from reelsearch.service.background import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "reelsearch", "serve", "--index", str(directory), "--port", str(port),
           "--workers", str(workers), "--batch", str(batch), "--query-cache", "0", "--no-access-log",
           "--threads", str(args.threads)]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server did not start: {server.stderr.read()}")
            time.sleep(0.5)
        time.sleep(args.settle)  # every worker has loaded its model and index
        queries_file = Path(tempfile.mkstemp(suffix=".json")[1])
        queries_file.write_text(json.dumps(query_texts(args.queries)))
        load_before = os.getloadavg()
        proc = subprocess.run([sys.executable, __file__, "client", "--url", url, "--queries-file", str(queries_file),
                               "--concurrency", str(args.concurrency), "--warmup", str(args.warmup), "--duration",
                               str(args.duration)], capture_output=True, text=True, check=True)
        queries_file.unlink()
        res = json.loads(proc.stdout)
        res.update(workers=workers, batch=batch, load_before=[round(v, 2) for v in load_before],
                   load_after=[round(v, 2) for v in os.getloadavg()])
        return res
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="bench", choices=["bench", "client"])
    ap.add_argument("--videos", type=int, default=100_000)
    ap.add_argument("--frames", type=int, default=8, help="frames (vectors + thumbnails) per video")
    ap.add_argument("--model", default="default")
    ap.add_argument("--configs", nargs="+", default=["1:1", "1:32", "2:1", "2:32"], help="WORKERS:BATCH each")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--duration", type=float, default=60.0, help="timed seconds per configuration")
    ap.add_argument("--warmup", type=float, default=10.0, help="untimed seconds of load first")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after /health answers before loading")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker (serve --threads)")
    ap.add_argument("--queries", type=int, default=30_000, help="distinct captions sent (no repeats within a run)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-serve")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-cache")
    ap.add_argument("--url")
    ap.add_argument("--queries-file", type=Path)
    ap.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    if args.mode == "client":
        queries = json.loads(args.queries_file.read_text())
        print(json.dumps(run_client(args.url, queries, args.concurrency, args.warmup, args.duration, 10)))
        return
    directory = args.work / f"index-{args.videos}-{args.frames}"
    build_index(directory, args.videos, args.frames, args.model, args.cache)
    results = []
    for config in args.configs:
        workers, batch = (int(v) for v in config.split(":"))
        r = serve_and_measure(directory, workers, batch, args)
        results.append(r)
        print(f"workers {workers} batch {batch:>2}: {r['rps']:6.1f} req/s  p50 {r['p50']:6.1f}  p95 {r['p95']:6.1f}  "
              f"p99 {r['p99']:6.1f}  max {r['max']:6.1f} ms  {r['requests']} requests, {r['errors']} errors  "
              f"load {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
