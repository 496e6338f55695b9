"""What the :class:`~reelsearch.training.trainer.Trainer` drives: a training task.

A task supplies what it trains and how: its parameters (groups with learning-rate multipliers), the batches of an
epoch, the loss of a batch, a validation (named metrics and a selection score) and how to save the model it trains
and load its weights back. The Trainer does the rest, the same for every task: optimiser, learning-rate schedule,
precision, progress, logs, checkpoints with exact resume, selection of the best epoch, early stopping, data parallel.

Resume is exact when ``batches(epoch)`` depends on (seed, epoch) alone (:func:`epoch_seed`) and any randomness inside
``loss`` (dropout) draws from torch's global generator, whose state every checkpoint saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from reelsearch.config.schema import ScheduleConfig
from reelsearch.errors import ReelsearchError
from reelsearch.losses import TrainLosses
from reelsearch.training.distributed import DistInfo


class LoopConfig(Protocol):
    """The settings the Trainer reads from ``task.cfg``: ``TrainConfig`` (``train``), ``TuneConfig`` (``tune``),
    ``TuneTextConfig`` (``tune_text``) and ``MLMConfig`` (``mlm``) all have them."""

    epochs: int
    lr: float
    optimizer: str
    weight_decay: float
    schedule: ScheduleConfig
    grad_clip: float | None
    early_stopping: int | None
    precision: str
    seed: int
    checkpoint_every: int


@dataclass
class Validation:
    """One validation of the model being trained: ``metrics`` (kept in the summary), ``score`` (higher is better:
    selects the best epoch, drives plateau schedules and early stopping), ``row`` (the log's columns) and ``line``
    (what the epoch's line on the terminal shows)."""

    metrics: dict
    score: float
    row: dict[str, float] = field(default_factory=dict)
    line: str = ""


class TrainingTask:
    """Base of the tasks. A subclass sets ``cfg`` (a :class:`LoopConfig`) and ``module`` (every trained module: the
    Trainer switches it between train and eval mode) and defines ``batches``, ``loss``, ``save`` and ``load``; it may
    give its parameter groups, a validation, further state to resume (``state`` / ``load_state``) and facts for the
    summary (``report``). ``validates_start``: validate the untrained model too (epoch 0, a candidate for best)."""

    cfg: LoopConfig
    module: torch.nn.Module
    dist: DistInfo = DistInfo()  # where it runs: device, rank and world size
    validates_start: bool = False

    def parameter_groups(self) -> list[dict]:
        """Optimiser groups ``{"params": [...], "lr_scale": s}``: each trains at ``cfg.lr`` x s x the schedule."""
        return [{"params": [p for p in self.module.parameters() if p.requires_grad], "lr_scale": 1.0}]

    def batches(self, epoch: int) -> Sequence:
        """The batches of ``epoch`` (0-based), drawn from (``cfg.seed``, ``epoch``) alone."""
        raise NotImplementedError

    def loss(self, batch, epoch: int) -> torch.Tensor:
        """The loss of ``batch`` (a scalar tensor to minimise); the Trainer runs it under its precision's autocast."""
        raise NotImplementedError

    def validate(self) -> Validation | None:
        """The current model's validation (run in eval and inference mode), or None when there is none."""
        return None

    def save(self, directory: Path) -> None:
        """Save the model being trained to ``directory`` (best/, last/) as it will be used."""
        raise NotImplementedError

    def load(self, directory: Path) -> None:
        """Load the weights that ``save`` wrote to ``directory`` back into the model being trained."""
        raise NotImplementedError

    def state(self) -> dict[str, torch.Tensor]:
        """Tensors besides the saved model that resuming needs (keys without the "optim/" and "rng/" prefixes)."""
        return {}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore what :meth:`state` gave."""

    def report(self) -> dict:
        """Facts about the task for the run's summary."""
        return {}


class RetrievalTask(TrainingTask):
    """A task training a joint space with ranking losses (``losses``: ``reelsearch.losses.train_losses``); the main
    loss's own state (a learnable temperature) is resumed with the run."""

    losses: TrainLosses

    def state(self) -> dict[str, torch.Tensor]:
        return {f"loss/{k}": v.detach().cpu() for k, v in self.losses.main.state_dict().items()}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        own = {k[len("loss/"):]: v for k, v in tensors.items() if k.startswith("loss/")}
        if own:
            self.losses.main.load_state_dict(own)


def retrieval_validation(res: dict, score: float, **first: float) -> Validation:
    """The Validation of retrieval metrics ``res`` (``reelsearch.evaluation``: RSum, t2v and v2t) with ``first``
    (e.g. the validation loss) leading the log's columns."""
    row = {**first, "RSum": res["RSum"], **{f"t2v_{k}": v for k, v in res["t2v"].items()},
           **{f"v2t_{k}": v for k, v in res["v2t"].items()}}
    line = f"RSum {res['RSum']:.1f} | t2v R@1 {res['t2v']['R@1']:.1f} | v2t R@1 {res['v2t']['R@1']:.1f}"
    return Validation(res, score, row, line)


def parameter_groups(model: torch.nn.Module, loss: torch.nn.Module, lr_scale: dict[str, float]) -> list[dict]:
    """Optimiser groups of the trainable parameters of ``model`` (and of ``loss``, e.g. InfoNCE's temperature, named
    ``loss.<name>``), each group with the ``lr_scale`` of the longest parameter-name prefix it matches (1 otherwise)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    named += [(f"loss.{n}", p) for n, p in loss.named_parameters() if p.requires_grad]
    unused = [k for k in lr_scale if not any(n == k or n.startswith(k + ".") for n, _ in named)]
    if unused:
        raise ReelsearchError(f"train.lr_scale: {unused[0]!r} names no trainable parameter of the model (names look "
                              f"like {named[0][0]!r})")
    groups: dict[float, list] = {}
    for n, p in named:
        keys = [k for k in lr_scale if n == k or n.startswith(k + ".")]
        groups.setdefault(lr_scale[max(keys, key=len)] if keys else 1.0, []).append(p)
    return [{"params": ps, "lr_scale": scale} for scale, ps in groups.items()]


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of ``epoch``'s random draws (its batches), from the run's ``seed``."""
    return seed * 100_003 + epoch


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Indices of each batch of ``epoch``: a permutation of ``n`` drawn from (seed, epoch) only; the last incomplete
    batch is dropped (a tiny batch gives weak hardest negatives) unless it is the only one."""
    g = torch.Generator().manual_seed(epoch_seed(seed, epoch))
    perm = torch.randperm(n, generator=g).numpy()
    if n <= batch_size:
        return [perm]
    return [perm[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]
