"""Late fusion of several embedding spaces' similarity matrices: by weighted score or by weighted rank.

Mithun et al. 2018 (§3.5, Eq. 4) fuse the object-text, activity-text and place-text spaces by a weighted sum of
their cosine similarities, ``S = w1 S_o + w2 S_a + w3 S_p`` with ``w = (1, 1, 0.5)`` chosen on validation data;
their Table 1 row 1.7 and Tables 2-3 "Rank-Fusion" replace the scores by each space's ranks (weighted rank
aggregation), which they found consistently a little worse than score fusion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from reelsearch.errors import EvaluationInputError
from reelsearch.scoring.matrices import ScoreSource, to_work_array

# Mithun et al. 2018, §3.5 below Eq. 4: w1 = 1 (object-text), w2 = 1 (activity-text), w3 = 0.5 (place-text).
MITHUN2018_WEIGHTS = (1.0, 1.0, 0.5)

_ROWS_PER_BLOCK_ELEMS = 1 << 22  # rows are fused in blocks of about 4M scores


def _check(list_of_sims, weights) -> tuple[list, list[float]]:
    sims = list(list_of_sims)
    if not sims:
        raise EvaluationInputError("nothing to fuse: the list of similarity matrices is empty", subject="scores")
    w = [1.0] * len(sims) if weights is None else [float(x) for x in weights]
    if len(w) != len(sims):
        raise EvaluationInputError(f"{len(sims)} similarity matrices but {len(w)} weights", subject="scores")
    return sims, w


def _matrices(sims: list) -> list[ScoreSource]:
    sources = [ScoreSource(s) for s in sims]
    shapes = {src.shape for src in sources}
    if len(shapes) != 1:
        raise EvaluationInputError(f"similarity matrices differ in shape: {sorted(shapes)}", subject="scores")
    return sources


def _is_function(s) -> bool:
    return callable(s) and not (hasattr(s, "ndim") and hasattr(s, "__getitem__"))


class _FusedRows:
    """A row function fusing row functions (a fused score source that is never materialised)."""

    def __init__(self, parts, fuse_rows, shape):
        self.parts, self.fuse_rows = parts, fuse_rows
        if shape is not None:
            self.shape = shape

    def __call__(self, rows: slice):
        return self.fuse_rows([np.asarray(to_work_array(p(rows), np.dtype(np.float64))) for p in self.parts])


def score_fusion(list_of_sims: Sequence, weights: Sequence[float] | None = None, normalize: str = "none"):
    """Weighted sum of similarity matrices (Mithun et al. 2018, Eq. 4); weights default to all 1.

    ``normalize="none"`` (the paper's choice) adds the raw scores: right when every space scores with the same
    similarity (e.g. cosine in [-1, 1]). ``normalize="zscore"`` first standardises each matrix by its own global
    mean and standard deviation, so that a space whose scores merely spread wider does not dominate (use it when
    the spaces score differently, e.g. cosine vs order-violation). It is global, not per query, so each space's
    own order in both directions (rows and columns) is unchanged and one fused matrix serves t2v and v2t.
    Arrays give an array (float32 if every input is float32, else float64); row functions
    (``chunk(rows: slice)``) give a row function (``normalize="none"`` only).
    """
    sims, w = _check(list_of_sims, weights)
    if normalize not in ("none", "zscore"):
        raise EvaluationInputError(f"normalize must be 'none' or 'zscore', got {normalize!r}", subject="scores")
    if any(_is_function(s) for s in sims):
        if normalize != "none":
            raise EvaluationInputError(
                "zscore normalisation needs stored matrices, not row functions", subject="scores"
            )
        shape = next((tuple(s.shape) for s in sims if hasattr(s, "shape")), None)
        return _FusedRows(sims, lambda parts: sum(wi * p for wi, p in zip(w, parts, strict=True)), shape)
    if normalize == "none" and _small_arrays(sims):  # a search's few scores: the same sum, without the machinery
        return weighted_sum(sims, w)
    sources = _matrices(sims)
    n_rows, n_cols = sources[0].shape
    dtype = np.float32 if all(s.work_dtype == np.float32 for s in sources) else np.float64
    scale = [(0.0, wi) for wi in w]
    if normalize == "zscore":
        scale = []
        for src, wi in zip(sources, w, strict=True):
            mean, std = _global_mean_std(src)
            scale.append((mean, wi / std if std > 0 else 0.0))
    out = np.empty((n_rows, n_cols), dtype=dtype)
    step = max(1, _ROWS_PER_BLOCK_ELEMS // max(n_cols, 1))
    for r0 in range(0, n_rows, step):
        r1 = min(n_rows, r0 + step)
        acc = np.zeros((r1 - r0, n_cols), dtype=np.float64)
        for src, (mean, factor) in zip(sources, scale, strict=True):
            acc += factor * (to_work_array(src.rows(r0, r1), np.dtype(np.float64)) - mean)
        out[r0:r1] = acc
    return out


def weighted_sum(sims: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """``score_fusion`` (``normalize="none"``) of float numpy arrays of one shape, without its checks: each weighted
    array summed in float64, in order (float32 if every one is float32)."""
    acc = np.zeros(sims[0].shape, np.float64)
    for s, wi in zip(sims, weights, strict=True):
        acc += wi * s.astype(np.float64, copy=False)
    return acc.astype(np.float32 if all(s.dtype == np.float32 for s in sims) else np.float64, copy=False)


def _small_arrays(sims: list) -> bool:
    """Whether every one of ``sims`` is a float32 / float64 numpy matrix of one shape, small enough for one block (what
    ``score_fusion`` sums at once: the blocks, dtypes and shape checks of ``ScoreSource`` would cost a search's
    per-hit fusions more than the sum)."""
    shape = getattr(sims[0], "shape", None)
    return (shape is not None and len(shape) == 2 and shape[0] * shape[1] <= _ROWS_PER_BLOCK_ELEMS
            and all(type(s) is np.ndarray and s.shape == shape and s.dtype in _FLOATS for s in sims))


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _global_mean_std(src: ScoreSource) -> tuple[float, float]:
    n_rows, n_cols = src.shape
    step = max(1, _ROWS_PER_BLOCK_ELEMS // max(n_cols, 1))
    total, total_sq = 0.0, 0.0
    for r0 in range(0, n_rows, step):
        x = to_work_array(src.rows(r0, min(n_rows, r0 + step)), np.dtype(np.float64))
        total += float(x.sum())
        total_sq += float(np.square(x).sum())
    n = n_rows * n_cols
    mean = total / n
    return mean, float(np.sqrt(max(total_sq / n - mean * mean, 0.0)))


def average_ranks(scores: np.ndarray, axis: int = 1) -> np.ndarray:
    """Rank of every score within its query (1 = highest score; equal scores share their average rank).

    ``axis=1``: a query is a row; ``axis=0``: a query is a column.
    """
    x = np.asarray(scores, dtype=np.float64)
    if axis == 0:
        return average_ranks(x.T, axis=1).T
    n = x.shape[1]
    order = np.argsort(-x, axis=1, kind="stable")
    s = np.take_along_axis(-x, order, axis=1)  # ascending -score = best first
    pos = np.broadcast_to(np.arange(n), s.shape)
    new_group = np.ones(s.shape, dtype=bool)
    new_group[:, 1:] = s[:, 1:] != s[:, :-1]
    first = np.maximum.accumulate(np.where(new_group, pos, 0), axis=1)
    last_group = np.ones(s.shape, dtype=bool)
    last_group[:, :-1] = new_group[:, 1:]
    last = np.flip(np.minimum.accumulate(np.flip(np.where(last_group, pos, n), axis=1), axis=1), axis=1)
    ranks = np.empty_like(x)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=1)
    return ranks


def rank_fusion(list_of_sims: Sequence, weights: Sequence[float] | None = None, axis: int = 1):
    """Weighted rank aggregation (Mithun et al. 2018, "Rank-Fusion"): ``fused = -sum_k w_k * rank_k``.

    ``rank_k`` is each item's rank (1 = best, ties get their average rank) among its query's gallery in matrix
    ``k``; the sum is negated so that, like a similarity, higher is better. Ranks depend on the direction:
    ``axis=1`` ranks along rows (rows are the queries, e.g. t2v on a [captions x videos] matrix), ``axis=0``
    along columns (v2t). Evaluate each direction on the matrix fused for it. Weights default to all 1; the
    paper's weighted aggregation would use ``MITHUN2018_WEIGHTS``. Row functions are accepted with ``axis=1``.
    """
    sims, w = _check(list_of_sims, weights)
    if axis not in (0, 1):
        raise EvaluationInputError(f"axis must be 0 or 1, got {axis!r}", subject="scores")

    def fuse(parts):
        return -sum(wi * average_ranks(p, axis=axis) for wi, p in zip(w, parts, strict=True))

    if any(_is_function(s) for s in sims):
        if axis != 1:
            raise EvaluationInputError("row functions can only be rank-fused along rows (axis=1)", subject="scores")
        shape = next((tuple(s.shape) for s in sims if hasattr(s, "shape")), None)
        return _FusedRows(sims, fuse, shape)
    sources = _matrices(sims)
    n_rows, n_cols = sources[0].shape
    if axis == 0:
        return fuse([to_work_array(src.rows(0, n_rows), np.dtype(np.float64)) for src in sources])
    out = np.empty((n_rows, n_cols), dtype=np.float64)
    step = max(1, _ROWS_PER_BLOCK_ELEMS // max(n_cols, 1))
    for r0 in range(0, n_rows, step):
        r1 = min(n_rows, r0 + step)
        out[r0:r1] = fuse([to_work_array(src.rows(r0, r1), np.dtype(np.float64)) for src in sources])
    return out


def fuse_experts(scores: Mapping[str, np.ndarray], weights: Mapping[str, float], kind: str = "score",
                 normalize: str = "none", axis: int = 1) -> np.ndarray:
    """Named experts' score matrices fused as configured: ``kind`` "score" (:func:`score_fusion`, with
    ``normalize``) or "rank" (:func:`rank_fusion` along ``axis``), each expert weighted by ``weights[name]``.

    The one fusion of named experts: a mixture of experts' (``MixtureOfExperts.fuse``) and a search's, whose experts
    are the model's and the speech and on-screen-text cues (``reelsearch.search.experts``). float32 out.
    """
    names = list(weights)
    missing = [n for n in names if n not in scores]
    if missing:
        raise EvaluationInputError(f"no scores for experts {missing}", subject="scores")
    arrays = [np.asarray(scores[n], np.float32) for n in names]
    w = [float(weights[n]) for n in names]
    if kind == "score":
        return np.asarray(score_fusion(arrays, w, normalize=normalize), np.float32)
    if kind == "rank":
        return np.asarray(rank_fusion(arrays, w, axis=axis), np.float32)
    raise EvaluationInputError(f"fusion kind must be 'score' or 'rank', got {kind!r}", subject="scores")
