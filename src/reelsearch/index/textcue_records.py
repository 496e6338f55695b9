"""What the text cues hold and give: the sentence encoder they are given, a stored cue run, a query's scores with the
segments behind them, an update's report, and the text cues' error."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.features.cues import CueSegment

#: A sentence encoder: texts -> [N, D] embeddings (MiniLM for search; anything deterministic in tests).
Encoder = Callable[[Sequence[str]], np.ndarray]


class TextCueError(ReelsearchError):
    """The text-cue index cannot be opened or used (names the file and the problem)."""


@dataclass(frozen=True)
class SegmentMatch:
    """The segment that gives a video its score for one cue: ``how`` = "keyword" | "semantic"; ``moment`` = the
    time of the first matched word when the transcript has word timings, else the segment's start."""

    cue: str
    start: float
    end: float
    text: str
    score: float
    how: str
    moment: float
    segment: int = field(default=-1, compare=False)  # the segment's row id (for ``TextCues.highlights``)

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "segment"}


@dataclass(frozen=True)
class TextSpans:
    """One video's segments of one cue, each scored for one query: ``starts``, ``ends`` [T] (seconds), ``keyword``
    and ``semantic`` [T] float32 (the video's own scores are their maxima)."""

    starts: np.ndarray
    ends: np.ndarray
    keyword: np.ndarray
    semantic: np.ndarray


@dataclass
class CueScores:
    """One query's scores for the videos ``ids`` (arrays aligned with ``ids``; 0 = no evidence).

    ``keyword[cue]`` / ``semantic[cue]``: float32 [N] in [0, 1]; ``keyword_best[cue][i]`` / ``semantic_best[cue][i]``:
    the segment behind video i's score (None where the score is 0), read from the index when asked for, so scoring
    every video of a large index costs no row reads; ``spans(video id, cue)``: that video's segments of the cue with
    their scores and times (what a video's score per stretch of time is made of; None: not known).
    """

    query: str
    ids: list[str]
    keyword: dict[str, np.ndarray]
    semantic: dict[str, np.ndarray]
    keyword_best: dict[str, Sequence[SegmentMatch | None]]
    semantic_best: dict[str, Sequence[SegmentMatch | None]]
    positions: Mapping[str, int] = field(default_factory=dict)  # video id -> its position in ids
    spans: Callable[[str, str], TextSpans] | None = None


class SegmentMatches(Sequence):
    """The best segment of each video for one cue and kind, made into a SegmentMatch when indexed."""

    def __init__(self, positions: np.ndarray, make):
        self.positions, self._make, self._done = positions, make, {}

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        p = int(self.positions[i])
        if p < 0:
            return None
        if i not in self._done:
            self._done[i] = self._make(p)
        return self._done[i]


@dataclass(frozen=True)
class CueRun:
    """What is stored for one video and cue: the extractor ``recipe``, the ``content`` key it was run on, the
    number of segments, or the ``error`` that stopped it."""

    recipe: str
    content: str | None
    n_segments: int
    error: str | None


@dataclass
class CueReport:
    """Outcome of :meth:`TextCues.update`: video ids extracted, copied from a video with the same content
    (``reused``), already done (``unchanged``); ``failed`` (video id, cue, error) per failed cue."""

    extracted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (video_id, cue, error)
    seconds: dict[str, float] = field(default_factory=dict)  # cue -> extraction wall time
    reused: list[str] = field(default_factory=list)

    def summary(self) -> str:
        reused = f", {len(self.reused)} reused" if self.reused else ""
        return (f"{len(self.extracted)} extracted{reused}, {len(self.unchanged)} unchanged, {len(self.failed)} "
                "cue failures")


def stored_segment(cue, start, end, text, confidence, extra) -> CueSegment:
    """A segment from its stored columns (``extra``: the JSON of its box or word times)."""
    data = json.loads(extra) if extra else {}
    box = tuple(data["box"]) if "box" in data else None
    words = tuple((float(a), float(b), str(w)) for a, b, w in data["words"]) if "words" in data else None
    return CueSegment(cue, float(start), float(end), text, float(confidence), box, words)
