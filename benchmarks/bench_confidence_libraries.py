"""Confidence in small libraries and for common and rare queries (issue 33; docs/benchmarks.md, "Confidence in small
libraries" and "Confidence that knows how common a query is"): calibration version 4 (per length, the isotonic fit
of the top 10 hits over all 1,000 Flickr8k dev photos; 1-3 words read less the querybank's offset; "no good match"
below 0.05), version 5 (the fit of every (query, photo) pair; 1-6 words read the model's own score; a threshold per
length and library size) and version 6 (1-6 words: version 5's curve read with the query's commonness in the
training captions: ``reelsearch.training.calibrate``), each half of each length's queries held out in turn (fit on
the other half, as `reelsearch calibrate` reports it), in libraries of 10, 20, 100 random dev photos and all 1,000:
per length, the expected calibration error of the best hit's confidence and "no good match" over a right best hit,
over a wrong one, and when no photo of the library is right; and over all 1,000 photos (``pairs``) the log loss and
the calibration error of every pair and of each query's top 10 (each distinct query once), and per bin of the
queries' right photos (``COMMON_BINS``) the top 10's and every pair's mean confidence beside the share right.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_confidence_libraries.py [--data flickr8k:../shared/data/flickr8k]

Prints JSON lines.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from bench_short_queries import dev_from_args, raw_scores
from reelsearch.evaluation.calibration import HITS, halves, isotonic, library_bests, reliability, top_hits
from reelsearch.features.caches import DatasetSource
from reelsearch.scoring.calibration import LENGTHS, NO_GOOD_MATCH, SENTENCE
from reelsearch.scoring.commonness import Commonness
from reelsearch.training.calibrate import (
    COMMON_BINS,
    DRAWS,
    MEASURED,
    TRAINING_SPLIT,
    fit_length,
    log_loss,
    per_best,
    share_of,
)


def version_4(ranked, judged, right, shares, seed):
    """(version 4's confidence of values and their queries' shares: the isotonic fit of these queries' top 10 over all
    the photos; its threshold of a library size)."""
    hits, ok = top_hits(ranked, right, HITS, judged)
    curve = isotonic(hits, ok)
    return (lambda values, _: curve(values)), lambda size: NO_GOOD_MATCH


def version_5(ranked, judged, right, shares, seed):
    """(version 5's confidence: the fit of every pair, whatever the query's commonness; its threshold)."""
    fitted = fit_length([("", ranked, judged, right, None, None, np.full(len(ranked), np.nan))], seed)
    return (lambda values, _: fitted.curve(values)), lambda size: fitted.threshold(SENTENCE, size)


def version_6(ranked, judged, right, shares, seed):
    """(version 6's confidence: version 5's curve read with each query's commonness; its threshold)."""
    fitted = fit_length([("", ranked, judged, right, None, None, shares)], seed)
    return (lambda values, c: fitted.read(values, SENTENCE, c)), lambda size: fitted.threshold(SENTENCE, size)


def measure(fit, ranked, judged, right, shares, seed: int = 0) -> dict:
    """{library size: the best hit's ECE and the banner's rates; "pairs": over all the photos, the log loss and error
    of every pair and of the top 10, by commonness} of ``fit`` (a version's), each half held out."""
    a = np.isin(np.arange(len(ranked)), halves(len(ranked), seed)[0])
    fits = [(fit(ranked[rows], judged[rows], right[rows], shares[rows], seed), ~rows) for rows in (a, ~a)]
    out = {}
    for size in MEASURED:
        sure, oks, helds, weak = [], [], [], []
        for (confidence, cut), rows in fits:
            value, ok, held = library_bests(ranked[rows], right[rows], size or ranked.shape[1], DRAWS.get(size, 1),
                                            seed + 1, judged[rows])
            p = confidence(value, per_best(shares[rows], len(value)))
            sure.append(p), oks.append(ok), helds.append(held)
            weak.append(p < cut(size or ranked.shape[1]))
        sure, ok, held, weak = map(np.concatenate, (sure, oks, helds, weak))
        out["all" if size is None else str(size)] = {
            "best_ece": round(reliability(sure, ok)["ece"], 4), "best_right": round(float(ok.mean()), 3),
            "right_best": int(ok.sum()), "banner_over_right_best": round(float(weak[ok].mean()), 4),
            "banner_over_wrong_best": round(float(weak[~ok].mean()), 4),
            "banner_when_none_right": round(float(weak[~held].mean()), 4) if (~held).any() else None}
    every, top, top_right, count = (np.zeros(right.shape), np.zeros((len(right), HITS)),
                                    np.zeros((len(right), HITS), bool), right.sum(axis=1))
    for (confidence, _), rows in fits:
        every[rows] = confidence(judged[rows], shares[rows, None])
        value, top_right[rows] = top_hits(ranked[rows], right[rows], HITS, judged[rows])
        top[rows] = confidence(value, shares[rows, None])
    many, few = count >= COMMON_BINS[0], count <= COMMON_BINS[1]
    out["pairs"] = {"log_loss": round(log_loss(every, right), 5), "ece": round(reliability(every, right)["ece"], 5),
                    "top_ece": round(reliability(top, top_right)["ece"], 4),
                    **{name: {"queries": int(rows.sum()),
                              "top": [round(float(top[rows].mean()), 3), round(float(top_right[rows].mean()), 3)],
                              "pairs": [round(float(every[rows].mean()), 4), round(float(right[rows].mean()), 4)],
                              "top_ece": round(reliability(top[rows], top_right[rows])["ece"], 4)}
                       for name, rows in ((f">={COMMON_BINS[0]}", many), ("between", ~many & ~few),
                                          (f"<={COMMON_BINS[1]}", few)) if rows.any()}}
    return out


def main() -> None:
    data = sys.argv[sys.argv.index("--data") + 1] if "--data" in sys.argv else "flickr8k:../shared/data/flickr8k"
    model, pairs, video, offsets, queries, lengths, relevant = dev_from_args(__doc__)
    source, _ = DatasetSource.open(data, None)
    commonness = Commonness.of([item.captions for item in source.dataset.items(TRAINING_SPLIT)])
    shares = np.array([share_of(commonness, q) for q in queries])
    cap2vid = np.asarray(pairs.cap2vid)
    own = raw_scores(model, video, queries, False)
    captions = raw_scores(model, video, pairs.captions) - offsets
    for n in LENGTHS:
        if n == SENTENCE:  # the captions, right for their own photo; halves by caption here (calibrate: by photo)
            ranked = judged4 = judged5 = captions
            right = cap2vid[:, None] == np.arange(len(offsets))[None]
            common = np.full(len(captions), np.nan)  # a sentence reads its length's curve
        else:
            sel = lengths == n
            ranked, right, common = own[sel], relevant[sel], shares[sel]
            judged4, judged5 = (own[sel] if n == "4-6" else own[sel] - offsets), own[sel]
        for version, fit, judged in (("4", version_4, judged4), ("5", version_5, judged5), ("6", version_6, judged5)):
            print(json.dumps({"length": n, "queries": len(ranked), "version": version,
                              **measure(fit, ranked, judged, right, common)}), flush=True)


if __name__ == "__main__":
    main()
