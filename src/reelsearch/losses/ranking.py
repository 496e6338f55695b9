"""The hinge ranking-loss family as one composition: negatives x weighting x directions (x similarity).

For a query row with positive similarity s_p and negatives s_n (all scores S(caption, video)), the hinge is
[alpha - s_p + s_n]_+ and

* ``negatives="all"`` sums it over every negative (VSE: Torabi eq. 4, Mithun eq. 1);
* ``negatives="hardest"`` keeps only the hardest negative, argmax s_n (VSE++: Mithun eq. 2, SCDE eq. 11);
* ``weighting="uniform"`` weighs each query row by 1;
* ``weighting="rank"`` by Mithun eq. 3's L(r) = 1 + beta / (N - r + 1) (see :func:`rank_weights`).

The papers' losses are the presets in :mod:`reelsearch.losses.presets`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reelsearch.losses.base import LossConfigError, PairwiseLoss, check_choice

__all__ = ["NEGATIVES", "WEIGHTINGS", "RankingLoss", "all_negatives", "hardest_negative", "rank_weights"]


def all_negatives(sims: torch.Tensor, pos_sims: torch.Tensor, neg_mask: torch.Tensor, margin: float) -> torch.Tensor:
    """Sum of hinges over all negatives, per row: sum_n [margin - s_p + s_n]_+ (Torabi eq. 4, Mithun eq. 1)."""
    hinge = (margin - pos_sims[:, None] + sims).clamp_min(0)
    return hinge.masked_fill(~neg_mask, 0).sum(1)


def hardest_negative(sims: torch.Tensor, pos_sims: torch.Tensor, neg_mask: torch.Tensor, margin: float) -> torch.Tensor:
    """Hinge at the hardest negative, per row: [margin - s_p + max_n s_n]_+ (Mithun eq. 2, SCDE eq. 11).

    When several negatives tie for the maximum the gradient is split equally among them (``amax``), so the
    result does not depend on their order. A row without negatives costs 0.
    """
    lowest = torch.finfo(sims.dtype).min
    hardest = sims.masked_fill(~neg_mask, lowest).amax(1)
    return (margin - pos_sims + hardest).clamp_min(0) * neg_mask.any(1)


def rank_weights(sims: torch.Tensor, pos_sims: torch.Tensor, neg_mask: torch.Tensor, beta: float) -> torch.Tensor:
    """Mithun et al. 2018, eq. 3 weight of each query row: L(r) = 1 + beta / (N - r + 1).

    r is the rank (1 = best) of the query's matching item among all N compared items, "N the number of
    compared videos" (Section 3.4): here N = number of negatives in the row + 1 (the batch size for a plain
    batch). Ties count against the model: r = 1 + #{negatives n : s_n >= s_p}. So a positive ranked first
    gets the small weight 1 + beta / N, one ranked last 1 + beta. The paper does not give beta; its authors'
    released code uses beta = 1. The weight is a constant for the gradient (the rank is piecewise constant).
    """
    with torch.no_grad():
        n_items = neg_mask.sum(1) + 1
        rank = 1 + ((sims >= pos_sims[:, None]) & neg_mask).sum(1)
        return 1 + beta / (n_items - rank + 1).to(sims.dtype)


def uniform_weights(sims: torch.Tensor, pos_sims: torch.Tensor, neg_mask: torch.Tensor, beta: float) -> torch.Tensor:
    """Weight 1 for every query row (Torabi eq. 4-5, Mithun eq. 1-2, SCDE eq. 11)."""
    return torch.ones_like(pos_sims)


NEGATIVES: dict[str, Callable[..., torch.Tensor]] = {"all": all_negatives, "hardest": hardest_negative}
WEIGHTINGS: dict[str, Callable[..., torch.Tensor]] = {"uniform": uniform_weights, "rank": rank_weights}


class RankingLoss(PairwiseLoss):
    """Bidirectional hinge ranking loss: ``RankingLoss(margin, negatives, weighting, beta, directions, reduction)``.

    loss = sum over directions, over query rows q: w(q) * neg([alpha - S(q, q+) + S(q, q-)]_+), where neg is the
    sum over all negatives or the hardest one, and w is 1 or Mithun's rank weight. Call ``loss(sims)`` on a
    [B, B] caption-by-video similarity matrix (positives on the diagonal) or ``loss.forward_rect(...)`` in
    data-parallel training; see :class:`~reelsearch.losses.base.PairwiseLoss`.
    """

    def __init__(
        self,
        margin: float = 0.2,
        negatives: str = "all",
        weighting: str = "uniform",
        beta: float = 1.0,
        directions: str = "both",
        reduction: str = "sum",
        similarity: str = "cosine",
    ):
        super().__init__(directions=directions, reduction=reduction, similarity=similarity)
        self.negatives = check_choice("negatives", negatives, NEGATIVES)
        self.weighting = check_choice("weighting", weighting, WEIGHTINGS)
        if margin < 0:
            raise LossConfigError(f"margin must be >= 0, got {margin}")
        self.margin = float(margin)
        self.beta = float(beta)

    def row_losses(self, sims: torch.Tensor, pos: torch.Tensor, neg_mask: torch.Tensor) -> torch.Tensor:
        pos_sims = sims.gather(1, pos[:, None]).squeeze(1)
        hinges = NEGATIVES[self.negatives](sims, pos_sims, neg_mask, self.margin)
        if self.weighting == "uniform":
            return hinges
        return hinges * WEIGHTINGS[self.weighting](sims, pos_sims, neg_mask, self.beta)

    def extra_repr(self) -> str:
        beta = f", beta={self.beta}" if self.weighting == "rank" else ""
        return (
            f"margin={self.margin}, negatives={self.negatives!r}, weighting={self.weighting!r}{beta}, "
            + super().extra_repr()
        )
