"""What a model's embeddings and search mode are, torch-free (``reelsearch.models.interface`` is the model
interface): the search path reads them without loading torch."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np


class SearchMode(enum.StrEnum):
    """How a catalog serves a model's score (``model.search_mode``; its value is what ``/health`` shows)."""

    ANN = "ann"  # the inner product of ``ann_query``'s rows with the stored rows: a vector index serves it
    SCAN = "scan"  # ``score`` by an exact scan of the stored rows (order similarity; a score fusion with it)
    RANK = "rank"  # rank fusion: each expert's rank among every video
    ZSCORE = "zscore"  # score fusion of zscore-normalised experts: each expert's scores over every video
    PAIRWISE = "pairwise"  # frame attention: each video's frame rows

    @property
    def relative(self) -> bool:
        """Whether a score depends on the other videos scored with it (ranks, normalisation): then every video is
        scored per expert, and a score alone cannot be calibrated."""
        return self in (SearchMode.RANK, SearchMode.ZSCORE)


@dataclass
class VideoEmbeddings:
    """Embeddings of M videos: ``video`` [M, W] (also ``np.asarray`` of them) and ``frames`` (one [T_i, W] array per
    video); a mixture's also keeps each expert's own (``parts``), and its ``frames[i]`` is None when the experts'
    frames do not line up (features sampled differently per expert; media embedded through one pipeline always line
    up)."""

    video: np.ndarray
    frames: list[np.ndarray]
    parts: dict[str, VideoEmbeddings] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.video)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The video rows [M, W]: ``np.asarray(model.encode_video(...))`` is what ``score`` and ranking read."""
        rows = np.asarray(self.video, dtype=dtype)
        return rows.copy() if copy else rows

    def select(self, index) -> VideoEmbeddings:
        """The videos at ``index`` (a slice or a sequence of positions)."""
        idx = np.arange(len(self))[index]
        return VideoEmbeddings(self.video[idx], [self.frames[i] for i in idx],
                               {k: p.select(index) for k, p in self.parts.items()})

    @classmethod
    def concat(cls, pieces: list[VideoEmbeddings]) -> VideoEmbeddings:
        """One VideoEmbeddings of several, in order."""
        if len(pieces) == 1:
            return pieces[0]
        parts = {k: cls.concat([p.parts[k] for p in pieces]) for k in pieces[0].parts}
        return cls(np.concatenate([p.video for p in pieces]), [f for p in pieces for f in p.frames], parts)


def as_rows(video) -> np.ndarray:
    """Video rows [M, W] from VideoEmbeddings or an array (float32, writable: torch can wrap them)."""
    rows = video.video if isinstance(video, VideoEmbeddings) else video
    return np.require(rows, np.float32, ["C", "W"])


def split_rows(x: np.ndarray, widths: dict[str, tuple[int, int]], text: bool) -> dict[str, np.ndarray]:
    """A mixture's rows ``x`` [N, W] (the experts' side by side) as {expert: its columns}: ``widths`` {expert: (text
    width, row width)} in order; ``text``: caption embeddings (else video or frame rows)."""
    out, start = {}, 0
    for k, (d, w) in widths.items():
        width = d if text else w
        out[k] = x[:, start:start + width]
        start += width
    return out
