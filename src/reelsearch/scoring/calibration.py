"""A calibrated confidence as a model carries it: a curve from a hit's score to the probability that the video is
right for the query, one per query length (:data:`LENGTHS`: a word's scores are not a sentence's), and per length the
confidence below which a search says "no good match".

The curves are fitted on a development split (``reelsearch.evaluation.calibration``, ``reelsearch calibrate``) over
every (query, video) pair, not a gallery's top hits, so that a confidence means the same in a library of ten photos
and of a million; they are saved in the model folder (``reelsearch.models.calibration.Calibration``); searches read
them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: A search whose best hit's confidence is below this says "no good match", for a calibration of version 4 or older
#: (curves of a big gallery's top 10: docs/search.md). A calibration of version 5 holds a threshold per query length
#: (``Calibration.threshold``) and library size, chosen by :data:`LIBRARIES` and :data:`RIGHT_BELOW`.
NO_GOOD_MATCH = 0.05
#: The library sizes a length's "no good match" thresholds are chosen for: random libraries of this many development
#: photos. A right best hit of a bigger library scores higher (it beat more photos), so its threshold is higher; a
#: search reads the threshold of the largest of these sizes not above its library's (``Calibration.threshold``;
#: the smallest's below them): a step, not an interpolation, so that no size in between gets more banners over
#: right hits than the sizes fitted (the threshold rises slowly at first: read between 10 and 100 photos by the
#: logarithm of the size, a 20-photo library's right best hits were told "no good match" 5.3-6.5% of the time).
LIBRARIES = (10, 20, 50, 100, 300)
#: The share of right best hits of the development libraries of each size of :data:`LIBRARIES` that fall below that
#: size's "no good match" threshold (Flickr8k dev, held out: at most 5% in libraries of 10, 20, 100 or all 1,000
#: photos, per length; docs/benchmarks.md, "Confidence in small libraries").
RIGHT_BELOW = 0.04
#: :data:`RIGHT_BELOW` for a length whose confidence reads the query's commonness (calibration version 6): the right
#: best hits of rare queries read low, a long low tail whose 4% point moved between halves of the development queries
#: (held out, one word in libraries of 100 photos: 5.3% of the right best hits below it); at 3%, 0.8-4.0% at every
#: length of 1-6 words and size (halves cut by seeds 0-2), and "no good match" is still said over 34-50% of the best
#: hits of 10-photo libraries holding no right photo (version 5: 17-38%; docs/benchmarks.md, "Confidence that knows
#: how common a query is").
COMMON_RIGHT_BELOW = 0.03

#: A video whose picture may well show a negative term is removed: the model's calibrated probability that a photo
#: with its score for the term shows it (``Calibration.shows``) reaches this. On Flickr8k dev (terms held out) 0.3
#: removes 16-20% of the top-10 hits that show a one-word term and keeps 98.4-98.7% of the others (0.5: 11.4% and
#: 99.4%); the lowest cut keeping 98% of the others on the terms it was chosen on (docs/benchmarks.md, "Negative
#: terms").
NEGATIVE_CONFIDENCE = 0.3
#: :data:`NEGATIVE_CONFIDENCE` where the probability reads how common the term is (calibration version 6: the
#: confidence of a search for the term alone, ``Calibration.shows``). Terms held out (Flickr8k dev, halves of seeds 0
#: and 1 each in turn), 0.4 removes 23.5% of the top-10 hits that show a one-word term and keeps 98.5% of the others,
#: 23.1% and 98.8% for two or three words (the term curve at 0.3: 18.1% and 98.6%, 17.9% and 98.0%;
#: docs/benchmarks.md, "Negative terms that know how common the term is").
COMMON_NEGATIVE_CONFIDENCE = 0.4

#: The query lengths a model's confidence has a curve for, in words: one word, two or three, four to six (typed
#: phrases: "dog running through the grass"), seven or more (full sentences: the curve of the development captions).
LENGTHS = ("1", "2-3", "4-6", "7+")
#: The length whose curve is fitted on full captions (a model calibrated before lengths had this one alone).
SENTENCE = LENGTHS[-1]
_WORD = re.compile(r"\w+")


#: The query lengths whose scores subtract the querybank's offsets (``reelsearch.models.querybank``): seven words or
#: more. The bank is made of training captions; on Flickr8k dev it lifts captions' R@1 (32.4 -> 35.9) but lowers one
#: word's (21.5 -> 18.5), two or three words' (20.3 -> 19.1) and four to six words' (17.7 -> 17.4), so shorter
#: queries rank by the model's own score (docs/benchmarks.md, "Retrieval for the queries people type").
BANKED = frozenset({SENTENCE})
#: The query lengths whose confidence reads the model's own score, not the score less the querybank's offset: what
#: they rank by (one to six words). Over every (query, photo) pair of Flickr8k dev, held out, the own score predicts
#: a short query's right photos better than the score less the offset (log loss 0.0694 / 0.0432 / 0.0092 against
#: 0.0710 / 0.0437 / 0.0093 for 1, 2-3, 4-6 words), the score less the offset a caption's (0.00385 against 0.00404).
OWN_SCORE = frozenset(LENGTHS) - BANKED


def banked(length: str) -> bool:
    """Whether a query of ``length`` (:func:`query_length`) ranks by scores less the querybank's offsets."""
    return length in BANKED


def query_length(text: str | None) -> str:
    """The length (of :data:`LENGTHS`) of a query's free text: its words (runs of letters and digits) counted."""
    n = len(_WORD.findall(text or ""))
    return "1" if n <= 1 else "2-3" if n <= 3 else "4-6" if n <= 6 else SENTENCE


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


#: A length curve's confidence is clipped to [EPS, 1 - EPS] before its log-odds are taken (``CommonCurve``).
EPS = 1e-4


@dataclass
class CommonCurve:
    """The confidence of a hit by its score and its query's commonness ``l`` (the log of the share of training videos
    a caption of which holds the query's words: ``reelsearch.scoring.commonness.Commonness.log_share``), calibration
    version 6: with ``g`` the log-odds of the length's curve at the score, ``z = a(l) + b(l) g``, ``a`` and ``b``
    quadratics in ``l`` (``weights``: the coefficients of 1, g, l, g l, l², g l²; ``l`` clamped to ``span``, the
    commonness the fit saw; ``b`` at least 0), and the confidence ``correction(z)`` (an isotonic curve): non-decreasing
    in the score at every commonness. A NaN commonness (a query without content words) reads the length's curve."""

    weights: np.ndarray
    span: tuple[float, float]
    correction: Curve

    def __post_init__(self):
        self.weights = np.asarray(self.weights, np.float64)
        self.span = (float(self.span[0]), float(self.span[1]))
        if self.weights.shape != (6,) or not np.all(np.isfinite(self.weights)) or not self.span[0] <= self.span[1]:
            raise ValueError(f"a commonness curve needs 6 finite weights and a span, got {self.weights} {self.span}")

    def z(self, base: Curve, scores, commonness) -> np.ndarray:
        """``a(l) + b(l) g`` of each score (``commonness`` broadcast against ``scores``; NaN where it is)."""
        p = np.clip(base(scores), EPS, 1 - EPS)
        g = np.log(p / (1 - p))
        c = np.clip(np.asarray(commonness, np.float64), *self.span)
        w = self.weights
        return w[0] + w[2] * c + w[4] * c * c + np.maximum(w[1] + w[3] * c + w[5] * c * c, 0.0) * g

    def __call__(self, base: Curve, scores, commonness) -> np.ndarray:
        """The confidence (float64) of each score of a query as common as ``commonness`` (broadcast against
        ``scores``), ``base`` the curve of the query's length."""
        scores, commonness = np.asarray(scores, np.float64), np.asarray(commonness, np.float64)
        out = self.correction(self.z(base, scores, commonness))
        return np.where(np.isnan(commonness), base(scores), out)
