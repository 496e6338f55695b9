"""What tuning a model's CNN tail costs on this machine (`reelsearch tune-cnn`), against tuning the whole CNN.

    .venv/bin/python benchmarks/bench_tune_cnn.py [--model default] [--batches 3] [--tuned DIR] [--json OUT]

For each expert of ``--model`` over EfficientNet-Lite features, on Flickr8k train (6,000 images, 4 views each):
  * trunk caching: images/s of decoding + views + the frozen trunk (timed on 128 images into a temporary cache);
  * one tail epoch: the Trainer's training seconds of a ``TailTask``'s first epoch (every training image once, batches
    of 128; ``epoch_seconds`` of its log), from the trunk cache (filled first if it is not there: minutes);
  * the whole CNN instead: seconds per batch of 128 of a forward and backward pass through the entire network
    (the best of ``--batches``), times the batches of an epoch, and the ratio to the tail epoch.
``--tuned DIR``: also time index-time extraction (``benchmarks/bench_extract.py --model DIR``: decode and every
CNN of the tuned model, video frames/s, ONNX Runtime and torch). Needs ../shared/data.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def whole_network_step(tuner, batches: int) -> float:
    """Best seconds of one training step (forward + backward + Adam) through the whole CNN on 128 photos."""
    import numpy as np
    import torch

    from reelsearch.media.decode import decode_frames

    extractor = tuner.extractor
    net = copy.deepcopy(extractor.model).train()
    for p in net.parameters():
        p.requires_grad_(True)
    opt = torch.optim.Adam(net.parameters(), lr=1e-5)
    paths = sorted((SHARED / "flickr8k" / "images").glob("*.jpg"))[:tuner.cfg.batch_size]
    frames = np.stack([decode_frames(p, "interval:0.5", short_side=256).images[0][:256, :256] for p in paths])
    x = extractor.preprocess(frames)
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        loss = net(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_expert(name, expert, source, batches: int) -> dict:
    from reelsearch.config import TuneConfig
    from reelsearch.config.typed import apply_section
    from reelsearch.training.cnn_tail import TailTask, TrunkCache
    from reelsearch.training.trainer import Trainer

    cfg = apply_section(TuneConfig(), {"tune.epochs": 1})
    t0 = time.perf_counter()
    tuner = TailTask(name, expert, source, cfg, "train", "dev", progress=True)
    setup = time.perf_counter() - t0
    items = source.dataset.items("train")[:128]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["REELSEARCH_CACHE_DIR"], saved = tmp, os.environ.get("REELSEARCH_CACHE_DIR")
        try:
            cache = TrunkCache(source, tuner.recipe, tuner.extractor, tuner.block, cfg.views, cfg.seed)
            t0 = time.perf_counter()
            cache.rows(items, progress=False)
            trunk_rate = len(items) / (time.perf_counter() - t0)
        finally:
            os.environ.pop("REELSEARCH_CACHE_DIR")
            if saved is not None:
                os.environ["REELSEARCH_CACHE_DIR"] = saved
    with tempfile.TemporaryDirectory() as run:
        epoch = Trainer(tuner, Path(run), progress=True).fit()["history"][1]["epoch_seconds"]
    n_batches = len(tuner.train_rows) // cfg.batch_size
    step = whole_network_step(tuner, batches)
    row = {"expert": name, "extractor": tuner.recipe.extractor, "from_block": tuner.block,
           "tuned_parameters": sum(p.numel() for p in tuner.tail.parameters()),
           "train_images": len(tuner.train_rows), "views": cfg.views, "setup_s": round(setup, 1),
           "trunk_images_per_s": round(trunk_rate, 1), "tail_epoch_s": round(epoch, 1),
           "whole_cnn_step_s": round(step, 3), "whole_cnn_epoch_s": round(step * n_batches, 1),
           "speedup": round(step * n_batches / epoch, 1)}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--batches", type=int, default=3, help="whole-CNN steps timed (best of)")
    ap.add_argument("--tuned", help="a tuned model whose index-time extraction to time as well")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    from reelsearch.features.caches import DatasetSource
    from reelsearch.models import load_model
    from reelsearch.training.cnn_tail import tunable_experts

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    source, _ = DatasetSource.open(f"flickr8k:{SHARED / 'flickr8k'}")
    out = {"model": args.model, "threads": args.threads,
           "experts": [bench_expert(k, model.experts[k], source, args.batches) for k in tunable_experts(model)]}
    if args.tuned:
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_extract.py"), "--model", args.tuned,
                            "--json", tmp.name], check=True)
            out["index_extraction"] = json.loads(Path(tmp.name).read_text())["model"]
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
