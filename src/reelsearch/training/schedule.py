"""Learning-rate schedules of the papers, resumable through their JSON state."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LRSchedule:
    """Per-epoch learning-rate schedule.

    kind "constant": fixed lr.
    kind "step": lr multiplied by ``gamma`` every ``step_epochs`` epochs
        (Mithun et al. 2018 sec. 4.2: 2e-3 for 15 epochs, then /10 for 15 more).
    kind "plateau": lr multiplied by ``factor`` after ``patience`` epochs without a better validation score
        (SCDE sec. 4.1: 5e-5, halved after 3 epochs without gain).
    """

    kind: str = "constant"
    step_epochs: int = 15
    gamma: float = 0.1
    factor: float = 0.5
    patience: int = 3
    best: float | None = None
    bad_epochs: int = 0
    history: list = field(default_factory=list)

    def lr_for_epoch(self, base_lr: float, epoch: int) -> float | None:
        """Learning rate at the start of ``epoch`` (0-based) for "constant"/"step"; None for "plateau"."""
        if self.kind == "constant":
            return base_lr
        if self.kind == "step":
            return base_lr * (self.gamma ** (epoch // self.step_epochs))
        if self.kind == "plateau":
            return None
        raise ValueError(f"unknown lr schedule {self.kind!r} (constant, step, plateau)")

    def after_validation(self, optimizer: torch.optim.Optimizer, score: float) -> None:
        """Plateau bookkeeping: ``score`` is higher-is-better."""
        if self.kind != "plateau":
            return
        if self.best is None or score > self.best:
            self.best, self.bad_epochs = score, 0
            return
        self.bad_epochs += 1
        if self.bad_epochs >= self.patience:
            for g in optimizer.param_groups:
                g["lr"] *= self.factor
            self.bad_epochs = 0

    def apply(self, optimizer: torch.optim.Optimizer, base_lr: float, epoch: int) -> None:
        lr = self.lr_for_epoch(base_lr, epoch)
        if lr is not None:
            for g in optimizer.param_groups:
                g["lr"] = lr

    def state(self) -> dict:
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state(self, st: dict) -> None:
        self.best, self.bad_epochs = st.get("best"), st.get("bad_epochs", 0)
