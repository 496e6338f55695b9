"""Frame CNN speed: EfficientNet-Lite in torch (the extractor's own model: BatchNorm folded, channels_last) against
the same model exported to ONNX Runtime, on the CPU; the question is whether indexing with two CNNs (Lite0 and
Lite2, the fused default candidate of issue 12) can keep 20 frames/s on 2 cores.

    .venv/bin/python benchmarks/bench_cnn_runtime.py [--batches 20] [--batch 8] [--threads 2]

Timed: the forward pass of a batch of ``--batch`` preprocessed frames (real Flickr8k dev photos when
../shared/data is there, else random pixels): the extractor's torch model against its own ONNX Runtime session
(``EfficientNetLite.onnx_session``), alternating batch by batch; decoding and resizing
are not included (``bench_extract.py`` times the whole extraction). Also printed: the largest difference between
the two runtimes' 1280-d features (the export must not change them) and both CNNs together in each runtime.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def frames(n: int, seed: int = 0) -> np.ndarray:
    """``n`` uint8 RGB frames: Flickr8k dev photos when available, else random pixels."""
    import cv2

    photos = sorted((SHARED / "flickr8k" / "images").glob("*.jpg"))[:n]
    if len(photos) == n:
        return np.stack([cv2.resize(cv2.imread(str(p))[:, :, ::-1], (320, 240)) for p in photos])
    return np.random.default_rng(seed).integers(0, 255, (n, 240, 320, 3), dtype=np.uint8)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=20, help="timed batches per runtime and CNN")
    ap.add_argument("--batch", type=int, default=8, help="frames per forward pass (the extractor's CPU default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=["efficientnet-lite0", "efficientnet-lite2"])
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from reelsearch.features.extractors.appearance import EfficientNetLite

    pixels = frames(args.batch)
    print(f"{args.threads} threads, batch {args.batch}, load average {os.getloadavg()[0]:.2f}", flush=True)
    per_frame = {}
    for name in args.variants:
        ext = EfficientNetLite(name, runtime="onnxruntime")
        x = ext.preprocess(pixels)
        sess = ext.onnx_session()  # the extractor's own export (cached), with torch's thread count
        xn = x.contiguous().numpy()
        with torch.inference_mode():
            ref = ext.model(x).numpy()
        diff = float(np.abs(sess.run(None, {"x": xn})[0] - ref).max())
        times = {"torch": [], "onnxruntime": []}
        for i in range(args.batches + 2):  # two untimed warm-up rounds
            for runtime in times:
                t = time.perf_counter()
                if runtime == "torch":
                    with torch.inference_mode():
                        ext.model(x)
                else:
                    sess.run(None, {"x": xn})
                if i >= 2:
                    times[runtime].append(time.perf_counter() - t)
        for runtime, ts in times.items():
            per_frame[(name, runtime)] = float(np.median(ts)) / args.batch
        t, o = per_frame[(name, "torch")], per_frame[(name, "onnxruntime")]
        print(f"{name}: torch {1 / t:6.1f} frames/s, ONNX Runtime {1 / o:6.1f} frames/s ({t / o:.2f}x); "
              f"max |difference| {diff:.2e} (features up to {np.abs(ref).max():.1f})", flush=True)
    if len(args.variants) > 1:
        for runtime in ("torch", "onnxruntime"):
            total = sum(per_frame[(n, runtime)] for n in args.variants)
            print(f"all together, {runtime}: {1 / total:.1f} frames/s (CNN forward only)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
