"""The speech and on-screen-text cues as search sources: each cue's expert score from its keyword and meaning scores
(``reelsearch.index.textcues.TextCues.scores``), the segment that explains it, and the sentence encoder the
text-cue index is given.

A cue's expert score, per video: ``KEYWORD_MEANING[0] * keyword + KEYWORD_MEANING[1] * meaning``, where meaning is
the MiniLM cosine above ``SEMANTIC_FLOOR`` rescaled to [0, 1] (``floored``); 0 for a video without that cue. Per
segment of a video (a shot, a scene: ``reelsearch.index.catalog.StoredSegments``), the same sum over the text
segments whose time overlaps it (``by_time``): a cue is a *timed* source, whose words count where they are said or
shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import StoredSegments
from reelsearch.index.textcue_records import CueScores, SegmentMatch, TextSpans
from reelsearch.scoring.fusion import score_fusion
from reelsearch.search.sources import Top

#: (keyword, semantic) weights of a cue's two scores when they are summed into the cue's expert score: the best
#: mean R@1 over paraphrase and exact-words queries on Flickr8k dev captions (benchmarks/bench_cues.py --weights).
KEYWORD_MEANING = (1.0, 2.0)
#: MiniLM cosine that unrelated texts reach (a query and a transcript about other things): meaning counts above it.
#: Measured by benchmarks/bench_fusion.py: the 99th percentile of a caption's cosine to an unrelated video's speech
#: or on-screen text is 0.21 / 0.22; 0.25 is the grid's lowest floor above it, and as good as 0.2 for the rest.
SEMANTIC_FLOOR = 0.25


def floored(scores: np.ndarray, floor: float) -> np.ndarray:
    """``max(0, (scores - floor) / (1 - floor))`` (``scores`` unchanged when ``floor`` is 0)."""
    if not floor:
        return scores
    if not 0 <= floor < 1:
        raise ReelsearchError(f"the semantic floor must be in [0, 1), got {floor}")
    return np.maximum(0.0, (scores - floor) / (1.0 - floor)).astype(np.float32)


def cue_score(sc: CueScores, cue: str, weights: Sequence[float] = KEYWORD_MEANING,
              floor: float = SEMANTIC_FLOOR) -> np.ndarray:
    """The cue's expert score of each of ``sc.ids`` [N]: its keyword and floored semantic scores by ``score_fusion``
    with ``weights``."""
    if not sc.ids:
        return np.zeros(0, np.float32)
    rows = [sc.keyword[cue][None, :], floored(sc.semantic[cue], floor)[None, :]]
    return np.asarray(score_fusion(rows, weights))[0]


def by_time(spans: TextSpans, segments: StoredSegments, weights: Sequence[float] = KEYWORD_MEANING,
            floor: float = SEMANTIC_FLOOR) -> np.ndarray:
    """The cue's expert score of each of a video's ``segments`` [S]: its keyword and floored semantic scores are the
    best of the text ``spans`` that count for the segment (``counts_for``), fused as ``cue_score`` fuses a video's."""
    counts = counts_for(spans.starts, spans.ends, segments.starts, segments.ends)
    keyword = np.where(counts, spans.keyword[:, None], 0).max(axis=0, initial=0).astype(np.float32)
    meaning = np.where(counts, floored(spans.semantic, floor)[:, None], 0).max(axis=0, initial=0).astype(np.float32)
    return np.asarray(score_fusion([keyword[None, :], meaning[None, :]], weights))[0]


def counts_for(starts: np.ndarray, ends: np.ndarray, seg_starts: np.ndarray, seg_ends: np.ndarray) -> np.ndarray:
    """[T, S] bool: the segments [seg_starts, seg_ends) each timed span [starts, ends] counts for: those its time
    overlaps (a span of no length: the one it falls in), else the nearest one (text read after the last segment's
    end, speech that outlasts it)."""
    starts, ends = np.asarray(starts, np.float64)[:, None], np.asarray(ends, np.float64)[:, None]
    gap = np.maximum(seg_starts[None, :] - ends, starts - seg_ends[None, :])  # < 0: overlap, 0: they touch
    out = (gap < 0) | ((starts == ends) & (seg_starts[None, :] <= starts) & (starts < seg_ends[None, :]))
    none = ~out.any(axis=1)
    if none.any() and gap.shape[1]:
        out[np.flatnonzero(none), np.argmin(gap[none], axis=1)] = True
    return out


def cue_match(sc: CueScores, i: int, cue: str, weights: Sequence[float] = KEYWORD_MEANING,
              floor: float = SEMANTIC_FLOOR) -> SegmentMatch | None:
    """The segment behind video ``i``'s expert score for ``cue``: the keyword one when it is also the closest in
    meaning (its words are the evidence), else whichever contributes more under ``weights`` (and ``floor``)."""
    key = sc.keyword_best[cue][i]
    sem = sc.semantic_best[cue][i] if floored(sc.semantic[cue], floor)[i] > 0 else None
    if key is None or sem is None:
        return key or sem
    if key.segment == sem.segment:
        return key
    return key if weights[0] * key.score >= weights[1] * float(floored(np.float32(sem.score), floor)) else sem


class CueSource:
    """One cue's expert score for one query (``sc`` from ``TextCues.scores``) as a search source; ``known``
    (the catalog's) leaves out videos the library does not hold. Its top n: the n best videos with evidence; any
    other video scores at most the n-th best score (0 when no more videos have that cue). Timed: per segment of a
    video, it scores the words said or shown in the segment's time (``by_segment``)."""

    constant = False
    timed = True
    pictured = False

    def __init__(self, sc: CueScores, cue: str, known: Callable[[Sequence[str]], list[bool]] | None = None,
                 weights: Sequence[float] = KEYWORD_MEANING, floor: float = SEMANTIC_FLOOR):
        self.sc, self.cue, self.known, self.weights, self.floor = sc, cue, known, weights, floor
        self.expert = cue_score(sc, cue, weights, floor)
        self._order: np.ndarray | None = None

    def top(self, n: int) -> Top:
        s = self.expert
        if self._order is None:
            self._order = np.argsort(-s, kind="stable")
        order = self._order[:n]
        best = [int(i) for i in order if s[i] > 0]
        ids = [self.sc.ids[i] for i in best]
        if self.known is not None and ids:
            keep = self.known(ids)
            best = [i for i, ok in zip(best, keep, strict=True) if ok]
            ids = [self.sc.ids[i] for i in best]
        return Top(ids, s[best].astype(np.float64), float(s[order[-1]]) if len(s) > n else 0.0)

    def scores(self, ids: Sequence[str]) -> np.ndarray:
        where = self.sc.positions
        return np.array([self.expert[where[i]] if i in where else 0.0 for i in ids], np.float64)

    def by_segment(self, id_: str, segments: StoredSegments) -> np.ndarray | None:
        """The expert score of each of ``id_``'s ``segments`` (:func:`by_time`); None (its score of the video in every
        segment) without evidence (0) or without the text segments' times (``CueScores.spans``)."""
        i = self.sc.positions.get(id_)
        if i is None or not self.expert[i] > 0 or self.sc.spans is None:
            return None
        return by_time(self.sc.spans(id_, self.cue), segments, self.weights, self.floor)

    def match(self, id_: str) -> SegmentMatch | None:
        """The segment behind ``id_``'s score (None without evidence)."""
        i = self.sc.positions.get(id_)
        return None if i is None else cue_match(self.sc, i, self.cue, self.weights, self.floor)
