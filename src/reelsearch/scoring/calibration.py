"""A calibrated confidence as a model carries it: a curve from a score to the share of hits at that score that were
right, one per query length (:data:`LENGTHS`: a word's scores are not a sentence's), and the confidence below which a
search says "no good match".

The curves are fitted on a development split (``reelsearch.evaluation.calibration``, ``reelsearch calibrate``) and
saved in the model folder (``reelsearch.models.parts.Calibration``); searches read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: A search whose best hit's confidence is below this says "no good match" (docs/search.md): the closest videos are
#: still shown, but not presented as an answer. On Flickr8k dev (the bundled model) 8.2% of captions fall below it,
#: their best hit right 13.9% of the time (38% above it); captions of things the photos never show fall below it.
NO_GOOD_MATCH = 0.05

#: A video whose picture more likely shows a negative term than not is removed: the model's calibrated probability
#: that a photo with its score for the term shows it (``Calibration.shows``) reaches this.
NEGATIVE_CONFIDENCE = 0.5

#: The query lengths a model's confidence has a curve for, in words: one word, two or three, four or more (full
#: sentences: the curve of the development captions themselves).
LENGTHS = ("1", "2-3", "4+")
#: The length whose curve is fitted on full captions (a model calibrated before lengths had this one alone).
SENTENCE = LENGTHS[-1]
_WORD = re.compile(r"\w+")


#: The query lengths whose scores subtract the querybank's offsets (``reelsearch.models.querybank``): four words or
#: more. The bank is made of training captions; on Flickr8k dev it lifts captions' R@1 (32.4 -> 35.9) but lowers one
#: word's (21.5 -> 18.5) and two or three words' (20.3 -> 19.1), so shorter queries rank by the model's own score
#: (docs/benchmarks.md, "Retrieval for the queries people type").
BANKED = frozenset({SENTENCE})


def banked(length: str) -> bool:
    """Whether a query of ``length`` (:func:`query_length`) ranks by scores less the querybank's offsets."""
    return length in BANKED


def query_length(text: str | None) -> str:
    """The length (of :data:`LENGTHS`) of a query's free text: its words (runs of letters and digits) counted."""
    n = len(_WORD.findall(text or ""))
    return "1" if n <= 1 else "2-3" if n <= 3 else SENTENCE


@dataclass
class Curve:
    """A non-decreasing map from a score to a probability: ``score`` [n] increasing knots, ``right`` [n] in [0, 1]."""

    score: np.ndarray
    right: np.ndarray

    def __post_init__(self):
        self.score = np.asarray(self.score, np.float64)
        self.right = np.asarray(self.right, np.float64)
        if self.score.ndim != 1 or self.score.shape != self.right.shape or len(self.score) == 0:
            raise ValueError(f"a curve needs matching non-empty knots, got {self.score.shape} {self.right.shape}")
        if np.any(np.diff(self.score) < 0) or np.any(np.diff(self.right) < 0):
            raise ValueError("a curve's knots must be non-decreasing in score and probability")
        if self.right[0] < 0 or self.right[-1] > 1:
            raise ValueError("a curve's probabilities must lie in [0, 1]")

    def __call__(self, scores) -> np.ndarray:
        """The confidence of each score (float64, same shape)."""
        return np.interp(np.asarray(scores, np.float64), self.score, self.right)
