"""What every batch loss shares: directions, positives, the rectangular (distributed) form and the reduction.

A loss sees a similarity matrix with captions as rows and videos as columns, S[i, j] = S(caption i, video j).
It is split into query rows, each ranking its columns:

* ``"retrieval"`` (text-to-video): each caption ranks the videos, i.e. the rows of S;
* ``"annotation"`` (video-to-text): each video ranks the captions, i.e. the columns of S (the rows of S.T) —
  the direction of Torabi et al. 2016 eq. 5 (contrastive captions c' for each video v);
* ``"both"``: the sum of the two (Torabi eq. 4, Mithun eq. 1-3, SCDE eq. 11).

A subclass only says what one query row costs (:meth:`PairwiseLoss.row_losses`); negatives mining, weighting,
hinge or softmax all live there.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from reelsearch.errors import ConfigError
from reelsearch.similarity import SIMILARITIES, get_similarity

__all__ = ["DIRECTIONS", "REDUCTIONS", "LossConfigError", "PairwiseLoss", "positive_mask_from_ids"]

DIRECTIONS: dict[str, tuple[str, ...]] = {
    "both": ("retrieval", "annotation"),
    "retrieval": ("retrieval",),  # captions rank videos (text-to-video search)
    "annotation": ("annotation",),  # videos rank captions (video-to-text, Torabi eq. 5)
}
REDUCTIONS = ("sum", "mean")


class LossConfigError(ConfigError):
    """A loss or similarity was configured with an unknown name or an invalid value."""


def check_choice(what: str, value: str, choices) -> str:
    if value not in choices:
        raise LossConfigError(f"unknown {what} {value!r}; choose one of {sorted(choices)}")
    return value


def positive_mask_from_ids(row_ids: Sequence | torch.Tensor, col_ids: Sequence | torch.Tensor | None = None):
    """Boolean [R, C] mask, True where row i and column j belong to the same video (``row_ids[i] == col_ids[j]``).

    For a batch of (caption, video) pairs pass the video id of each pair: two captions of one video then mark
    each other's video column as a positive, so neither is used as the other's negative. ``col_ids`` defaults
    to ``row_ids`` (square batch); in the rectangular form pass the local ids as rows, the global ids as columns.
    Ids may be ints, strings or an integer tensor.
    """
    col_ids = row_ids if col_ids is None else col_ids
    if isinstance(row_ids, torch.Tensor) and isinstance(col_ids, torch.Tensor):
        return row_ids.reshape(-1, 1) == col_ids.reshape(1, -1)
    codes: dict = {}
    rows = torch.tensor([codes.setdefault(x, len(codes)) for x in _as_list(row_ids)], dtype=torch.long)
    cols = torch.tensor([codes.setdefault(x, len(codes)) for x in _as_list(col_ids)], dtype=torch.long)
    return rows[:, None] == cols[None, :]


def _as_list(ids) -> list:
    return ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)


class PairwiseLoss(nn.Module):
    """Base of the batch losses: ``loss(sims [B, B])`` with positives on the diagonal, and ``forward_rect``.

    ``reduction="sum"`` adds every query row's loss over the chosen directions. ``reduction="mean"`` divides
    each direction's sum by its number of query rows (B, or the local Bl in :meth:`forward_rect`) and adds the
    directions, i.e. the average loss per positive pair.
    """

    #: Similarity (name in :data:`reelsearch.similarity.SIMILARITIES`) used by :meth:`forward_embeddings`.
    similarity: str

    def __init__(self, directions: str = "both", reduction: str = "sum", similarity: str = "cosine"):
        super().__init__()
        self.directions = check_choice("direction", directions, DIRECTIONS)
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        self.similarity = check_choice("similarity", similarity, SIMILARITIES)

    # -- the one thing a subclass defines -------------------------------------------------------------------------
    def row_losses(self, sims: torch.Tensor, pos: torch.Tensor, neg_mask: torch.Tensor) -> torch.Tensor:
        """Loss of each query row [R] given sims [R, C], positive column pos [R] and negatives neg_mask [R, C]."""
        raise NotImplementedError

    # -- public forms -------------------------------------------------------------------------------------------
    def forward(self, sims: torch.Tensor, positive_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Loss of a square batch: sims [B, B], rows = captions, columns = videos, pair i on the diagonal.

        ``positive_mask`` [B, B] (bool, optional) marks every (caption, video) pair that matches, e.g. from
        :func:`positive_mask_from_ids`; those entries are never negatives. The diagonal is always positive.
        """
        if sims.dim() != 2 or sims.shape[0] != sims.shape[1]:
            raise ValueError(f"expected a square [B, B] similarity matrix, got shape {tuple(sims.shape)}")
        pos = torch.arange(sims.shape[0], device=sims.device)
        mask_t = positive_mask.T if positive_mask is not None else None
        return self.forward_rect(sims, pos, sims.T, pos, positive_mask, mask_t)

    def forward_rect(
        self,
        sims_c2v: torch.Tensor | None,
        pos_c2v: torch.Tensor | None,
        sims_v2c: torch.Tensor | None = None,
        pos_v2c: torch.Tensor | None = None,
        mask_c2v: torch.Tensor | None = None,
        mask_v2c: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Loss of local queries against a (global) gallery, for data-parallel training.

        ``sims_c2v`` [Bl, Bg]: local captions vs all gathered videos, S(c_i, v_j); ``pos_c2v`` [Bl]: the column
        of each caption's own video. ``sims_v2c`` [Bl, Bg]: local videos vs all gathered captions, entry [j, i] =
        S(c_i, v_j) (the transpose of a caption-by-video matrix, so the order similarity keeps c as caption);
        ``pos_v2c`` [Bl]: the column of each video's own caption. The retrieval direction needs the c2v pair,
        the annotation direction the v2c pair; a pair the directions do not use may be None and is ignored.
        ``mask_c2v`` / ``mask_v2c`` [Bl, Bg] (bool, optional) mark further positives, never used as negatives.

        With ``reduction="sum"`` the losses of all ranks add up to the loss of the global batch; with "mean"
        each rank divides by its own Bl, so their average (equal Bl) is the global mean.
        """
        total = None
        for direction in DIRECTIONS[self.directions]:
            if direction == "retrieval":
                sims, pos, mask, names = sims_c2v, pos_c2v, mask_c2v, ("sims_c2v", "pos_c2v")
            else:
                sims, pos, mask, names = sims_v2c, pos_v2c, mask_v2c, ("sims_v2c", "pos_v2c")
            if sims is None or pos is None:
                raise ValueError(f"directions={self.directions!r} needs {names[0]} and {names[1]}")
            part = self._direction_loss(sims, pos, mask)
            total = part if total is None else total + part
        return total

    def forward_embeddings(
        self, captions: torch.Tensor, videos: torch.Tensor, positive_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Loss of a batch of paired embeddings (row i of each is a pair), with this loss's similarity."""
        return self(get_similarity(self.similarity)(captions, videos), positive_mask)

    # -- internals --------------------------------------------------------------------------------------------
    def _direction_loss(self, sims: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if sims.dim() != 2:
            raise ValueError(f"expected a 2-D similarity matrix, got shape {tuple(sims.shape)}")
        rows, cols = sims.shape
        pos = torch.as_tensor(pos, device=sims.device).long().reshape(-1)
        if pos.numel() != rows:
            raise ValueError(f"{rows} query rows but {pos.numel()} positive indices")
        if rows and (int(pos.min()) < 0 or int(pos.max()) >= cols):
            raise ValueError(f"positive indices must lie in [0, {cols}), got {pos.tolist()}")
        positive = torch.zeros(rows, cols, dtype=torch.bool, device=sims.device)
        positive[torch.arange(rows, device=sims.device), pos] = True
        if mask is not None:
            if tuple(mask.shape) != (rows, cols):
                raise ValueError(f"positive mask has shape {tuple(mask.shape)}, expected {(rows, cols)}")
            positive |= mask.to(device=sims.device, dtype=torch.bool)
        per_row = self.row_losses(sims, pos, ~positive)
        total = per_row.sum()
        return total / max(rows, 1) if self.reduction == "mean" else total

    def extra_repr(self) -> str:
        return f"directions={self.directions!r}, reduction={self.reduction!r}, similarity={self.similarity!r}"
