"""Fuse separately trained models into one mixture of experts (Mithun et al. 2018 §3.5), optionally tuning the
fusion weights on a validation split: the engine behind `reelsearch fuse`.

Any saved models can be experts — Mithun's object / activity / place spaces, or models over different features or
architectures — as long as each one's features exist for the split. A checkpoint that is itself a score-fused
mixture contributes its experts (weights multiplied through); a rank-fused one cannot be flattened and is refused.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.config.schema import FusionConfig, FusionKind
from reelsearch.config.typed import to_dict
from reelsearch.errors import ReelsearchError
from reelsearch.evaluation import retrieval_metrics
from reelsearch.evaluation.evaluator import RetrievalEvaluator, fused_metrics
from reelsearch.evaluation.report import format_table
from reelsearch.io import atomic_write_json
from reelsearch.models import JointModel, MixtureOfExperts, load_model, resolve_checkpoint
from reelsearch.models.checkpoint import run_model_dir
from reelsearch.models.hf import hf_name
from reelsearch.towers.hub import is_hf
from reelsearch.training.run import model_pairs, open_eval_split, resolve_device

REPORT_FILE = "fusion.json"
#: Weights tried for each expert after the first (whose weight stays 1) when tuning.
DEFAULT_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def gather_experts(checkpoints: Sequence[str | Path]) -> tuple[dict, dict]:
    """(experts {name: JointModel}, weights {name: w}) of the ``checkpoints``; names from their folders."""
    experts, weights = {}, {}

    def add(name: str, model: JointModel, weight: float) -> None:
        base, i = name, 2
        while name in experts:
            name, i = f"{base}-{i}", i + 1
        experts[name], weights[name] = model, weight

    for ckpt in checkpoints:
        if is_hf(ckpt):
            name, model = hf_name(ckpt), load_model(ckpt)
        else:
            directory = resolve_checkpoint(ckpt)
            name = directory.parent.name if directory.name in ("best", "last") else directory.name
            model = load_model(directory)
        if model.fusion_kind is FusionKind.RANK:
            raise ReelsearchError(f"{ckpt}: a rank-fused mixture cannot be nested; pass its experts "
                                  "(CHECKPOINT/experts/NAME) instead")
        for k, e in model.experts.items():  # a joint model is its own single expert, named after its folder
            add(k if model.fusion_kind is FusionKind.SCORE else name, e, model.weight(k))
    if len(experts) < 2:
        raise ReelsearchError("fusion needs at least two experts")
    return experts, weights


def tune_weights(moe, sims: dict, cap2vid: np.ndarray, grid: Sequence[float] = DEFAULT_GRID,
                 progress: bool = True) -> tuple[dict, list[dict]]:
    """Grid-search the fusion weights (the first expert's fixed at 1) for the best RSum on precomputed expert
    matrices; returns (best weights, every trial as {"weights", "RSum"}). Ties keep the earlier trial. The mixture's
    own weights are left as they were."""
    names = list(moe.experts)
    trials, best = [], None
    combos = list(itertools.product(grid, repeat=len(names) - 1))
    for combo in tqdm(combos, desc="tuning fusion weights", unit="trial", disable=not progress, leave=False):
        if not any(combo):
            continue  # the first expert alone is not a fusion
        weights = dict(zip(names, (1.0, *combo)))
        trial = MixtureOfExperts(dict(moe.experts), replace(moe.fusion, weights=weights), moe.name)
        rsum = fused_metrics(trial, sims, cap2vid)["RSum"]
        trials.append({"weights": weights, "RSum": rsum})
        if best is None or rsum > best["RSum"]:
            best = trials[-1]
    return dict(best["weights"]), trials


def fuse(checkpoints: Sequence[str | Path], out: Path, kind: str = "score", weights: Sequence[float] | None = None,
         normalize: str = "none", data: str | None = None, split: str | None = None, features: Path | None = None,
         tune: bool = False, device: str | None = None, progress: bool = True, **data_options) -> dict:
    """Build (and with ``data``, evaluate or ``tune``) the mixture of ``checkpoints``; save it in the run folder
    ``out`` (``out/best/``) and the report beside it (``out/fusion.json``)."""
    model_dir = run_model_dir(out)
    experts, default_weights = gather_experts(checkpoints)
    if weights is not None:
        if len(weights) != len(experts):
            raise ReelsearchError(f"{len(weights)} weights for {len(experts)} experts ({', '.join(experts)})")
        default_weights = dict(zip(experts, map(float, weights)))
    moe = MixtureOfExperts(experts, FusionConfig(kind, default_weights, normalize), name=Path(out).name)
    report: dict = {"experts": list(experts), "fusion": to_dict(moe.fusion)}
    if tune and data is None:
        raise ReelsearchError("--tune needs --data (the split to tune the weights on)")
    if data is not None:
        source, split = open_eval_split(data, split, features, **data_options)
        dev = resolve_device(device)
        evaluator = RetrievalEvaluator(model_pairs(moe.to(dev), source, split, str(dev), progress), progress=progress)
        sims = evaluator.expert_scores(moe)
        cap2vid = evaluator.pairs.cap2vid
        report["experts_alone"] = {k: retrieval_metrics(sims[k], cap2vid) for k in experts}
        if tune:
            best, trials = tune_weights(moe, sims, cap2vid, progress=progress)
            moe = MixtureOfExperts(experts, FusionConfig(kind, best, normalize), name=moe.name)
            report["trials"] = len(trials)
        report["fusion"] = to_dict(moe.fusion)
        report["result"] = fused_metrics(moe, sims, cap2vid)
        report["data"], report["split"] = source.label, split
    moe.save(model_dir)
    atomic_write_json(Path(out) / REPORT_FILE, report)
    return report


def report_text(report: dict, out: str | Path) -> str:
    """:func:`fuse`'s report in a few lines: the experts, each one's RSum alone and the fusion's metrics."""
    lines = [f"experts: {', '.join(report['experts'])}; fusion {report['fusion']}"]
    if "result" in report:
        lines += [f"{name} alone: RSum {res['RSum']:.1f}" for name, res in report["experts_alone"].items()]
        lines.append(format_table(report["result"]))
    lines.append(f"saved: {Path(out) / 'best'} (report: {Path(out) / REPORT_FILE})")
    return "\n".join(lines)
