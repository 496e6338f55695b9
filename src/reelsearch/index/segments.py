"""Every stored cue segment in memory, loaded once per text-cue index generation: what the keyword and semantic
scorers (``reelsearch.index.keyword``, ``reelsearch.index.semantic``) read besides SQLite."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from reelsearch.features.cues import CUES


@dataclass
class SegmentCache:
    """Every segment, by row id: its video (index into ``video_ids``), cue (index into CUES), start, end and embedding
    (float32 here, float16 on disk); ``order`` sorts the segments by (cue, video), ``group_starts`` opens each
    (cue, video) group in it (with ``group_cue`` and ``group_video``), so per-video maxima are one ``reduceat``."""

    generation: int
    rows: np.ndarray
    videos: np.ndarray
    cues: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    vectors: np.ndarray
    video_ids: list[str]
    video_index: dict[str, int]
    order: np.ndarray
    group_starts: np.ndarray
    group_cue: np.ndarray
    group_video: np.ndarray

    @classmethod
    def load(cls, db, generation: int) -> SegmentCache:
        """Every segment of ``db`` (a SQLite or PostgreSQL catalog connection: ``execute(sql, params)``)."""
        data = db.execute('SELECT id, video_id, cue, start, "end", embedding FROM segments ORDER BY id').fetchall()
        video_ids = sorted({r[1] for r in data})
        index = {v: i for i, v in enumerate(video_ids)}
        dim = len(data[0][5]) // 2 if data else 1
        # float16 on disk, float32 in memory: a float16 matrix-vector product has no fast path in numpy (converting
        # 150,000 segments per query cost 130 ms; the product itself 10 ms)
        vectors = np.frombuffer(b"".join(r[5] for r in data), np.float16).reshape(len(data), dim).astype(np.float32) \
            if data else np.zeros((0, 1), np.float32)
        videos = np.asarray([index[r[1]] for r in data], np.int64)
        cues = np.asarray([CUES.index(r[2]) if r[2] in CUES else len(CUES) for r in data], np.int64)
        order = np.lexsort((videos, cues)) if data else np.zeros(0, np.int64)
        key = cues[order] * max(len(video_ids), 1) + videos[order]
        group_starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if data else np.zeros(0, np.int64)
        return cls(generation, np.asarray([r[0] for r in data], np.int64), videos, cues,
                   np.asarray([r[3] for r in data], np.float64), np.asarray([r[4] for r in data], np.float64), vectors,
                   video_ids, index, order, group_starts, cues[order][group_starts], videos[order][group_starts])

    @cached_property
    def _groups(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(cue, video) -> its [start, stop) in ``order``."""
        stops = np.r_[self.group_starts[1:], len(self.order)]
        return {(int(c), int(v)): (int(a), int(b)) for c, v, a, b in
                zip(self.group_cue, self.group_video, self.group_starts, stops, strict=True)}

    def positions(self, video_id: str, cue: str) -> np.ndarray:
        """The positions of ``video_id``'s segments of ``cue`` (empty when it has none)."""
        v = self.video_index.get(video_id)
        a, b = self._groups.get((CUES.index(cue), v), (0, 0)) if v is not None else (0, 0)
        return self.order[a:b]
