"""Learning-rate schedules of the papers (and a cosine one), resumable through their JSON state.

The schedule gives a factor of the base learning rate for each optimisation step; each parameter group's rate is
``base lr x the group's lr_scale x factor`` (``train.lr_scale`` in a config scales named parts of a model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class LRSchedule:
    """kind "constant": the base lr.
    kind "step": multiplied by ``gamma`` every ``step_epochs`` epochs
        (Mithun et al. 2018 sec. 4.2: 2e-3 for 15 epochs, then /10 for 15 more).
    kind "plateau": multiplied by ``factor`` after ``patience`` epochs without a better validation score
        (SCDE sec. 4.1: 5e-5, halved after 3 epochs without gain).
    kind "cosine": from the base lr down to 0 along half a cosine over all the run's steps.
    ``warmup_steps``: the first steps ramp linearly up to the schedule's rate (any kind).
    """

    kind: str = "constant"
    step_epochs: int = 15
    gamma: float = 0.1
    factor: float = 0.5
    patience: int = 3
    warmup_steps: int = 0
    best: float | None = None
    bad_epochs: int = 0
    plateau_scale: float = 1.0

    def __post_init__(self):
        if self.kind not in ("constant", "step", "plateau", "cosine"):
            raise ValueError(f"unknown lr schedule {self.kind!r} (constant, step, plateau, cosine)")

    def factor_at(self, epoch: int, step: int, total_steps: int) -> float:
        """Factor of the base lr at global ``step`` (0-based) of ``total_steps``, in ``epoch`` (0-based)."""
        if self.kind == "step":
            f = self.gamma ** (epoch // self.step_epochs)
        elif self.kind == "plateau":
            f = self.plateau_scale
        elif self.kind == "cosine":
            f = 0.5 * (1.0 + math.cos(math.pi * min(step, total_steps) / max(1, total_steps)))
        else:
            f = 1.0
        if self.warmup_steps and step < self.warmup_steps:
            f *= (step + 1) / self.warmup_steps
        return f

    def set_lr(self, optimizer: torch.optim.Optimizer, base_lr: float, epoch: int, step: int,
               total_steps: int) -> None:
        """Set every parameter group's lr for global ``step``."""
        f = self.factor_at(epoch, step, total_steps)
        for g in optimizer.param_groups:
            g["lr"] = base_lr * g.get("lr_scale", 1.0) * f

    def after_validation(self, score: float) -> None:
        """Plateau bookkeeping (``score`` is higher-is-better)."""
        if self.kind != "plateau":
            return
        if self.best is None or score > self.best:
            self.best, self.bad_epochs = score, 0
            return
        self.bad_epochs += 1
        if self.bad_epochs >= self.patience:
            self.plateau_scale *= self.factor
            self.bad_epochs = 0

    def state(self) -> dict:
        return {"best": self.best, "bad_epochs": self.bad_epochs, "plateau_scale": self.plateau_scale}

    def load_state(self, st: dict) -> None:
        self.best, self.bad_epochs = st.get("best"), st.get("bad_epochs", 0)
        self.plateau_scale = st.get("plateau_scale", 1.0)
