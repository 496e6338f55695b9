"""Seconds per training step of the named models, float32 against bfloat16 autocast (``--precision bf16``).

One step = forward (autocast for bf16), the config's loss in float32, backward, gradient clip, fused Adam, on a batch
of the config's size with Flickr8k-like shapes: images (one frame of 1280-d appearance features) and captions of 16
tokens (MiniLM features of 384-d, or vocabulary ids). Both precisions run in the same process, alternating, so the
ratio is comparable even on a shared machine.

    .venv/bin/python benchmarks/bench_train_step.py --models torabi-m2 scde-ablation-transformer scde --threads 1
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch


def build(name: str):
    from reelsearch.losses import train_losses
    from reelsearch.models import VocabTextProcessor, create_model, model_config

    cfg = model_config(name)
    proc = None
    if cfg.features.text.kind == "vocab":
        proc = VocabTextProcessor([f"w{i}" for i in range(8000)])
        cfg = model_config(name, model__text__glove_init=None)  # timing only: the initial values do not matter
    model = create_model(cfg, proc).train()
    return model, train_losses(cfg.train).main, cfg


def batches(model, cfg, length: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b = cfg.train.batch_size
    lengths = torch.randint(length // 2, length + 1, (b,), generator=g)
    if cfg.features.text.kind == "vocab":
        text = {"ids": torch.randint(2, model.text_processor.vocab_size, (b, length), generator=g), "lengths": lengths}
    else:
        d = cfg.features.text.dim
        text = {"feats": torch.randn(b, length, d, generator=g), "lengths": lengths,
                "mask": torch.arange(length)[None] < lengths[:, None]}
    dim = next(iter(cfg.features.video.values())).dim
    video = {"feats": torch.randn(b, 1, dim, generator=g), "lengths": torch.ones(b, dtype=int)}
    return text, video


def train_step(model, loss_fn, opt, text: dict, video: dict, bf16: bool) -> float:
    """One optimisation step; returns the loss."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        sims = model(text, video)
    loss = loss_fn(sims.float())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
    opt.step()
    return float(loss.detach())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["torabi-m1", "torabi-m2", "mithun-expert",
                                                     "scde-ablation-transformer", "scde"])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per precision and round")
    ap.add_argument("--rounds", type=int, default=2, help="alternating fp32 / bf16 rounds (best round kept)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print("| model | batch | fp32 s/step | bf16 s/step | fp32 / bf16 | loss rel. diff (step 1) |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        torch.manual_seed(0)
        model, loss_fn, cfg = build(name)
        text, video = batches(model, cfg)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, fused=True)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        step = partial(train_step, model, loss_fn, opt, text, video)

        first = {}
        for bf16 in (False, True):  # the same starting weights: how far apart the first losses are
            model.load_state_dict(state)
            first[bf16] = step(bf16)
        best = {False: float("inf"), True: float("inf")}
        for _ in range(args.rounds):
            for bf16 in (False, True):
                step(bf16)  # warm-up
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    step(bf16)
                best[bf16] = min(best[bf16], (time.perf_counter() - t0) / args.steps)
        diff = abs(first[True] - first[False]) / max(abs(first[False]), 1e-12)
        print(f"| {name} | {cfg.train.batch_size} | {best[False]:.3f} | {best[True]:.3f} | "
              f"{best[False] / best[True]:.2f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
