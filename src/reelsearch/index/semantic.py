"""Meaning scores of the text cues: per video and cue, the highest cosine between the query's sentence embedding
(MiniLM, given by the caller: this layer runs no text encoder) and the video's segments' embeddings, clamped at 0."""

from __future__ import annotations

import numpy as np

from reelsearch.features.cues import CUES
from reelsearch.index.segments import SegmentCache


def semantic_scores(query_vector: np.ndarray, cache: SegmentCache, slot: np.ndarray, n: int, cues: list[str]):
    """({cue: [n] scores}, {cue: [n] best segment position or -1}, every segment's cosine [S]).

    ``slot[v]``: the output position of the cache's video v (-1: not asked for); ``query_vector`` [D] as the
    segments were embedded (it is L2-normalised here)."""
    scores = {c: np.zeros(n, np.float32) for c in cues}
    best = {c: np.full(n, -1, np.int64) for c in cues}
    size = len(cache.rows)
    if not size:
        return scores, best, np.zeros(0, np.float32)
    q = np.asarray(query_vector, np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    cos = cache.vectors @ q
    np.clip(cos, 0.0, 1.0, out=cos)
    ordered = cos[cache.order]
    top = np.maximum.reduceat(ordered, cache.group_starts)
    lengths = np.diff(np.r_[cache.group_starts, size])
    first = np.minimum.reduceat(np.where(ordered == np.repeat(top, lengths), np.arange(size), size),
                                cache.group_starts)
    for c in cues:
        g = np.flatnonzero((cache.group_cue == CUES.index(c)) & (slot[cache.group_video] >= 0) & (top > 0))
        where = slot[cache.group_video[g]]
        scores[c][where] = top[g]
        best[c][where] = cache.order[first[g]]
    return scores, best, cos
