"""Fuse separately trained models into one mixture of experts (Mithun et al. 2018 §3.5), optionally tuning the
fusion weights on a validation split: the engine behind `reelsearch fuse`.

Any saved models can be experts — Mithun's object / activity / place spaces, or models over different features or
architectures — as long as each one's features exist for the split. A checkpoint that is itself a score-fused
mixture contributes its experts (weights multiplied through); a rank-fused one cannot be flattened and is refused.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from reelsearch.errors import ReelsearchError

#: Weights tried for each expert after the first (whose weight stays 1) when tuning.
DEFAULT_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def gather_experts(checkpoints: Sequence[str | Path]) -> tuple[dict, dict]:
    """(experts {name: JointModel}, weights {name: w}) of the ``checkpoints``; names from their folders."""
    from reelsearch.models import JointModel, MixtureOfExperts, load_model, resolve_checkpoint

    experts, weights = {}, {}

    def add(name: str, model: JointModel, weight: float) -> None:
        base, i = name, 2
        while name in experts:
            name, i = f"{base}-{i}", i + 1
        experts[name], weights[name] = model, weight

    for ckpt in checkpoints:
        directory = resolve_checkpoint(ckpt)
        name = directory.parent.name if directory.name in ("best", "last") else directory.name
        model = load_model(directory)
        if isinstance(model, MixtureOfExperts):
            if model.fusion["kind"] != "score":
                raise ReelsearchError(f"{ckpt}: a {model.fusion['kind']}-fused mixture cannot be nested; "
                                      "pass its experts (CHECKPOINT/experts/NAME) instead")
            for k, e in model.experts.items():
                add(k, e, float(model.fusion["weights"][k]))
        else:
            add(name, model, 1.0)
    if len(experts) < 2:
        raise ReelsearchError("fusion needs at least two experts")
    return experts, weights


def expert_matrices(moe, ctx, split: str, device: str | None = None, progress: bool = True):
    """Each expert's [captions x videos] similarity matrix on ``split`` and the caption -> video map."""
    from reelsearch.train.session import resolve_device, split_pairs
    from reelsearch.train.trainer import embed_and_score

    dev = resolve_device(device)
    sims, cap2vid = {}, None
    for name, expert in moe.experts.items():
        expert.to(dev)
        data = split_pairs(expert, ctx, split, str(dev), progress)
        if cap2vid is not None and not np.array_equal(cap2vid, data.cap2vid):
            raise ReelsearchError(f"experts see different {split} items (features missing for some modality); "
                                  "extract every expert's modalities for all items")
        cap2vid = data.cap2vid
        sims[name] = torch.as_tensor(embed_and_score(expert, data, dev))
    return sims, cap2vid


def fused_metrics(moe, sims: dict, cap2vid: np.ndarray) -> dict:
    """Both-direction metrics of the mixture's fusion of precomputed expert matrices."""
    from reelsearch.evaluation import retrieval_metrics

    t2v = retrieval_metrics(moe.fuse(sims, axis=1).numpy(), cap2vid)
    v2t = retrieval_metrics(moe.fuse(sims, axis=0).numpy(), cap2vid) if moe.fusion["kind"] == "rank" else t2v
    res = {"t2v": t2v["t2v"], "v2t": v2t["v2t"]}
    res["RSum"] = sum(res[d][k] for d in ("t2v", "v2t") for k in ("R@1", "R@5", "R@10"))
    return res


def tune_weights(moe, sims: dict, cap2vid: np.ndarray, grid: Sequence[float] = DEFAULT_GRID,
                 progress: bool = True) -> tuple[dict, list[dict]]:
    """Grid-search the fusion weights (the first expert's fixed at 1) for the best RSum; returns (best weights,
    every trial as {"weights", "RSum"}). Ties keep the earlier trial."""
    from tqdm import tqdm

    names = list(moe.experts)
    trials, best = [], None
    combos = list(itertools.product(grid, repeat=len(names) - 1))
    for combo in tqdm(combos, desc="tuning fusion weights", unit="trial", disable=not progress, leave=False):
        if not any(combo):
            continue  # the first expert alone is not a fusion
        moe.fusion["weights"] = dict(zip(names, (1.0, *combo)))
        rsum = fused_metrics(moe, sims, cap2vid)["RSum"]
        trials.append({"weights": dict(moe.fusion["weights"]), "RSum": rsum})
        if best is None or rsum > best["RSum"]:
            best = trials[-1]
    moe.fusion["weights"] = dict(best["weights"])
    return dict(best["weights"]), trials


def fuse(checkpoints: Sequence[str | Path], out: Path, kind: str = "score", weights: Sequence[float] | None = None,
         normalize: str = "none", data: str | None = None, split: str | None = None, features: Path | None = None,
         tune: bool = False, device: str | None = None, progress: bool = True, **data_options) -> dict:
    """Build (and with ``data``, evaluate or ``tune``) the mixture of ``checkpoints``; save it to ``out``."""
    from reelsearch.evaluation import retrieval_metrics
    from reelsearch.io import atomic_write_json
    from reelsearch.models import MixtureOfExperts
    from reelsearch.train.session import open_eval_split

    experts, default_weights = gather_experts(checkpoints)
    if weights is not None:
        if len(weights) != len(experts):
            raise ReelsearchError(f"{len(weights)} weights for {len(experts)} experts ({', '.join(experts)})")
        default_weights = dict(zip(experts, map(float, weights)))
    fusion = {"kind": kind, "weights": default_weights}
    if normalize != "none":
        fusion["normalize"] = normalize
    moe = MixtureOfExperts(experts, fusion, name=Path(out).name,
                           features={"video": sorted({m for e in experts.values() for m in e.modalities})})
    report: dict = {"experts": list(experts), "fusion": fusion}
    if tune and data is None:
        raise ReelsearchError("--tune needs --data (the split to tune the weights on)")
    if data is not None:
        ctx, split = open_eval_split(data, split, features, **data_options)
        sims, cap2vid = expert_matrices(moe, ctx, split, device, progress)
        report["experts_alone"] = {k: retrieval_metrics(sims[k].numpy(), cap2vid) for k in experts}
        if tune:
            _, trials = tune_weights(moe, sims, cap2vid, progress=progress)
            report["trials"] = len(trials)
        report["fusion"] = dict(moe.fusion)
        report["result"] = fused_metrics(moe, sims, cap2vid)
        report["data"], report["split"] = f"{ctx.fmt}:{ctx.root}", split
    out = Path(out)
    moe.save(out)
    atomic_write_json(out / "fusion.json", report)
    return report
