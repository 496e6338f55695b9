"""The temporal check at a larger scale and over several seeds (docs/temporal-check.md).

Order task: held-out pairs of synthetic clips with the same two shots in opposite orders; each caption must score its
own clip above the twin (swap accuracy, chance 0.5). Video encoders: mean pooling, M3 attention, bi-GRU, SMSDC on
the frames, and SCDE's bi-GRU + SMSDC; one text encoder (vocab GRU), loss (vse), budget and Trainer for all.
Attention task: a caption naming one event of a 4-shot clip against 1-shot clips of the same colour (mean vs M3).

.venv/bin/python benchmarks/bench_temporal.py --seeds 0 1 2 --train-pairs 300 --epochs 10 --threads 1
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch

from reelsearch.config import TrainConfig
from reelsearch.datasets.synthetic import clip_features, order_pairs, random_clip, swap_accuracy, synthetic_clip_recipe
from reelsearch.features.pairs import PairData
from reelsearch.losses import TrainLosses, create_loss
from reelsearch.models import VocabTextProcessor, create_model
from reelsearch.training.joint_task import JointTask
from reelsearch.training.trainer import Trainer

ORDER_ENCODERS = {
    "mean": {"sequence": None, "pool": "mean"},
    "m3": {"sequence": None, "pool": "mean"},
    "bigru": {"sequence": "bigru", "hidden_size": 64, "pool": "mean"},
    "smsdc": {"sequence": None, "pool": "mean", "smsdc": {"n": 4, "m": 2}},
    "bigru+smsdc": {"sequence": "bigru", "hidden_size": 64, "pool": "mean", "smsdc": {"n": 4, "m": 2}},
}
MOVES = ("moves left", "moves right", "moves up", "moves down")


def build(encoder: dict, attention: bool, feature_dim: int, processor):
    return create_model(
        "mithun-expert", text_processor=processor,
        model={"text": {"encoder": {"embed_dim": 32, "hidden_size": 64}, "projection": {"dim": 64}},
               "video": {"encoder": encoder,
                         "attention": {"dim": 32} if attention else None, "projection": {"dim": 64}}},
        features={"video": {"appearance": synthetic_clip_recipe(feature_dim)}})


def pair_data(captions, cap2vid, clips, feats) -> PairData:
    return PairData(captions, np.asarray(cap2vid), [c.id for c in clips],
                    {"appearance": [f.astype(np.float16) for f in feats]})


@torch.inference_mode()
def sims_of(model, data: PairData, n_videos: int):
    model.eval()
    cpu = torch.device("cpu")
    t = model.text_forward(data.text_batch(model.text_processor, np.arange(len(data.captions)), cpu))
    v = model.video_forward(data.video_batch(np.arange(n_videos), cpu))
    return model.similarity(t, v).numpy(), t, v


def fit(model, data, cfg) -> float:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        Trainer(JointTask(model, TrainLosses(create_loss("vse")), data, None, cfg), out, progress=False).fit()
    return time.perf_counter() - start


def order_task(seed: int, args) -> dict:
    train = [c for p in order_pairs(args.train_pairs, seed * 10, "train") for c in p]
    test = [c for p in order_pairs(args.test_pairs, seed * 10 + 1, "test", exclude=train) for c in p]
    proc = VocabTextProcessor.build([c.caption for c in train])
    dim = args.grid * args.grid * 3
    tr = pair_data([c.caption for c in train], range(len(train)), train, clip_features(train, grid=args.grid))
    te = pair_data([c.caption for c in test], range(len(test)), test, clip_features(test, grid=args.grid))
    cfg = TrainConfig(epochs=args.epochs, batch_size=50, lr=2e-3, grad_clip=2.0, checkpoint_every=0, seed=seed)
    out = {}
    for name, enc in ORDER_ENCODERS.items():
        torch.manual_seed(seed)
        model = build(enc, name == "m3", dim, proc)
        seconds = fit(model, tr, cfg)
        sims = sims_of(model, te, len(test))[0]
        acc, ties = swap_accuracy(sims)
        o = np.arange(0, len(sims), 2)
        r1 = float(np.mean(sims[o][:, o].argmax(1) == np.arange(len(o))))
        out[name] = {"swap_accuracy": acc, "ties": ties, "R@1": r1, "train_s": round(seconds, 1)}
        print(f"seed {seed} order {name:12s} swap acc {acc:.3f} ties {ties:.2f} R@1 {r1:.3f} ({seconds:.0f} s)",
              flush=True)
    return out


def attention_task(seed: int, args) -> dict:
    rng = np.random.default_rng(seed)
    fpe = 4
    clips = [random_clip(rng, f"c{i}", int(rng.choice([1, 4])), fpe, actions=MOVES) for i in range(600)]
    train, test = clips[:400], clips[400:]
    proc = VocabTextProcessor.build([e.phrase for c in train for e in c.events])

    def data(cl):
        caps = [e.phrase for c in cl for e in c.events]
        return pair_data(caps, [i for i, c in enumerate(cl) for _ in c.events], cl, clip_features(cl, grid=8))

    tr, te = data(train), data(test)
    shots = [k for c in test for k in range(len(c.events))]
    cfg = TrainConfig(epochs=args.epochs, batch_size=50, lr=5e-3, grad_clip=2.0, checkpoint_every=0, seed=seed)
    out = {}
    for name in ("mean", "m3"):
        torch.manual_seed(seed)
        model = build(ORDER_ENCODERS["mean"], name == "m3", 192, proc)
        seconds = fit(model, tr, cfg)
        sims, t, v = sims_of(model, te, len(test))
        with torch.inference_mode():
            w = model.attention_weights(t, v).numpy() if name == "m3" else None
        wins, mass = [], []
        for i, own in enumerate(te.cap2vid):
            if len(test[own].events) != 4:
                continue
            ev = test[own].events[shots[i]]
            wins += [sims[i, own] > sims[i, j] for j, c in enumerate(test)
                     if len(c.events) == 1 and c.events[0].colour == ev.colour and c.events[0].shape != ev.shape]
            if w is not None:
                mass.append(float(w[i, own, shots[i] * fpe:(shots[i] + 1) * fpe].sum()))
        out[name] = {"win_vs_same_colour": float(np.mean(wins)),
                     "attention_mass": float(np.mean(mass)) if mass else None, "train_s": round(seconds, 1)}
        print(f"seed {seed} attention {name:5s} wins vs 1-shot same colour {np.mean(wins):.3f}"
              + (f" attention on named shot {np.mean(mass):.3f} (uniform 0.25)" if mass else ""), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--train-pairs", type=int, default=300)
    ap.add_argument("--test-pairs", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--grid", type=int, default=4, help="frame_features grid for the order task")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write all results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = {s: {"order": order_task(s, args), "attention": attention_task(s, args)} for s in args.seeds}
    print("\n| video encoder | swap accuracy (mean ± sd over seeds) | ties | R@1 of 100 held-out clips |")
    print("| --- | ---: | ---: | ---: |")
    for name in ORDER_ENCODERS:
        acc = [results[s]["order"][name]["swap_accuracy"] for s in args.seeds]
        ties = [results[s]["order"][name]["ties"] for s in args.seeds]
        r1 = [results[s]["order"][name]["R@1"] for s in args.seeds]
        print(f"| {name} | {np.mean(acc):.3f} ± {np.std(acc):.3f} | {np.mean(ties):.2f} | {np.mean(r1):.3f} |")
    if args.json:
        from reelsearch.io import atomic_write_json

        atomic_write_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
