"""Projections of encoder outputs into the joint space.

  linear-abs-l2  Torabi et al. 2016 §4 / B.2: |W x| ("we constrain video and sentence embedding vectors to only
                 positive values by computing their absolute values", as in order embeddings) then unit L2 norm (§5.1)
  abs-l2         Torabi M2/M3 text: the LSTM's last hidden state is already in the joint space, |h_N| then unit norm
  linear-l2      Mithun et al. 2018 §3.3: v = W^(v) v_bar, t = W^(t) t_bar, compared by cosine (unit norm here)
  fc-bn-l2       SCDE (Zhao et al. 2020) Eq. (10): BatchNorm(W f + b), compared by cosine (Eq. 11), so unit norm
  l2             the input already is in the joint space: unit L2 norm only (a CLIP-family checkpoint's embeddings)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from reelsearch.errors import ConfigError

PROJECTIONS = ("linear-abs-l2", "abs-l2", "linear-l2", "fc-bn-l2", "l2")


class Projection(nn.Module):
    """x [B, in_dim] -> unit-norm [B, dim]; ``linear`` and ``finish`` are exposed for per-frame use (M3)."""

    def __init__(self, kind: str, in_dim: int, dim: int | None = None):
        super().__init__()
        if kind not in PROJECTIONS:
            raise ConfigError(f"unknown projection {kind!r}; choose one of {PROJECTIONS}")
        self.kind = kind
        if kind in ("abs-l2", "l2"):
            if dim not in (None, in_dim):
                raise ConfigError(f"projection {kind!r} keeps the size: dim {dim} != input {in_dim}")
            dim = in_dim
        self.dim = dim
        self.linear = None if kind in ("abs-l2", "l2") else nn.Linear(in_dim, dim)
        self.bn = nn.BatchNorm1d(dim) if kind == "fc-bn-l2" else None

    def finish(self, y: torch.Tensor) -> torch.Tensor:
        """Everything after the linear map: BatchNorm, absolute value, L2 normalisation (as the kind says)."""
        if self.bn is not None:
            y = self.bn(y)
        if "abs" in self.kind:
            y = y.abs()
        return F.normalize(y, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.finish(self.linear(x) if self.linear is not None else x)
