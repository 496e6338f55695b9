"""Confidence in small libraries (issue 33 part 1; docs/benchmarks.md, "Confidence in small libraries"): calibration
version 4 (per length, the isotonic fit of the top 10 hits over all 1,000 Flickr8k dev photos; 1-3 words read less
the querybank's offset; "no good match" below 0.05) beside version 5 (the fit of every (query, photo) pair; 1-6 words
read the model's own score; a threshold per length and library size: ``reelsearch.training.calibrate``), each half of
each length's queries held out in turn (fit on the other half, as `reelsearch calibrate` reports it), in libraries of
10, 20, 100 random dev photos and all 1,000: per length, the expected calibration error of the best hit's confidence
and "no good match" over a right best hit, over a wrong one, and when no photo of the library is right.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_confidence_libraries.py [--data flickr8k:../shared/data/flickr8k]

Prints JSON lines.
"""

from __future__ import annotations

import json

import numpy as np

from bench_short_queries import dev_from_args, raw_scores
from reelsearch.evaluation.calibration import HITS, halves, isotonic, library_bests, reliability, top_hits
from reelsearch.scoring.calibration import LENGTHS, NO_GOOD_MATCH, SENTENCE
from reelsearch.training.calibrate import DRAWS, MEASURED, fit_length


def version_4(ranked, judged, right, seed):
    """(version 4's curve of these queries: their top 10 over all the photos, its threshold of a library size)."""
    hits, ok = top_hits(ranked, right, HITS, judged)
    return isotonic(hits, ok), lambda size: NO_GOOD_MATCH


def version_5(ranked, judged, right, seed):
    """(version 5's curve of these queries: every pair, its threshold of a library size)."""
    fitted = fit_length([("", ranked, judged, right, None, None)], seed)
    return fitted, lambda size: fitted.threshold(SENTENCE, size)


def measure(fit, ranked, judged, right, seed: int = 0) -> dict:
    """{library size: the best hit's ECE and the banner's rates} of ``fit`` (a version's), each half held out."""
    a = np.isin(np.arange(len(ranked)), halves(len(ranked), seed)[0])
    fits = [(fit(ranked[rows], judged[rows], right[rows], seed), ~rows) for rows in (a, ~a)]
    out = {}
    for size in MEASURED:
        sure, oks, helds, weak = [], [], [], []
        for (curve, cut), rows in fits:
            value, ok, held = library_bests(ranked[rows], right[rows], size or ranked.shape[1], DRAWS.get(size, 1),
                                            seed + 1, judged[rows])
            sure.append(curve(value)), oks.append(ok), helds.append(held)
            weak.append(curve(value) < cut(size or ranked.shape[1]))
        sure, ok, held, weak = map(np.concatenate, (sure, oks, helds, weak))
        out["all" if size is None else str(size)] = {
            "best_ece": round(reliability(sure, ok)["ece"], 4), "best_right": round(float(ok.mean()), 3),
            "right_best": int(ok.sum()), "banner_over_right_best": round(float(weak[ok].mean()), 4),
            "banner_over_wrong_best": round(float(weak[~ok].mean()), 4),
            "banner_when_none_right": round(float(weak[~held].mean()), 4) if (~held).any() else None}
    return out


def main() -> None:
    model, pairs, video, offsets, queries, lengths, relevant = dev_from_args(__doc__)
    cap2vid = np.asarray(pairs.cap2vid)
    own = raw_scores(model, video, queries, False)
    captions = raw_scores(model, video, pairs.captions) - offsets
    for n in LENGTHS:
        if n == SENTENCE:  # the captions, right for their own photo; halves by caption here (calibrate: by photo)
            ranked = judged4 = judged5 = captions
            right = cap2vid[:, None] == np.arange(len(offsets))[None]
        else:
            sel = lengths == n
            ranked, right = own[sel], relevant[sel]
            judged4, judged5 = (own[sel] if n == "4-6" else own[sel] - offsets), own[sel]
        for version, fit, judged in (("4", version_4, judged4), ("5", version_5, judged5)):
            print(json.dumps({"length": n, "queries": len(ranked), "version": version,
                              **measure(fit, ranked, judged, right)}), flush=True)


if __name__ == "__main__":
    main()
