"""Retrieval metrics that rounding cannot decide: bounds over every way near-ties could break.

Two numeric paths (a torch batch and the evaluator's numpy path, or two CPUs' kernels) give score matrices that agree
to about 1e-7, not bit for bit. Where two scores of one query lie closer than that, the metrics of the two matrices can
differ, so a test may not compare them for equality. Instead, from one matrix and a tolerance ``tol``, this module
computes each metric's range over all matrices within ``tol / 2`` of it (a near-tie counted against the model gives the
low end, for it the high end), by a plain loop over queries, independent of ``reelsearch.evaluation``; a metric
computed by any path within that distance lies inside the range.
"""

from __future__ import annotations

import numpy as np

RECALLS = (1, 5, 10)


def _rank_range(scores: np.ndarray, correct: np.ndarray, tol: float) -> tuple[int, int]:
    """(best, worst) rank of a query's best correct item (1 = first) with near-ties of ``tol`` broken either way."""
    best = scores[correct].max()
    wrong = scores[~correct]
    return 1 + int(np.sum(wrong > best + tol)), 1 + int(np.sum(wrong >= best - tol))


def metric_ranges(sims: np.ndarray, cap2vid: np.ndarray, tol: float = 1e-4) -> dict:
    """{"t2v": {metric: (low, high)}, "v2t": {...}, "RSum": (low, high)} for R@1/5/10 (percent) and MeanR (low is
    the better, smaller rank), over every matrix within ``tol / 2`` of ``sims`` [captions x videos]."""
    sims = np.asarray(sims, np.float64)
    cap2vid = np.asarray(cap2vid)
    out = {}
    for direction, queries in (("t2v", [(sims[i], np.arange(sims.shape[1]) == v) for i, v in enumerate(cap2vid)]),
                               ("v2t", [(sims[:, v], cap2vid == v) for v in range(sims.shape[1])])):
        ranks = np.array([_rank_range(s, c, tol) for s, c in queries])  # [queries, (best, worst)]
        out[direction] = {f"R@{k}": (100.0 * np.mean(ranks[:, 1] <= k), 100.0 * np.mean(ranks[:, 0] <= k))
                          for k in RECALLS}
        out[direction]["MeanR"] = (float(ranks[:, 0].mean()), float(ranks[:, 1].mean()))
    out["RSum"] = tuple(sum(out[d][f"R@{k}"][end] for d in ("t2v", "v2t") for k in RECALLS) for end in (0, 1))
    return out


def undecided_share(sims: np.ndarray, cap2vid: np.ndarray, tol: float = 1e-4) -> dict:
    """{"t2v": share, "v2t": share}: the share of each direction's queries whose R@1/5/10 a near-tie of ``tol`` could
    change (their best and worst rank fall on two sides of a cutoff)."""
    sims, cap2vid = np.asarray(sims, np.float64), np.asarray(cap2vid)
    out = {}
    for direction, queries in (("t2v", [(sims[i], np.arange(sims.shape[1]) == v) for i, v in enumerate(cap2vid)]),
                               ("v2t", [(sims[:, v], cap2vid == v) for v in range(sims.shape[1])])):
        ranks = np.array([_rank_range(s, c, tol) for s, c in queries])
        out[direction] = float(np.mean([any((b <= k) != (w <= k) for k in RECALLS) for b, w in ranks]))
    return out


def assert_metrics_within(reported: dict, sims: np.ndarray, cap2vid: np.ndarray, tol: float = 1e-4,
                          max_undecided: float = 0.05, directions: tuple[str, ...] = ("t2v", "v2t")) -> None:
    """``reported`` (``retrieval_metrics``'s shape) lies within the ranges of ``sims`` in ``directions`` (and its
    RSum, when both are checked), and at most ``max_undecided`` of each direction's queries are near-tied across a
    recall cutoff, so the check stays nearly one of equality.

    Whether a trained toy has a near-tie at all depends on the CPU it was trained on (its kernels' last bits move
    every weight), so a test may not demand none: one or two undecided queries are allowed, not a matrix of them."""
    ranges = metric_ranges(sims, cap2vid, tol)
    undecided = undecided_share(sims, cap2vid, tol)
    eps = 1e-9
    for d in directions:
        assert undecided[d] <= max_undecided, (f"near-tied scores: rounding could move {d}'s recalls for "
                                               f"{100 * undecided[d]:.1f}% of its queries")
        for key, (low, high) in ranges[d].items():
            assert low - eps <= reported[d][key] <= high + eps, (d, key, reported[d][key], (low, high))
    if set(directions) == {"t2v", "v2t"}:
        assert ranges["RSum"][0] - eps <= reported["RSum"] <= ranges["RSum"][1] + eps, (reported["RSum"],
                                                                                         ranges["RSum"])
