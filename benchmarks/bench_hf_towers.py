"""What a CLIP-family model (``--model hf:...``) costs on a CPU, beside the bundled model, in the same run: full-size
architectures with random weights (CLIP ViT-B/32 and SigLIP base patch16 224: transformers' default configs, made
by ``tests/hf_checkpoints.py``; the cost of a forward pass does not depend on the weights' values).

  * index: frames/s of the frame extractors over the same decoded frames (``--frames`` random 256x341 RGB frames,
    the decode size of a 4:3 video at short side 256), batches of 16 (the hf image tower) / the bundled model's
    two EfficientNet-Lite CNNs; wall time and process CPU time;
  * query encoding: ``model.encode_text`` of one short query at a time (``--queries``), p50 / p99 in ms (wall) and
    the mean CPU ms.
Each model runs in ONNX Runtime float32 (the default on a CPU) and int8: the text side as ``--text-encoder int8``
runs it (``model.use_text_encoder("int8")``), the hf image tower's weight products quantised the same way
(``Towers(..., int8=True)``: measured here, indexing itself runs the float32 tower; the bundled CNNs have no int8
variant). The variants run interleaved (round-robin, frame batch by frame batch, query by query), so the machine's
changing load falls on all alike; the exports are made before timing. The load average is recorded before and
after.

.venv/bin/python benchmarks/bench_hf_towers.py --frames 32 --queries 40 [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import hf_checkpoints  # noqa: E402
import reelsearch  # noqa: E402
from reelsearch.towers.clip import Towers  # noqa: E402

QUERIES = ["a dog runs on the grass", "two people ride a red bike in the park", "a child plays with a ball",
           "a man sits on the beach", "a woman jumps over the water", "the car on the street in the snow"]


def variants(tmp: Path) -> dict[str, tuple]:
    """{name: (index(frames) or None, query(text))} of the bundled model and the two towers, float32 and int8."""
    out = {}
    for name, spec in {"default": "default",
                       "clip-vit-b32": f"hf:{hf_checkpoints.make_clip(tmp / 'clip', full=True)}",
                       "siglip-base-p16-224": f"hf:{hf_checkpoints.make_siglip(tmp / 'siglip', full=True)}"}.items():
        for precision in ("float32", "int8"):
            model = reelsearch.load(spec)
            assert model.use_text_encoder(precision) == precision, (name, precision)
            if spec == "default":
                pipeline = model.feature_pipeline()
                extractors = [pipeline.extractor(n) for n in pipeline.frame_names]
                index = (lambda f, ex=extractors: [e.extract_frames(f) for e in ex]) if precision == "float32" \
                    else None
            else:
                towers = Towers(spec, runtime="onnxruntime", int8=precision == "int8")
                index = lambda f, t=towers: t.encode_images(f, 16)  # noqa: E731
            out[f"{name} {precision}"] = (index, lambda text, m=model: m.encode_text([text]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs = variants(Path(tempfile.mkdtemp(prefix="bench-hf-")))
    frames = np.random.default_rng(0).integers(0, 256, (args.frames, 256, 341, 3), dtype=np.uint8)
    for index, query in runs.values():  # exports, quantisation and first sessions, outside the timing
        query(QUERIES[0])
        if index is not None:
            index(frames[:2])
    wall = dict.fromkeys(runs, 0.0)
    cpu = dict.fromkeys(runs, 0.0)
    for start in range(0, len(frames), 16):
        for name, (index, _) in runs.items():
            if index is not None:
                w, c = time.perf_counter(), time.process_time()
                index(frames[start:start + 16])
                wall[name] += time.perf_counter() - w
                cpu[name] += time.process_time() - c
    query_ms = {name: [] for name in runs}
    query_cpu = dict.fromkeys(runs, 0.0)
    for i in range(args.queries):
        text = f"{QUERIES[i % len(QUERIES)]} {i}"
        for name, (_, query) in runs.items():
            w, c = time.perf_counter(), time.process_time()
            query(text)
            query_ms[name].append(1000 * (time.perf_counter() - w))
            query_cpu[name] += time.process_time() - c
    result = {name: {"index_frames_per_s_wall": round(len(frames) / wall[name], 2) if wall[name] else None,
                     "index_cpu_s_per_frame": round(cpu[name] / len(frames), 4) if cpu[name] else None,
                     "query_ms_p50": round(float(np.percentile(query_ms[name], 50)), 1),
                     "query_ms_p99": round(float(np.percentile(query_ms[name], 99)), 1),
                     "query_cpu_ms_mean": round(1000 * query_cpu[name] / args.queries, 1)}
              for name in runs}
    text = json.dumps({"frames": len(frames), "queries": args.queries, "cpus": os.cpu_count(),
                       "load_before": [round(x, 2) for x in load_before],
                       "load_after": [round(x, 2) for x in os.getloadavg()], "results": result}, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
