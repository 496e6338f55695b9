"""Fitting a calibrated confidence: a score mapped to the share of hits at that score that were right (the curve
itself, and the "no good match" threshold, are ``reelsearch.scoring.calibration``).

The hits are each development query's top ``k`` (text-to-video: a hit is right when it is a video the caption
describes). Isotonic regression (pool-adjacent-violators) fits the probability of being right as a non-decreasing
function of the score; the curve keeps the two ends of each pooled block and is read by linear interpolation between
them (as scikit-learn's ``IsotonicRegression`` predicts), flat beyond its ends. ``reliability`` checks a curve on
held-out queries: per confidence bin, the mean confidence beside the share that was right.
"""

from __future__ import annotations

import numpy as np

from reelsearch.scoring.calibration import EPS, CommonCurve, Curve

#: Hits per development query the calibration counts (what `reelsearch search` shows by default).
HITS = 10
#: How many times a query's top :data:`HITS` pairs count in a commonness curve's fit (``fit_common``): the hits a
#: search shows are the pairs that beat the others, right more often than a pair of the same score and commonness
#: (a query's score has its own level); counted once, the curve read Flickr8k dev's rare 4-6-word queries' top 10 as
#: too rarely right (held-out top-10 error 0.0086 against the length curve's 0.0044); ten times: 0.0043, every pair
#: still calibrated (docs/benchmarks.md, "Confidence that knows how common a query is").
TOP_WEIGHT = 10.0


def isotonic(scores, right, weights=None) -> Curve:
    """The least-squares non-decreasing fit of ``right`` (0/1 or values in [0, 1]) on ``scores`` (ties pooled), each
    point counted ``weights`` times (default once)."""
    scores, right = np.asarray(scores, np.float64).ravel(), np.asarray(right, np.float64).ravel()
    if len(scores) == 0 or len(scores) != len(right):
        raise ValueError(f"isotonic: {len(scores)} scores, {len(right)} labels")
    xs, which = np.unique(scores, return_inverse=True)  # one sort; ties pooled
    if weights is None:
        sums, counts = np.bincount(which, right, len(xs)), np.bincount(which, minlength=len(xs)).astype(np.float64)
    else:
        weights = np.asarray(weights, np.float64).ravel()
        sums, counts = np.bincount(which, right * weights, len(xs)), np.bincount(which, weights, len(xs))
    # runs of distinct scores with the same mean pooled first (the fit is constant over them; over every pair of a
    # split most runs are long runs of wrong pairs), then pool adjacent violators: blocks [lo, hi], sum and count
    start = np.flatnonzero(np.append(True, sums[1:] * counts[:-1] != sums[:-1] * counts[1:]))
    run_sums, run_counts = np.add.reduceat(sums, start), np.add.reduceat(counts, start)
    lo, hi, s, n = [], [], [], []
    for i, a in enumerate(start):
        lo.append(a), hi.append(start[i + 1] - 1 if i + 1 < len(start) else len(xs) - 1)
        s.append(run_sums[i]), n.append(run_counts[i])
        while len(s) > 1 and s[-2] / n[-2] >= s[-1] / n[-1]:
            hi[-2], s[-2], n[-2] = hi[-1], s[-2] + s[-1], n[-2] + n[-1]
            del lo[-1], hi[-1], s[-1], n[-1]
    knots_x, knots_y = [], []
    for a, b, total, count in zip(lo, hi, s, n):
        for j in dict.fromkeys((a, b)):
            knots_x.append(xs[j])
            knots_y.append(total / count)
    return Curve(np.array(knots_x), np.clip(knots_y, 0.0, 1.0))


def top_hits(scores: np.ndarray, relevant: np.ndarray, k: int = HITS,
             values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(hit scores [Q, k], right [Q, k] bool) of each query's ``k`` best columns of ``scores`` [Q, V], best first;
    ``relevant`` [Q, V] bool says which columns are right for each query; ``values`` [Q, V]: what is given for each
    hit instead of its score (what a confidence reads, when the ranking reads another score). Ties keep the lower
    column first."""
    scores = np.asarray(scores)
    k = min(k, scores.shape[1])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    values = scores if values is None else np.asarray(values)
    return np.take_along_axis(values, order, 1), np.take_along_axis(np.asarray(relevant, bool), order, 1)


def library_bests(ranked: np.ndarray, right: np.ndarray, size: int, draws: int, seed: int = 0,
                  values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, right, held [draws * Q]) of each query's best video in ``draws`` random libraries of ``size`` of the
    columns of ``ranked`` [Q, V] (all of them, once, when ``size`` >= V): the best by ``ranked``, its value in
    ``values`` (default ``ranked``: what a confidence reads), whether ``right`` [Q, V] says it is right, and whether
    the library holds a right video at all."""
    ranked = np.asarray(ranked)
    values = ranked if values is None else np.asarray(values)
    rng, rows = np.random.default_rng(seed), np.arange(len(ranked))
    right, videos = np.asarray(right, bool), ranked.shape[1]
    cols = (np.arange(videos)[None] if size >= videos else
            np.stack([rng.choice(videos, size, False) for _ in range(draws)]))  # [draws, size]
    best = cols[np.arange(len(cols))[:, None], np.argmax(ranked[:, cols], axis=2).T]  # [draws, Q]
    return values[rows, best].ravel(), right[rows, best].ravel(), right[:, cols].any(axis=2).T.ravel()


def reliability(confidence, right, bins: int = 10) -> dict:
    """How well ``confidence`` predicts ``right`` on held-out hits: per equal-width bin of confidence (empty bins
    left out) its hits, mean confidence and share right; ``ece`` the hit-weighted mean gap between the two."""
    confidence, right = np.asarray(confidence, np.float64).ravel(), np.asarray(right, np.float64).ravel()
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    rows, gap = [], 0.0
    for b in range(bins):
        sel = which == b
        if not sel.any():
            continue
        mean, share = float(confidence[sel].mean()), float(right[sel].mean())
        rows.append({"bin": [b / bins, (b + 1) / bins], "hits": int(sel.sum()), "confidence": mean, "right": share})
        gap += sel.sum() * abs(mean - share)
    return {"bins": rows, "ece": gap / max(len(confidence), 1), "hits": len(confidence)}


def halves(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The indices 0..n-1 shuffled (``seed``) and cut in two: (fit half, held-out half), each sorted."""
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2:])


def fit_common(base: Curve, scores: np.ndarray, right: np.ndarray, commonness: np.ndarray, top: int = HITS,
               weight: float = TOP_WEIGHT, steps: int = 50) -> CommonCurve:
    """The ``CommonCurve`` of the queries of [Q, V] ``scores`` (what the confidence reads), ``right`` [Q, V] and
    ``commonness`` [Q] (their log shares; rows with NaN are left out), over ``base`` (their length's curve): the
    logistic regression of right on its six terms by Newton's method, each query's ``top`` pairs counted ``weight``
    times, then the isotonic fit of right on its ``z`` (so weighted); ValueError when the fit does not converge."""
    keep = ~np.isnan(np.asarray(commonness, np.float64))
    scores, right = np.asarray(scores, np.float64)[keep], np.asarray(right, np.float64)[keep]
    c = np.asarray(commonness, np.float64)[keep]
    if not len(c):
        raise ValueError("a commonness curve needs queries with a commonness")
    span = (float(c.min()), float(c.max()))
    w = np.ones(scores.shape)
    np.put_along_axis(w, np.argsort(-scores, axis=1, kind="stable")[:, :top], weight, 1)
    p = np.clip(base(scores), EPS, 1 - EPS)
    g, cc = np.log(p / (1 - p)).ravel(), np.broadcast_to(c[:, None], scores.shape).ravel()
    x = np.stack([np.ones_like(g), g, cc, g * cc, cc * cc, g * cc * cc], 1)
    y, w = right.ravel(), w.ravel()
    beta = np.zeros(6)
    for _ in range(steps):
        q = 1 / (1 + np.exp(-(x @ beta)))
        step = np.linalg.solve((x * (w * q * (1 - q))[:, None]).T @ x + 1e-9 * np.eye(6), x.T @ (w * (q - y)))
        beta -= step
        if not np.all(np.isfinite(beta)):
            raise ValueError("the commonness curve's logistic fit did not converge")
        if np.abs(step).max() < 1e-10:
            break
    fitted = CommonCurve(beta, span, Curve([0.0], [0.0]))
    return CommonCurve(beta, span, isotonic(fitted.z(base, scores, c[:, None]), right, w.reshape(scores.shape)))
