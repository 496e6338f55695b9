"""What a CLIP-family model (``--model hf:...``) costs on a CPU, beside the bundled model, in the same run: full-size
architectures with random weights (CLIP ViT-B/32 and SigLIP base patch16 224: transformers' default configs, made
by ``tests/hf_checkpoints.py``; the cost of a forward pass does not depend on the weights' values).

  * index: frames/s of the frame extractors over the same decoded frames (``--frames`` random 256x341 RGB frames,
    the decode size of a 4:3 video at short side 256), batches of 16 (the hf image tower) / the bundled model's
    two EfficientNet-Lite CNNs; wall time and process CPU time;
  * query encoding: ``model.encode_text`` of one short query at a time (``--queries``), p50 / p99 in ms.
The variants run interleaved (round-robin, frame batch by frame batch, query by query), so the machine's changing
load falls on all alike. ONNX Runtime float32 (the default on a CPU); the exports are made before timing.

.venv/bin/python benchmarks/bench_hf_towers.py --frames 64 --queries 50 [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import hf_checkpoints  # noqa: E402
import reelsearch  # noqa: E402

QUERIES = ["a dog runs on the grass", "two people ride a red bike in the park", "a child plays with a ball",
           "a man sits on the beach", "a woman jumps over the water", "the car on the street in the snow"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-hf-"))
    models = {"default": reelsearch.load("default"),
              "clip-vit-b32": reelsearch.load(f"hf:{hf_checkpoints.make_clip(tmp / 'clip', full=True)}"),
              "siglip-base-p16-224": reelsearch.load(f"hf:{hf_checkpoints.make_siglip(tmp / 'siglip', full=True)}")}
    frames = np.random.default_rng(0).integers(0, 256, (args.frames, 256, 341, 3), dtype=np.uint8)
    extractors = {name: [m.feature_pipeline().extractor(n) for n in m.feature_pipeline().frame_names]
                  for name, m in models.items()}
    for name, model in models.items():  # exports and first sessions, outside the timing
        model.encode_text(QUERIES[:1])
        for ex in extractors[name]:
            ex.extract_frames(frames[:2])
    wall = dict.fromkeys(models, 0.0)
    cpu = dict.fromkeys(models, 0.0)
    for start in range(0, len(frames), 16):
        for name in models:
            w, c = time.perf_counter(), time.process_time()
            for ex in extractors[name]:
                ex.extract_frames(frames[start:start + 16])
            wall[name] += time.perf_counter() - w
            cpu[name] += time.process_time() - c
    query_ms = {name: [] for name in models}
    for i in range(args.queries):
        text = f"{QUERIES[i % len(QUERIES)]} {i}"
        for name, model in models.items():
            w = time.perf_counter()
            model.encode_text([text])
            query_ms[name].append(1000 * (time.perf_counter() - w))
    result = {name: {"index_frames_per_s_wall": round(len(frames) / wall[name], 1),
                     "index_cpu_s_per_frame": round(cpu[name] / len(frames), 4),
                     "query_ms_p50": round(float(np.percentile(query_ms[name], 50)), 1),
                     "query_ms_p99": round(float(np.percentile(query_ms[name], 99)), 1),
                     "frame_extractors": [ex.name for ex in extractors[name]]}
              for name in models}
    text = json.dumps({"frames": len(frames), "queries": args.queries, "results": result}, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
