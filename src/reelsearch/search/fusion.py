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

**Ranks, or normalised scores: exhaustive.** Rank fusion needs each source's rank among *all* videos and zscore
normalisation every video's score: every source scores every video and ``reelsearch.evaluation.fusion.fuse_experts``
(the fusion a mixture of experts uses) fuses them.

Both give the ``k`` best ids (ties in candidate order), their fused scores, each source's score of them (``rows``)
and each source's part of the fused score (``terms``). ``positive_only`` keeps videos whose fused score is above 0
(text alone: only videos with evidence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from reelsearch.scoring.fusion import fuse_experts, score_fusion
from reelsearch.search.sources import Source, Top

#: The first candidates of a search whose sources disagree: what an HNSW search at the default efSearch (128)
#: visits anyway.
FIRST_CANDIDATES = 128


@dataclass
class Fused:
    """The top k of a fusion: ``ids`` best first, their ``scores``; ``rows[source]`` each source's score of them and
    ``terms[source]`` its part of the fused score; ``rounds``: how many times the candidates grew (+1)."""

    ids: list[str]
    scores: np.ndarray
    rows: dict[str, np.ndarray]
    terms: dict[str, np.ndarray]
    rounds: int = 1


def threshold_fusion(sources: Mapping[str, Source], weights: Mapping[str, float], k: int, total: int, *,
                     positive_only: bool = False, first: int | None = None) -> Fused:
    """The exact top ``k`` by the weighted sum of the sources' scores among ``total`` videos (module docstring);
    ``first``: the first n (default: k when one source alone varies, else max(2k, FIRST_CANDIDATES))."""
    varying = sum(not sources[s].constant for s in weights)
    n = max(first, k) if first is not None else (k if varying <= 1 else max(2 * k, FIRST_CANDIDATES))
    rounds = 0
    while True:
        rounds += 1
        tops = {s: sources[s].top(n) for s in weights}
        ids = list(dict.fromkeys(i for t in tops.values() for i in t.ids))
        rows = {s: _scores_of(ids, tops[s], sources[s]) for s in weights}
        names = list(weights)
        fused = score_fusion([rows[s][None] for s in names], [weights[s] for s in names])[0] if ids else np.zeros(0)
        order = _best(fused, k, positive_only)
        kth = float(fused[order[-1]]) if len(order) == k else -np.inf
        bound = _bound(tops, weights)
        if kth >= bound or (positive_only and bound <= 0) or n >= total:
            break
        n *= 2
    return Fused([ids[j] for j in order], fused[order], {s: r[order] for s, r in rows.items()},
                 {s: weights[s] * rows[s][order] for s in names}, rounds)


def exhaustive_fusion(sources: Mapping[str, Source], weights: Mapping[str, float], k: int, ids: Sequence[str], *,
                      kind: str = "score", normalize: str = "none", positive_only: bool = False) -> Fused:
    """The top ``k`` of ``ids`` (every video) by ``fuse_experts(kind, normalize)`` of every source's score of each."""
    ids = list(ids)
    rows = {s: np.asarray(sources[s].scores(ids), np.float64) for s in weights}
    if not ids:
        return Fused([], np.zeros(0), {s: np.zeros(0) for s in weights}, {s: np.zeros(0) for s in weights})
    fused = fuse_experts({s: r[None] for s, r in rows.items()}, weights, kind, normalize)[0]
    terms = {s: fuse_experts({s: rows[s][None]}, {s: weights[s]}, kind, normalize)[0] for s in weights}
    order = _best(fused, k, positive_only)
    return Fused([ids[j] for j in order], np.asarray(fused[order], np.float64), {s: r[order] for s, r in rows.items()},
                 {s: np.asarray(t[order], np.float64) for s, t in terms.items()})


def _scores_of(ids: list[str], top: Top, source: Source) -> np.ndarray:
    """``source``'s score of each of ``ids``: from its top where it has them, else asked for."""
    own = dict(zip(top.ids, top.scores.tolist(), strict=True))
    out = np.array([own.get(i, np.nan) for i in ids], np.float64)
    missing = [j for j, i in enumerate(ids) if i not in own]
    if missing:
        out[missing] = source.scores([ids[j] for j in missing])
    return out


def _bound(tops: Mapping[str, Top], weights: Mapping[str, float]) -> float:
    """The highest fused score a video outside every top can have (-inf when some top held every video)."""
    if any(t.bound == -np.inf for t in tops.values()):
        return -np.inf
    return float(sum(weights[s] * t.bound for s, t in tops.items()))


def _best(fused: np.ndarray, k: int, positive_only: bool) -> np.ndarray:
    order = np.argsort(-fused, kind="stable")
    if positive_only:
        order = order[fused[order] > 0]
    return order[:k]
