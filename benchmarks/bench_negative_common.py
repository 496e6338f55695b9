"""Negative terms that read how common the term is (issue 33 part 1, calibration version 6; docs/benchmarks.md,
"Negative terms that know how common the term is"): on Flickr8k dev, the terms held out by halves as
``reelsearch calibrate`` holds them (seeds 0 and 1, each half in turn), how many of the top-10 hits of the 2-3-word
queries that show a held-out term leave and how many others stay, per cut, when a photo is removed by

* ``term curve``: the term curve of its length (fitted on the other half's terms; what a search did before);
* ``term curve + commonness``: that curve corrected by the term's commonness (``fit_common`` over the other half's
  terms, as version 6 fits a length's curve);
* ``search confidence``: the version-6 confidence of a search for the term alone (its length's curve and commonness
  curve, fitted on every short query of the length but the held-out terms: ``Calibration.shows`` with a text).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_negative_common.py [--data flickr8k:../shared/data/flickr8k]

Prints JSON lines. The commonness is the bundled model's table of its training captions.
"""

from __future__ import annotations

import json

import numpy as np

from bench_confidence_choices import term_tops
from bench_short_queries import dev_from_args, raw_scores
from reelsearch.evaluation.calibration import fit_common, halves, isotonic
from reelsearch.training.calibrate import TERM_PHOTOS, share_of

CUTS = (0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2)


def main() -> None:
    model, pairs, video, offsets, queries, lengths, relevant = dev_from_args(__doc__)
    scores = raw_scores(model, video, queries, cached=False)
    table = model.calibration.commonness
    shares = np.array([share_of(table, q) for q in queries])
    tops, _, base_words = term_tops(scores, relevant, queries, lengths)
    common = relevant.sum(axis=1) >= TERM_PHOTOS
    for n in ("1", "2-3"):
        terms = np.flatnonzero(common & (lengths == n))
        same = np.flatnonzero(lengths == n)
        totals = {}
        for seed in (0, 1):
            a, b = halves(len(terms), seed)
            for fit, held in ((a, b), (b, a)):
                fit_t, held_t = terms[fit], terms[held]
                term_curve = isotonic(scores[fit_t].ravel(), relevant[fit_t].ravel())
                term_common = fit_common(term_curve, scores[fit_t], relevant[fit_t], shares[fit_t])
                rows = same[~np.isin(same, held_t) & ~np.isnan(shares[same])]
                length_curve = isotonic(scores[rows].ravel(), relevant[rows].ravel())
                search_common = fit_common(length_curve, scores[rows], relevant[rows], shares[rows])
                readers = {"term curve": term_curve,
                           "term curve + commonness": lambda s, c, t=term_common, b=term_curve: t(b, s, c),
                           "search confidence": lambda s, c, t=search_common, b=length_curve: t(b, s, c)}
                for name, read in readers.items():
                    for t in held_t:
                        keep = [j for j, w in enumerate(base_words) if not w & set(queries[t].split())]
                        top, p = tops[keep], read(scores[t]) if name == "term curve" else read(scores[t], shares[t])
                        shown = relevant[t][top]
                        for cut in CUTS:
                            gone = (p >= cut)[top]
                            c = totals.setdefault((name, cut), np.zeros(4, np.int64))
                            c += [(gone & shown).sum(), shown.sum(), (~gone & ~shown).sum(), (~shown).sum()]
        for (name, cut), c in totals.items():
            print(json.dumps({"term words": n, "reader": name, "cut": cut,
                              "showing that leave": [int(c[0]), int(c[1]), round(100 * c[0] / c[1], 1)],
                              "others that stay": [int(c[2]), int(c[3]), round(100 * c[2] / c[3], 2)]}), flush=True)


if __name__ == "__main__":
    main()
