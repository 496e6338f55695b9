"""A confidence that knows how common a query is, from the query's own scores over a reference gallery (issue 33,
"What a user sees"; docs/benchmarks.md, "Confidence from a reference gallery"): measured, not adopted.

Calibration version 5 maps a hit's score to P(right) with one isotonic curve per query length, so "a dog" (right for
244 of the 1,000 Flickr8k dev photos) reads as low as a rare word. The candidates here add features of the query's
scores over the querybank's stored training rows (``model.querybank``: 1,000 training photos, 5,000 training captions;
no dev item), one matrix-vector product at query time: a logistic model of right on the hit's score and the features,
then an isotonic curve of its linear predictor (per length, over every (query, photo) pair, as version 5). Each
length's derived short queries (``reelsearch.evaluation.short_queries``) are cut in halves (seed 0, as `calibrate`),
each half scored by the fit on the other. Rows:

- ``v5``: version 5 (isotonic of the score);
- ``photos z``: the score and its z-score over the query's scores of the training photos;
- ``photos mixture``: and the upper component's weight of a two-Gaussian mixture of those scores (the share of the
  references the query fits, estimated);
- ``photos + captions``: and the excess over a Gaussian's upper tail and the spreads of the query's scores over the
  training photos and (text to text) the training captions;
- ``oracle``: the score, z and the log share of dev photos that ARE right for the query (not available to a search:
  what a perfect commonness feature would give).

Reported per length: log loss and expected calibration error (ECE) over every pair, the top 10 of the 1,000 photos'
ECE (each distinct query once), the top 10's mean confidence beside the share right per commonness bin (queries with
>= 50, 6-49, <= 5 right dev photos), the Spearman correlation of each query-level feature with the log of the query's
right photos, and the six dev photos of tests/test_confidence.py for "a dog" (curves fitted on all 2-3-word queries).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_confidence_reference.py [--data flickr8k:../shared/data/flickr8k]

Prints JSON lines.
"""

from __future__ import annotations

import json
import math

import numpy as np

from bench_short_queries import dev_from_args
from reelsearch.evaluation.calibration import halves, isotonic, reliability
from reelsearch.training.calibrate import BATCH

#: The six photos of tests/test_confidence.py (the second and fifth show dogs).
SIX = ["3722572342_6904d11d52", "661755629_602ea4cf09", "136644885_f7d2bbf546", "2737759676_4bc9be2daf",
       "3154152744_4e93ec8a62", "501699433_f8df386cf9"]
BINS = {"common (>= 50 right)": (50, None), "6-49 right": (6, 49), "rare (<= 5 right)": (0, 5)}
HITS = 10


def _rank(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(np.float64)


def spearman(x, y) -> float:
    """The rank correlation of ``x`` and ``y`` (ties broken by position)."""
    return float(np.corrcoef(_rank(np.asarray(x)), _rank(np.asarray(y)))[0, 1])


def excess(ref: np.ndarray, k: float) -> np.ndarray:
    """Per row, the share of ``ref`` above median + ``k`` sigma (sigma from the median less the 10th percentile, the
    lower part being mostly wrong items) less a Gaussian's share there: the references the query fits, estimated."""
    s = np.sort(ref, axis=1)
    n = ref.shape[1]
    med, sigma = s[:, n // 2], (s[:, n // 2] - s[:, n // 10]) / 1.2816
    tail = 0.5 * math.erfc(k / math.sqrt(2))
    return np.log(np.clip((ref > (med + k * sigma)[:, None]).mean(1) - tail, 0, None) + 1e-3)


def mixture_weight(ref: np.ndarray, iters: int = 60) -> np.ndarray:
    """Per row, the log weight of the upper component of a two-Gaussian mixture of ``ref`` (EM from the median and the
    top 20)."""
    s = np.sort(ref, axis=1)
    lo, hi = s[:, ref.shape[1] // 2], s[:, -20:].mean(1)
    sd_lo = sd_hi = ref.std(1)
    w = np.full(len(ref), 0.1)
    for _ in range(iters):
        a = np.log(w)[:, None] - 0.5 * ((ref - hi[:, None]) / sd_hi[:, None]) ** 2 - np.log(sd_hi)[:, None]
        b = np.log1p(-w)[:, None] - 0.5 * ((ref - lo[:, None]) / sd_lo[:, None]) ** 2 - np.log(sd_lo)[:, None]
        g = 1 / (1 + np.exp(np.clip(b - a, -50, 50)))
        w = np.clip(g.mean(1), 1e-3, 0.999)
        hi, lo = (g * ref).sum(1) / g.sum(1), ((1 - g) * ref).sum(1) / (1 - g).sum(1)
        sd_hi = np.sqrt((g * (ref - hi[:, None]) ** 2).sum(1) / g.sum(1)) + 1e-3
        sd_lo = np.sqrt(((1 - g) * (ref - lo[:, None]) ** 2).sum(1) / (1 - g).sum(1)) + 1e-3
    return np.log(w)


def query_features(photos: np.ndarray, captions: np.ndarray, right: np.ndarray) -> dict[str, np.ndarray]:
    """{name: [Q]} the query-level features (module docstring) of the query's scores over the training ``photos`` and
    ``captions``; "oracle": the log share of dev photos ``right`` for it."""
    def spread(r, q):
        s = np.sort(r, axis=1)
        return s[:, int(q * r.shape[1])] - s[:, r.shape[1] // 2]
    return {"photos: mixture weight": mixture_weight(photos), "photos: excess 2 sd": excess(photos, 2),
            "photos: excess 3 sd": excess(photos, 3), "photos: sd": photos.std(1),
            "photos: p90 - median": spread(photos, 0.9), "captions: excess 3 sd": excess(captions, 3),
            "captions: excess 4 sd": excess(captions, 4), "captions: sd": captions.std(1),
            "captions: p90 - median": spread(captions, 0.9), "captions: p99 - median": spread(captions, 0.99),
            "oracle": np.log((right.sum(1) + 0.5) / right.shape[1])}


VARIANTS = {"v5": None, "photos z": [], "photos mixture": ["photos: mixture weight"],
            "photos + captions": ["photos: excess 2 sd", "photos: excess 3 sd", "photos: sd", "photos: p90 - median",
                                  "captions: excess 3 sd", "captions: excess 4 sd", "captions: sd",
                                  "captions: p90 - median", "captions: p99 - median"],
            "oracle": ["oracle"]}


class Fit:
    """One variant fitted on queries: ``names`` None (version 5: isotonic of the score) or the query-level features
    beside the score and its z over the training photos (logistic by Newton steps, then isotonic of its predictor)."""

    def __init__(self, scores, mean, sd, feats, right, names):
        self.names = names
        if names is None:
            self.curve = isotonic(scores, right)
            return
        x = self._x(scores, mean, sd, feats)
        self.centre, self.scale = x.mean(0), x.std(0) + 1e-12
        xs = np.concatenate([(x - self.centre) / self.scale, np.ones((len(x), 1))], 1)
        y, self.w = right.ravel().astype(np.float64), np.zeros(xs.shape[1])
        for _ in range(40):
            p = 1 / (1 + np.exp(-(xs @ self.w)))
            step = np.linalg.solve((xs * np.maximum(p * (1 - p), 1e-9)[:, None]).T @ xs + 1e-6 * np.eye(len(self.w)),
                                   xs.T @ (y - p) - 1e-6 * self.w)
            self.w += step
            if np.abs(step).max() < 1e-9:
                break
        self.curve = isotonic(self._eta(x), right)

    def _x(self, scores, mean, sd, feats):
        cols = [scores, (scores - mean[:, None]) / sd[:, None]]
        cols += [np.broadcast_to(feats[n][:, None], scores.shape) for n in self.names]
        return np.stack([c.ravel() for c in cols], 1)

    def _eta(self, x):
        return np.concatenate([(x - self.centre) / self.scale, np.ones((len(x), 1))], 1) @ self.w

    def __call__(self, scores, mean, sd, feats):
        if self.names is None:
            return self.curve(scores)
        return self.curve(self._eta(self._x(scores, mean, sd, feats))).reshape(scores.shape)

    def decreasing(self, sd) -> int:
        """How many queries (their ``sd``) read a higher score as a lower predictor (the score's and z's weights)."""
        if self.names is None:
            return 0
        a, b = self.w[0] / self.scale[0], self.w[1] / self.scale[1]
        return int((a + b / sd < 0).sum())


def log_loss(p, y) -> float:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return float(-(y * np.log(p) + (1 - y) * np.log1p(-p)).mean())


def measure(names, scores, mean, sd, feats, right, seed: int = 0) -> dict:
    """Each half of the queries scored by the fit on the other: the module docstring's figures."""
    a = np.isin(np.arange(len(scores)), halves(len(scores), seed)[0])
    sure, decreasing = np.zeros(scores.shape), 0
    for fit, held in ((a, ~a), (~a, a)):
        f = Fit(scores[fit], mean[fit], sd[fit], {k: v[fit] for k, v in feats.items()}, right[fit], names)
        sure[held] = f(scores[held], mean[held], sd[held], {k: v[held] for k, v in feats.items()})
        decreasing += f.decreasing(sd[held])
    y = right.astype(np.float64)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :HITS]
    top, top_right = np.take_along_axis(sure, order, 1), np.take_along_axis(y, order, 1)
    count = right.sum(1)
    bins = {}
    for name, (lo, hi) in BINS.items():
        sel = (count >= lo) & (count <= (hi if hi is not None else count.max()))
        if sel.any():
            bins[name] = {"queries": int(sel.sum()), "top10_confidence": round(float(top[sel].mean()), 3),
                          "top10_right": round(float(top_right[sel].mean()), 3),
                          "top10_ece": round(reliability(top[sel], top_right[sel])["ece"], 3),
                          "best_confidence": round(float(top[sel, 0].mean()), 3),
                          "best_right": round(float(top_right[sel, 0].mean()), 3)}
    return {"log_loss": round(log_loss(sure.ravel(), y.ravel()), 5),
            "all_pairs_ece": round(reliability(sure, y)["ece"], 4),
            "top10_ece": round(reliability(top, top_right)["ece"], 4), "bins": bins,
            "queries_decreasing_in_score": decreasing}


def main() -> None:
    model, pairs, video, offsets, queries, lengths, relevant = dev_from_args(__doc__)
    text = model.encode_text(queries, BATCH, cached=False)
    own = np.asarray(model.fuse(model.expert_scores(text, video), axis=1), np.float64)
    rows = model.ann_query(text)  # its inner product with a stored row is the fused score
    photos = (rows @ model.querybank.video.T).astype(np.float64)
    captions = (rows @ model.querybank.text.T).astype(np.float64)
    six = [list(pairs.video_keys).index(k) for k in SIX]
    for n in ("1", "2-3", "4-6"):
        sel = np.flatnonzero(lengths == n)
        scores, right, mean, sd = own[sel], relevant[sel], photos[sel].mean(1), photos[sel].std(1)
        feats = query_features(photos[sel], captions[sel], right)
        logn = np.log(right.sum(1) + 0.5)
        print(json.dumps({"length": n, "queries": len(sel), "spearman_with_log_right_photos": {
            k: round(spearman(v, logn), 3) for k, v in feats.items()}}), flush=True)
        for variant, names in VARIANTS.items():
            row = {"length": n, "variant": variant, **measure(names, scores, mean, sd, feats, right)}
            if n == "2-3" and "a dog" in queries:  # the user's six photos, fitted on every 2-3-word query
                i = [queries[j] for j in sel].index("a dog")
                f = Fit(scores, mean, sd, feats, right, names)
                got = f(scores[i:i + 1], mean[i:i + 1], sd[i:i + 1], {k: v[i:i + 1] for k, v in feats.items()})[0]
                row["a dog, six photos"] = [round(float(got[j]), 3) for j in six]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
