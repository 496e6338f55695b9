"""What a user sees of the confidence (issue 33; docs/benchmarks.md, "Confidence that knows how common a query is"):
a calibration file (``--before``, e.g. an earlier bundled ``calibration.json``) beside the bundled model's own, on
(1) "a dog" and other queries over the six Flickr8k dev photos of tests/test_confidence.py (two dogs): each photo's
confidence; (2) queries about what no dev photo shows, over all 1,000 dev photos: the best photo's confidence, the
"no good match" threshold for 1,000 photos and whether the banner is said. The score a confidence reads is the one a
search ranks by (``reelsearch.scoring.calibration.banked``: less the querybank's offsets for seven words or more).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_confidence_queries.py --before OLD/calibration.json \\
        [--data flickr8k:../shared/data/flickr8k]

Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench_short_queries import dev_short_queries, raw_scores
from reelsearch.models.calibration import Calibration
from reelsearch.scoring.calibration import banked, query_length

#: tests/test_confidence.py's six dev photos; the second and the fifth show dogs.
PHOTOS = ["3722572342_6904d11d52", "661755629_602ea4cf09", "136644885_f7d2bbf546", "2737759676_4bc9be2daf",
          "3154152744_4e93ec8a62", "501699433_f8df386cf9"]
SIX = ["a dog", "dog", "a black dog", "a dog running", "trampoline", "a woman"]
#: docs/benchmarks.md's "Queries about what no dev photo shows".
ABSENT = ["stock market chart", "a spaceship landing on mars", "a bowl of soup", "a plate of pasta with tomato sauce",
          "laptop keyboard", "an elephant"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="flickr8k:../shared/data/flickr8k")
    parser.add_argument("--before", type=Path, required=True)
    args = parser.parse_args()
    model, pairs, video, offsets, _, _, _ = dev_short_queries(args.data)
    before = Calibration.load(args.before.parent, {"files": [args.before.name]})
    versions = {"before": before, "after": model.calibration}
    ids = [Path(str(key)).stem for key in pairs.video_keys]
    six = [ids.index(p) for p in PHOTOS]
    texts = SIX + ABSENT
    scores = raw_scores(model, video, texts, False)
    scores -= np.array([banked(query_length(t)) for t in texts])[:, None] * offsets[None, :]
    for q, query in enumerate(SIX):
        n = query_length(query)
        print(json.dumps({"query": query, "photos": PHOTOS, "scores": np.round(scores[q, six], 4).tolist(),
                          **{name: np.round(100 * c(scores[q, six], n, query), 1).tolist()
                             for name, c in versions.items()}}), flush=True)
    for q, query in enumerate(ABSENT, len(SIX)):
        n, best = query_length(query), float(scores[q].max())
        row = {"query": query, "length": n, "best_score": round(best, 4)}
        for name, c in versions.items():
            sure, cut = float(c([best], n, query)[0]), c.threshold(n, scores.shape[1])
            row[name] = {"confidence": round(100 * sure, 1), "threshold": round(100 * cut, 1),
                         "no_good_match": sure < cut}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
