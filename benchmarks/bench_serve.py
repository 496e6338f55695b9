"""Serving throughput: concurrent clients against `reelsearch serve` over a 100,000-video index.

The servers are the real command (`python -m reelsearch serve --index DIR --workers W --batch B --query-cache C`),
one per configuration, all started first (an idle server costs no CPU); the load comes from a client in another
process (this script's ``client`` mode): C concurrent keep-alive HTTP/1.1 connections (asyncio, hand-written
requests, so the client costs little CPU), each sending ``GET /search?q=<caption>&k=10`` as soon as its previous
answer arrived (a closed loop). Every answer is checked (status 200, valid JSON, k results). The configurations
are measured in interleaved rounds (after a short untimed warm-up each time), so that the shared machine's changing
load falls on all of them alike; the figures pool every round.

Configurations are ``WORKERS:BATCH[:CACHE][:TEXT]``: TEXT is ``f32`` (float32 MiniLM, in ONNX Runtime where it
is installed: ``--text-encoder float32``, the default token), ``torch`` (float32 MiniLM in torch,
``REELSEARCH_TEXT_RUNTIME=torch``), ``int8`` (``--text-encoder int8``), ``static`` (the model's static text
encoder, ``--text-encoder static``) or ``student`` (the model's text tower cut short, ``--text-encoder student``;
``reelsearch distill-text --student``); serve's default is the fastest of the last two that the model has and that
was measured within 3 dev RSum of float32.

A configuration ending in ``@base`` runs the server from another checkout's source (``--base-src``, e.g. the main
branch before a change), so that old and new code are measured in one run.

Before the load, ``--encode-sizes`` times the text encoder of each configuration in this process (``encode_text`` of
real captions, batches of each size, the sizes alternating): p50 / p99 ms per batch, what batching buys per query.

Queries: real MSVD captions, each asked once (no configuration can be helped by a cache), except for
configurations with a query cache (``W:B:C``, C > 0), which are asked 200 captions over and over: the cost of
serving without the text encoder.

The index is built once per model and size (cached under ``--work``): the default model's own text embeddings of
5,000 real MSVD captions are the semantic bases; each video mixes two of them plus noise, with ``--frames``
per-frame vectors and a real 96-px JPEG thumbnail per frame, committed through the library's commit path with the
searcher's model id (no decoding), then the vector index is built (HNSW above 20,000 videos).

.venv/bin/python benchmarks/bench_serve.py --videos 100000 --configs 1:1 1:32 2:1 2:32 2:32:1024 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import numpy as np

from reelsearch.text.minilm_onnx import RUNTIME_ENV

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
    return {"requests": len(out["lat"]), "errors": out["errors"], "seconds": duration, "latencies": out["lat"],
            "sent": out["next"]}


# -- the index --------------------------------------------------------------------------------------------------
def build_index(directory: Path, n: int, frames: int, model: str, cache: Path) -> None:
    """n synthetic videos in the model's joint space with frame vectors and real thumbnails (skipped when built)."""
    from bench_search import caption_texts, commit_videos, joint_bases, mixed_videos
    from reelsearch.index.media import make_thumbnail
    from reelsearch.search import Searcher

    marker = directory / "bench-built.json"
    if marker.exists():
        with Searcher(directory, model) as searcher:
            if json.loads(marker.read_text()) == {"n": n, "frames": frames, "model_id": searcher.model_id}:
                return
        print(f"{directory}: built for another model; building it again", flush=True)
        shutil.rmtree(directory)  # this script's own index (it has the marker), of an earlier model
    with Searcher(directory, model) as searcher:
        if len(searcher.catalog):
            raise SystemExit(f"{directory} holds another index (no {marker.name}); remove it")
        x = mixed_videos(joint_bases(searcher, caption_texts(6000), cache)[:5000], n)
        img = np.random.default_rng(1).integers(0, 255, (72, 128, 3), dtype=np.uint8)
        thumb = make_thumbnail(np.clip(img.astype(np.int16) // 4 + np.array([90, 120, 60]), 0, 255).astype(np.uint8))
        sql_s = commit_videos(searcher, x, frames, thumb)
        t = time.perf_counter()
        searcher.catalog.refresh()
        print(f"built {n} videos x {frames} frames (thumbnails {len(thumb)} B): SQLite {sql_s:.0f} s, "
              f"vector index ({searcher.catalog.vectors.structure}) {time.perf_counter() - t:.0f} s", flush=True)
        marker.write_text(json.dumps({"n": n, "frames": frames, "model_id": searcher.model_id}))


def query_texts(n: int) -> list[str]:
    """n distinct real MSVD captions that are not among the bases of the index."""
    from bench_search import SHARED

    captions = json.loads((SHARED / "msvd" / "captions_msvd.json").read_text())
    flat = sorted({c.strip().lower() for caps in captions.values() for c in caps if len(c.strip()) > 3})
    pick = np.random.default_rng(7).permutation(len(flat))
    return [flat[i] for i in pick[:n]]


# -- the servers and the measurements ---------------------------------------------------------------------------
#: serve's text encoders: float32 MiniLM (in ONNX Runtime where installed), float32 in torch
#: (REELSEARCH_TEXT_RUNTIME=torch), int8 MiniLM, the model's static or student text encoder (--text-encoder)
TEXT_ENCODERS = {"f32": "float32", "torch": "float32", "int8": "int8", "static": "static", "student": "student"}


def parse_config(text: str) -> tuple[int, int, int, str, str]:
    """``WORKERS:BATCH[:CACHE][:f32|torch|int8|static|student][@base]`` -> (workers, batch, cache, text encoder, source:
    "base" or "")."""
    text, _, source = text.partition("@")
    parts = text.split(":")
    encoder = parts.pop() if parts[-1] in TEXT_ENCODERS else "f32"
    numbers = [int(v) for v in parts] + [0] * (3 - len(parts))
    return numbers[0], numbers[1], numbers[2], encoder, source


def start_server(directory: Path, workers: int, batch: int, cache: int, text: str, source: str, threads: int,
                 base_src: Path | None = None, model: str = "default"):
    """`reelsearch serve` in its own process group (``source`` "base": from ``base_src``; ``model``: passed on
    unless "default", so that a model folder's own parts, a student's, serve rather than the bundled model's of
    the same name); returns (process, url)."""
    from reelsearch.service.background import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "reelsearch", "serve", "--index", str(directory), "--port", str(port),
           "--workers", str(workers), "--batch", str(batch), "--query-cache", str(cache), "--no-access-log",
           "--threads", str(threads), "--text-encoder", TEXT_ENCODERS[text]] + \
        ([] if model == "default" else ["--model", model])
    env = {**os.environ, **({RUNTIME_ENV: "torch"} if text == "torch" else {})}
    if source == "base":
        if base_src is None:
            raise SystemExit("a configuration @base needs --base-src")
        env["PYTHONPATH"] = str(base_src.resolve())
    else:
        env["PYTHONPATH"] = str(ROOT / "src")
    return (subprocess.Popen(cmd, stderr=subprocess.DEVNULL, start_new_session=True, env=env),
            f"http://127.0.0.1:{port}")


def wait_ready(servers: list, timeout: float = 900) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    for proc, url in servers:
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server {url} did not start")
            time.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, queries: list[str], args, pid: int) -> dict:
    """One timed run of the client, in its own process; ``cpu``: the CPU seconds the server ``pid`` used meanwhile
    (warm-up included: what a shared machine's load does not change much)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(queries, fh)
    load_before, cpu_before = os.getloadavg()[0], cpu_seconds(pid)
    proc = subprocess.run([sys.executable, __file__, "client", "--url", url, "--queries-file", fh.name,
                           "--concurrency", str(args.concurrency), "--warmup", str(args.warmup), "--duration",
                           str(args.duration)], capture_output=True, text=True, check=True)
    os.unlink(fh.name)
    return {**json.loads(proc.stdout), "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "cpu": cpu_seconds(pid) - cpu_before}


def encode_timings(model_name: str, encoders: list[str], sizes: list[int], queries: list[str], reps: int) -> None:
    """Print p50 / p99 ms of the model's ``encode_text`` for batches of each size, per text encoder (one thread)."""
    import torch

    from reelsearch.models import load_model

    torch.set_num_threads(1)
    for text in encoders:
        if text == "torch":
            continue  # the runtime is chosen per process (REELSEARCH_TEXT_RUNTIME)
        model = load_model(model_name).eval()
        model.use_text_encoder(TEXT_ENCODERS[text])
        times: dict[int, list[float]] = {n: [] for n in sizes}
        offset = 0
        with torch.no_grad():
            model.encode_text(queries[:max(sizes)])  # warm up
            for _ in range(reps):
                for n in sizes:
                    batch = queries[offset:offset + n]
                    offset = (offset + n) % (len(queries) - max(sizes))
                    start = time.perf_counter()
                    model.encode_text(batch)
                    times[n].append((time.perf_counter() - start) * 1000)
        for n in sizes:
            p50, p99 = np.percentile(times[n], [50, 99])
            print(f"encode {text:>6} batch {n:>2}: p50 {p50:6.2f}  p99 {p99:6.2f} ms  ({p50 / n:5.2f} ms per query "
                  "at p50)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="bench", choices=["bench", "client"])
    ap.add_argument("--videos", type=int, default=100_000)
    ap.add_argument("--frames", type=int, default=8, help="frames (vectors + thumbnails) per video")
    ap.add_argument("--model", default="default")
    ap.add_argument("--configs", nargs="+", default=["1:1", "1:32", "2:1", "2:32", "1:32:1024", "1:32:0:int8"],
                    help="WORKERS:BATCH[:CACHE][:TEXT] each (CACHE > 0: a query cache, and 200 queries asked over "
                         "and over; TEXT: f32, torch, int8, static or student)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurements of every configuration")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--duration", type=float, default=20.0, help="timed seconds per configuration and round")
    ap.add_argument("--warmup", type=float, default=5.0, help="untimed seconds of load first")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after /health answers before loading")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker (serve --threads)")
    ap.add_argument("--queries", type=int, default=30_000, help="distinct captions sent (no repeats within a run)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-serve")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-bench-cache")
    ap.add_argument("--base-src", type=Path, help="the source folder (src/) of configurations ending in @base")
    ap.add_argument("--base-work", type=Path,
                    help="the --work of configurations ending in @base (default: --work's): a copy of it, made before "
                         "this code opens it, where this code migrates the index to a schema the base refuses")
    ap.add_argument("--encode-sizes", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32],
                    help="batch sizes whose encode time is measured first (none: skip)")
    ap.add_argument("--encode-reps", type=int, default=50, help="batches of each size timed")
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
    configs = [parse_config(c) for c in args.configs]
    distinct = query_texts(args.queries)
    if args.encode_sizes:
        encode_timings(args.model, list(dict.fromkeys(c[3] for c in configs)), args.encode_sizes, distinct[-2000:],
                       args.encode_reps)
    base_directory = (args.base_work or args.work) / directory.name
    servers = [start_server(base_directory if config[4] == "base" else directory, *config, args.threads, args.base_src,
                            args.model) for config in configs]
    repeated = distinct[:200]  # for configurations with a query cache: every query is asked again and again
    try:
        wait_ready(servers)
        time.sleep(args.settle)  # every worker has loaded its model and index
        runs: dict[tuple, list[dict]] = {c: [] for c in configs}
        offset = 0
        for rnd in range(args.rounds):  # interleaved, so that the machine's changing load hits every config alike
            for config, (proc, url) in zip(configs, servers):
                queries = repeated if config[2] else distinct[offset:] + distinct[:offset]
                offset = (offset + 5000) % len(distinct)  # fresh queries for every run
                r = measure(url, queries, args, proc.pid)
                runs[config].append(r)
                print(f"round {rnd + 1} workers {config[0]} batch {config[1]:>2} cache {config[2]:>4} {config[3]:>6} "
                      f"{config[4] or 'new':>4}: "
                      f"{r['requests'] / r['seconds']:6.1f} req/s  server CPU "
                      f"{1000 * r['cpu'] / r['sent']:5.1f} ms/request  load {r['load'][0]:.2f} -> {r['load'][1]:.2f}",
                      flush=True)
    finally:
        for proc, _ in servers:
            with contextlib.suppress(ProcessLookupError):  # (one that failed to start has ended)
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in servers:
            proc.wait(timeout=60)
    results = []
    print(f"\n{args.concurrency} clients, {args.rounds} rounds x {args.duration:.0f} s per configuration "
          f"({args.videos} videos):")
    for config, rs in runs.items():
        lat = np.concatenate([r["latencies"] for r in rs])
        per_round = [r["requests"] / r["seconds"] for r in rs]
        row = {"workers": config[0], "batch": config[1], "cache": config[2], "text": config[3],
               "source": config[4] or "new",
               "rps": len(lat) / sum(r["seconds"] for r in rs), "rps_rounds": per_round,
               "p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95)),
               "p99": float(np.percentile(lat, 99)), "max": float(lat.max()), "requests": int(len(lat)),
               "errors": sum(r["errors"] for r in rs), "load": [r["load"] for r in rs],
               "cpu_ms": 1000 * sum(r["cpu"] for r in rs) / sum(r["sent"] for r in rs)}
        results.append(row)
        print(f"workers {row['workers']} batch {row['batch']:>2} cache {row['cache']:>4} {row['text']:>6} "
              f"{row['source']:>4}: "
              f"{row['rps']:6.1f} req/s "
              f"(rounds {', '.join(f'{v:.0f}' for v in per_round)})  p50 {row['p50']:6.1f}  p95 {row['p95']:6.1f}  "
              f"p99 {row['p99']:6.1f}  max {row['max']:6.1f} ms  {row['requests']} requests, {row['errors']} errors, "
              f"server CPU {row['cpu_ms']:.1f} ms/request")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
