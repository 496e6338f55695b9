"""One fusion of 1..N search sources (``reelsearch.search.sources``) into one exact top k.

**Weighted scores: the threshold algorithm** (Fagin et al. 2003). The fused score of a video is the weighted sum of
its sources' scores (weights >= 0; the model's source includes each video's stored bias: the vector index holds it,
``reelsearch.search.sources.NearestSource``). The
candidates are the union of each source's top n; their fused scores are computed (a source scores the candidates
another source found), and no other video can score above ``bound = sum_s w_s * bound_s``, each source's bound
being the highest score a video outside its top n can have. When the k-th candidate reaches the bound (or every
video was seen) the top k is exact — as exact as each source's own top n (an HNSW index's is approximate); else n
doubles and the search repeats. The first n is k when one source alone varies (its top k is the answer), else
max(2k, FIRST_CANDIDATES). A visual-only search is the one-source case, a search with the text cues the same loop
with more sources.

**A video without a picture** (a file of sound alone) is never in the top of a source that scores pictures (the
model's, an example's: ``Source.pictured``) and scores 0 in it: it is a candidate only where a cue's top holds it
(its words), so a search without cues never finds it. One outside the candidates scores at most the cues' bounds (0
in the picture's sources), which the bound then covers when the catalog holds such videos and some cue has evidence
left outside its top.

**Ranks, or normalised scores: exhaustive.** Rank fusion needs each source's rank among *all* videos and zscore
normalisation every video's score: every source scores every video and ``reelsearch.scoring.fusion.fuse_experts``
(the fusion a mixture of experts uses) fuses them.

**Per segment.** Where the model ranks a video by its best segment (``Visual.segmented``) and some video has several,
the weighted sum is taken segment by segment for each candidate of several segments with evidence of a *timed* source
(a cue: words said or shown at some time): each source scores each segment (``Source.by_segment``: the model its
segment row and bias, a cue the words whose time overlaps the segment; any other source its score of the video) and
the video scores its best segment (:func:`best_segments`). A segment's sum is at most the video's sum of each
source's own best, so the bounds stay valid and the top k exact. A video of one segment is scored as a whole, as
before.

Both give the ``k`` best ids (ties in candidate order), their fused scores, each source's score of them (``rows``:
of the best segment, where fused per segment) and each source's part of the fused score (``terms``). ``keep`` keeps
the videos that pass a test of their fused score that holds from some score up (:func:`positive`: above 0, text
alone: only videos with evidence; a negative term's calibrated confidence, ``reelsearch.search.filters.pictured``):
the threshold test then also stops once no video outside the candidates can pass it. :func:`fuse` picks the fusion:
the model's kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from reelsearch.config.schema import FusionKind, Normalize
from reelsearch.index.catalog import Catalog, StoredSegments
from reelsearch.scoring.fusion import fuse_experts, score_fusion, weighted_sum
from reelsearch.search.sources import Source, Top, Visual, widened

#: The first candidates of a search whose sources disagree: what an HNSW search at the default efSearch (128)
#: visits anyway.
FIRST_CANDIDATES = 128

#: ``keep(fused scores) -> bool mask``: the videos a search keeps, non-decreasing in the score (all videos from some
#: score up), so that a search can stop once no video outside its candidates can be kept (:func:`positive`).
Keep = Callable[[np.ndarray], np.ndarray]
#: ``segments(ids) -> {id: StoredSegments}``: how a fusion per segment reads its candidates' segments (the catalog's).
Segments = Callable[[Sequence[str]], Mapping[str, StoredSegments]]


@dataclass
class Fused:
    """The top k of a fusion: ``ids`` best first, their ``scores``; ``rows[source]`` each source's score of them and
    ``terms[source]`` its part of the fused score; ``rounds``: how many times the candidates grew (+1)."""

    ids: list[str]
    scores: np.ndarray
    rows: dict[str, np.ndarray]
    terms: dict[str, np.ndarray]
    rounds: int = 1


def fuse(sources: Mapping[str, Source], weights: Mapping[str, float], k: int, catalog: Catalog,
         model: Visual | None = None, *, keep: Keep | None = None, first: int | None = None) -> Fused:
    """The ``k`` best videos of ``catalog`` (the one place the fusion is chosen): fused as ``model`` fuses its
    experts when that needs every video (ranks, zscore normalisation: :func:`exhaustive_fusion`), else by weighted
    scores (:func:`threshold_fusion`; also when ``model`` is None)."""
    if model is not None and model.exhaustive:
        return exhaustive_fusion(sources, weights, k, catalog.ids(), kind=model.kind, normalize=model.normalize,
                                 keep=keep)
    return threshold_fusion(sources, weights, k, len(catalog), keep=keep, first=first,
                            segments=per_segment(catalog, model), sound_only=bool(catalog.sound_only()))


def per_segment(catalog: Catalog, model: Visual | None) -> Segments | None:
    """How a weighted fusion reads segments (the catalog's), when it fuses per segment: ``model`` ranks a video by
    its best segment and some video of ``catalog`` has several; else None (per video)."""
    return catalog.segments if model is not None and model.segmented and catalog.several_segments() else None


def threshold_fusion(sources: Mapping[str, Source], weights: Mapping[str, float], k: int, total: int, *,
                     keep: Keep | None = None, first: int | None = None, segments: Segments | None = None,
                     sound_only: bool = False) -> Fused:
    """The exact top ``k`` by the weighted sum of the sources' scores among ``total`` videos (module docstring);
    ``first``: the first n (default: k when one source alone varies, else max(2k, FIRST_CANDIDATES)); ``segments``:
    fuse per segment (:func:`best_segments`), reading them so; ``sound_only``: some videos have no picture."""
    varying = sum(not sources[s].constant for s in weights)
    names = list(weights)
    rounds = 0

    def attempt(n: int) -> Fused | None:
        nonlocal rounds
        rounds += 1
        tops = {s: sources[s].top(n) for s in names}
        ids = list(dict.fromkeys(i for t in tops.values() for i in t.ids))
        rows = {s: _scores_of(ids, tops[s], sources[s]) for s in names}
        if segments is not None:
            best_segments(ids, rows, sources, weights, segments)
        fused = score_fusion([rows[s][None] for s in names], [weights[s] for s in names])[0] if ids else np.zeros(0)
        order = _best(fused, k, keep)
        kth = float(fused[order[-1]]) if len(order) == k else -np.inf
        bound = _bound(tops, weights, sources, sound_only)
        if kth >= bound or (keep is not None and not keep(np.float64(bound))) or n >= total:
            return Fused([ids[j] for j in order], fused[order], {s: r[order] for s, r in rows.items()},
                         {s: weights[s] * rows[s][order] for s in names}, rounds)
        return None

    return widened(attempt, first if first is not None else first_candidates(k, varying))


def first_candidates(k: int, varying: int) -> int:
    """The threshold fusion's first n of each source when ``varying`` of its sources vary: k when one alone does
    (its top k is the answer), else max(2k, FIRST_CANDIDATES)."""
    return k if varying <= 1 else max(2 * k, FIRST_CANDIDATES)


def exhaustive_fusion(sources: Mapping[str, Source], weights: Mapping[str, float], k: int, ids: Sequence[str], *,
                      kind: FusionKind = FusionKind.SCORE, normalize: Normalize = Normalize.NONE,
                      keep: Keep | None = None) -> Fused:
    """The top ``k`` of ``ids`` (every video) by ``fuse_experts(kind, normalize)`` of every source's score of each."""
    ids = list(ids)
    rows = {s: np.asarray(sources[s].scores(ids), np.float64) for s in weights}
    if not ids:
        return Fused([], np.zeros(0), {s: np.zeros(0) for s in weights}, {s: np.zeros(0) for s in weights})
    fused = fuse_experts({s: r[None] for s, r in rows.items()}, weights, kind, normalize)[0]
    terms = {s: fuse_experts({s: rows[s][None]}, {s: weights[s]}, kind, normalize)[0] for s in weights}
    order = _best(fused, k, keep)
    return Fused([ids[j] for j in order], np.asarray(fused[order], np.float64), {s: r[order] for s, r in rows.items()},
                 {s: np.asarray(t[order], np.float64) for s, t in terms.items()})


def best_segments(ids: Sequence[str], rows: dict[str, np.ndarray], sources: Mapping[str, Source],
                  weights: Mapping[str, float], segments: Segments) -> None:
    """Each of ``ids`` of several segments with a timed source's evidence scored by its best segment (by the weighted
    sum of :func:`segment_scores`): ``rows`` (each source's score of ``ids``) then hold that segment's, in place."""
    timed = [s for s in weights if sources[s].timed]
    need = [j for j in range(len(ids)) if any(rows[s][j] != 0 for s in timed)]
    stored = segments([ids[j] for j in need]) if need else {}
    for j in need:
        segs = stored.get(ids[j])
        if segs is None or len(segs) < 2:
            continue
        parts = segment_scores(ids[j], segs, sources, weights, {s: float(rows[s][j]) for s in weights})
        b = int(np.argmax(fused_segments(parts, weights)))
        for s in weights:
            rows[s][j] = parts[s][b]


def segment_scores(id_: str, segments: StoredSegments, sources: Mapping[str, Source], weights: Mapping[str, float],
                   rows: Mapping[str, float]) -> dict[str, np.ndarray]:
    """Each source's score of each of video ``id_``'s ``segments`` [S]: its own (``Source.by_segment``), or its score
    of the video (``rows``) in every segment."""
    out = {}
    for s in weights:
        own = sources[s].by_segment(id_, segments)
        out[s] = np.full(len(segments), rows[s], np.float64) if own is None else np.asarray(own, np.float64)
    return out


def fused_segments(parts: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """The fused score of each segment [S] from each source's score of them (:func:`segment_scores`: float64 rows of
    one length): ``score_fusion``'s sum, without its checks (each hit's segments are fused in every search)."""
    names = list(weights)
    return weighted_sum([parts[s] for s in names], [float(weights[s]) for s in names])


def positive(scores: np.ndarray) -> np.ndarray:
    """Whether each fused score is above 0 (text alone: the videos with evidence): a ``keep`` test."""
    return scores > 0


def _scores_of(ids: list[str], top: Top, source: Source) -> np.ndarray:
    """``source``'s score of each of ``ids``: from its top where it has them, else asked for."""
    own = dict(zip(top.ids, top.scores.tolist(), strict=True))
    out = np.array([own.get(i, np.nan) for i in ids], np.float64)
    missing = [j for j, i in enumerate(ids) if i not in own]
    if missing:
        out[missing] = source.scores([ids[j] for j in missing])
    return out


def _bound(tops: Mapping[str, Top], weights: Mapping[str, float], sources: Mapping[str, Source],
           sound_only: bool) -> float:
    """The highest fused score a video outside every top can have (-inf when some top held every video); with
    ``sound_only`` videos (no picture: 0 in the sources that score pictures), also what one of them with some words
    left outside the cues' tops can have."""
    bound = -np.inf if any(t.bound == -np.inf for t in tops.values()) else float(
        sum(weights[s] * t.bound for s, t in tops.items()))
    words = [s for s in tops if not sources[s].pictured]
    if sound_only and len(words) < len(tops) and any(tops[s].bound > 0 for s in words):
        bound = max(bound, float(sum(weights[s] * max(tops[s].bound, 0.0) for s in words)))
    return bound


def _best(fused: np.ndarray, k: int, keep: Keep | None) -> np.ndarray:
    order = np.argsort(-fused, kind="stable")
    if keep is not None:
        order = order[keep(fused[order])]
    return order[:k]
