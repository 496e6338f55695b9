"""Symmetric InfoNCE (CLIP-style contrastive cross-entropy) with the ranking losses' interface."""

from __future__ import annotations

import math

import torch
from torch import nn

from reelsearch.losses.base import LossConfigError, PairwiseLoss

__all__ = ["InfoNCELoss"]


class InfoNCELoss(PairwiseLoss):
    """Per query row: -log( exp(s_p / T) / (exp(s_p / T) + sum_n exp(s_n / T)) ), over the chosen directions.

    The modern alternative to the hinge losses (van den Oord et al. 2018; Radford et al. 2021, CLIP). Other
    positives of a row (``positive_mask``) are left out of its denominator. ``learnable=True`` makes
    log(1 / T) a parameter (initialised from ``temperature``, 1 / T capped at ``max_scale``), as in CLIP: the
    trainer must then optimise ``loss.parameters()`` too. With directions="both" and reduction="mean" the value
    is the sum of the two directions' mean cross-entropies, i.e. twice CLIP's (average of the two) loss.
    """

    def __init__(
        self,
        temperature: float = 0.05,
        learnable: bool = False,
        max_scale: float = 100.0,
        directions: str = "both",
        reduction: str = "mean",
        similarity: str = "cosine",
    ):
        super().__init__(directions=directions, reduction=reduction, similarity=similarity)
        if not temperature > 0:
            raise LossConfigError(f"temperature must be > 0, got {temperature}")
        if not max_scale > 0:
            raise LossConfigError(f"max_scale must be > 0, got {max_scale}")
        self.learnable = bool(learnable)
        self.max_log_scale = math.log(max_scale)
        log_scale = torch.tensor(math.log(1.0 / temperature))
        if self.learnable:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)

    @property
    def temperature(self) -> float:
        """Current temperature T (1 / scale)."""
        return float(torch.exp(-self.log_scale.detach().clamp(max=self.max_log_scale)))

    def row_losses(self, sims: torch.Tensor, pos: torch.Tensor, neg_mask: torch.Tensor) -> torch.Tensor:
        scale = self.log_scale.clamp(max=self.max_log_scale).exp().to(sims.dtype)
        logits = sims * scale
        keep = neg_mask.clone()
        keep[torch.arange(sims.shape[0], device=sims.device), pos] = True
        log_norm = torch.logsumexp(logits.masked_fill(~keep, float("-inf")), dim=1)
        return log_norm - logits.gather(1, pos[:, None]).squeeze(1)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature:.4g}, learnable={self.learnable}, " + super().extra_repr()
