"""What calibration version 4 chose, measured on Flickr8k dev with the bundled model (issue 33 part 1;
docs/benchmarks.md, "Per query length" and "Negative terms"):

* for the derived queries of four to six words, "no good match" over a right best hit (each half of the queries held
  out in turn, seeds 0-5) as they rank with or without the querybank's offsets, their confidence read with or without
  them, and their curve of their own or pooled with the captions';
* for negative terms (1 and 2-3 words), how many of the top-10 hits of the 2-3-word queries that show a held-out
  term leave at the cut keeping 99.5 / 99 / 98 / 97% of the others, per signal (the term's own score, its z-score
  over the library, its rank there, its z-score within the query's top N, its score above the query's); and the term
  curve's cut chosen on the fitted half (the lowest that keeps 98% of the others there), measured on the other.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_confidence_choices.py [--data flickr8k:../shared/data/flickr8k]

Prints JSON lines. The queries, terms, halves and "right" are ``reelsearch calibrate``'s
(``reelsearch.training.calibrate``).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from bench_short_queries import dev_short_queries
from reelsearch.evaluation.calibration import HITS, halves, isotonic, top_hits
from reelsearch.scoring.calibration import NO_GOOD_MATCH
from reelsearch.training.calibrate import BATCH, TERM_PHOTOS

CUTS = (0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15)
KEPT = (0.995, 0.99, 0.98, 0.97)


def banners(hits: np.ndarray, right: np.ndarray, seed: int, extra=None) -> tuple[int, int]:
    """(right best hits told "no good match", right best hits), each half of the queries held out in turn; ``extra``:
    (hits, right, fit mask, held mask) pooled into each half's curve (the captions', before version 4)."""
    told = best = 0
    a, b = halves(len(hits), seed)
    for fit, held in ((a, b), (b, a)):
        parts = [(hits[fit], right[fit])] + ([(extra[0][m], extra[1][m]) for m in (extra[2],)] if extra else [])
        curve = isotonic(np.concatenate([h.ravel() for h, _ in parts]), np.concatenate([r.ravel() for _, r in parts]))
        told += int(((curve(hits[held][:, 0]) < NO_GOOD_MATCH) & right[held][:, 0]).sum())
        best += int(right[held][:, 0].sum())
        extra = extra and (extra[0], extra[1], extra[3], extra[2])  # the captions' halves swap too
    return told, best


def term_tops(scores, relevant, queries, lengths):
    """(the 2-3-word queries' top-10 photo indices [B, 10], their rows, each one's words)."""
    base = np.flatnonzero(lengths == "2-3")
    return np.argsort(-scores[base], axis=1, kind="stable")[:, :HITS], base, [set(queries[q].split()) for q in base]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="flickr8k:../shared/data/flickr8k")
    args = parser.parse_args()
    model, pairs, video, offsets, queries, lengths, relevant = dev_short_queries(args.data)
    offsets, cap2vid = offsets[None, :], np.asarray(pairs.cap2vid)

    def raw(texts, cached):
        text = model.encode_text(texts, BATCH, cached=cached)
        return np.asarray(model.fuse(model.expert_scores(text, video), axis=1), np.float64)

    scores, captions = raw(queries, False), raw(pairs.captions, True) - offsets
    cap_hits, cap_right = top_hits(captions, cap2vid[:, None] == np.arange(len(video.video))[None], HITS)
    four = lengths == "4-6"
    for ranked_less, judged_less, pooled in ((True, True, True), (True, True, False), (True, False, False),
                                             (False, True, False), (False, False, False)):
        hits, right = top_hits(scores[four] - offsets * ranked_less, relevant[four], HITS,
                               scores[four] - offsets * judged_less)
        rates = []
        for seed in range(6):
            fit, held = (np.isin(cap2vid, h) for h in halves(len(video.video), seed))
            told, best = banners(hits, right, seed, (cap_hits, cap_right, fit, held) if pooled else None)
            rates.append({"seed": seed, "told": told, "right_best": best, "rate": round(100 * told / best, 1)})
        print(json.dumps({"4-6 words ranked less offsets": ranked_less, "judged less offsets": judged_less,
                          "pooled with captions": pooled, "no_good_match_over_right_best": rates}))

    tops, base, base_words = term_tops(scores, relevant, queries, lengths)
    common = relevant.sum(axis=1) >= TERM_PHOTOS
    for n in ("1", "2-3"):
        terms = np.flatnonzero(common & (lengths == n))
        a, b = halves(len(terms), 0)

        def top10(t):
            rows = [j for j, w in enumerate(base_words) if not w & set(queries[t].split())]
            return rows, tops[rows]

        signals = {"own score": lambda t, rows, top: scores[t][top],
                   "z over the library": lambda t, rows, top: ((scores[t] - scores[t].mean()) / scores[t].std())[top],
                   "rank in the library": lambda t, rows, top: np.argsort(np.argsort(scores[t]))[top],
                   "term score above the query's": lambda t, rows, top: scores[t][top] - np.take_along_axis(
                       scores[base[rows]], top, 1)}
        for first in (20, 50, 100):
            cand = np.argsort(-scores[base], axis=1, kind="stable")[:, :first]
            signals[f"z within the query's top {first}"] = lambda t, rows, top, cand=cand: _z_rows(
                scores[t][cand[rows]])[:, :HITS]
        for name, signal in signals.items():
            feature, shown = [], []
            for t in terms[b]:
                rows, top = top10(t)
                feature.append(signal(t, rows, top).ravel())
                shown.append(relevant[t][top].ravel())
            feature, shown = np.concatenate(feature), np.concatenate(shown).astype(bool)
            leave = {f"{100 * k:g}% kept": round(100 * float((feature[shown] > np.quantile(feature[~shown], k)).mean()),
                                                  1) for k in KEPT}
            print(json.dumps({"term words": n, "signal": name, "top-10 hits showing the term that leave": leave}))
        for fit, held in ((a, b), (b, a)):
            curve = isotonic(np.concatenate([scores[t] for t in terms[fit]]),
                             np.concatenate([relevant[t] for t in terms[fit]]))

            def counts(which, cut, curve=curve):
                c = np.zeros(4, np.int64)  # shown left, shown, others stayed, others
                for t in which:
                    _, top = top10(t)
                    gone, shown = (curve(scores[t]) >= cut)[top], relevant[t][top]
                    c += [(gone & shown).sum(), shown.sum(), (~gone & ~shown).sum(), (~shown).sum()]
                return c

            chosen = min(c for c in CUTS if (lambda k: k[2] / k[3])(counts(terms[fit], c)) >= 0.98)
            for cut in sorted({chosen, 0.5, 0.3}, reverse=True):
                c = counts(terms[held], cut)
                print(json.dumps({"term words": n, "held-out half": "second" if held is b else "first",
                                  "cut chosen on the fitted half": chosen, "cut": cut,
                                  "showing that leave": [int(c[0]), int(c[1])], "others that stay": [int(c[2]),
                                                                                                      int(c[3])]}))


def _z_rows(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)


if __name__ == "__main__":
    main()
