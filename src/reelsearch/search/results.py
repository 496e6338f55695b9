"""The one result type of a search: what ``Searcher.search`` returns, ``reelsearch search --json`` prints and the HTTP
API answers (its OpenAPI model is derived from these dataclasses: ``reelsearch.service.contract``)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Literal

from reelsearch.display import display_path, match_line, result_lines
from reelsearch.index.catalog import file_kind
from reelsearch.index.paths import path_b64


def doc(text: str, **kwargs):
    """A dataclass field with a description (the API schema shows it)."""
    return field(metadata={"description": text}, **kwargs)


@dataclass
class FrameScore:
    """One sampled frame's match with the query."""

    index: int
    t: float = doc("Seconds from the start.")
    score: float = doc("The frame's similarity to the query.")


@dataclass
class Moment:
    """One segment of a found video (a shot, a scene) and its match with the query."""

    start: float = doc("Seconds: the segment's start.")
    end: float = doc("Seconds: the segment's end.")
    score: float = doc("The segment's fused score: the model's score of it (its bias included) and the text cues "
                       "said or shown in its time, weighted; the video's score is its best segment's.")
    confidence: float | None = doc("0-1: the calibrated confidence of the segment's picture and cues (None without a "
                                   "calibration).", default=None)


@dataclass
class Match:
    """The words said or written that match best."""

    cue: Literal["speech", "ocr"] = doc("What matched: speech (said) or ocr (written on screen).")
    start: float = doc("Seconds: the segment's start.")
    end: float = doc("Seconds: the segment's end.")
    text: str = doc("The segment: a transcript sentence or a line of on-screen text.")
    score: float = doc("Its keyword (share of the query's word weight) or meaning (cosine) score.")
    how: Literal["keyword", "semantic"] = doc("Matched by words or by meaning.")
    moment: float = doc("Seconds: the first matched word (speech with word times), else the start.")
    highlights: list[tuple[int, int]] = doc("[start, end) offsets (Unicode code points) of the query's words in "
                                            "`text`.")

    def line(self) -> str:
        """The match on one line, the query's words in brackets: ``said at 0:01.2: First, [preheat] the [oven]``."""
        return match_line(vars(self))


@dataclass
class SearchResult:
    """One video found for a query. In Python ``path`` is the file's path as the file system gives it
    (``os.fsdecode``); JSON carries its display form (undecodable bytes as U+FFFD) and ``path_b64``, its exact
    bytes. ``frames``, ``experts`` and ``match`` are None (left out of JSON) when not asked for or not relevant."""

    id: str
    path: str = doc("Display form of the file's path.")
    name: str = doc("Display form of the file's name.", init=False)
    path_b64: str = doc("The path's exact bytes, base64.", init=False)
    kind: Literal["video", "image", "audio"] = field(init=False)  # audio: a file of sound alone (no picture)
    score: float = doc("The fused score of the experts (weighted sum, or rank fusion); a model with a querybank "
                       "subtracts the video's offset for a query of seven words or more (scores are then mostly "
                       "negative): only their order within one query means anything.")
    moment: float = doc("Seconds: the best-matching frame, or the matched words when a text cue outweighs the "
                        "picture.")
    frame: int = doc("Index of the best-matching frame (the one nearest the moment).")
    duration: float | None
    frames: list[FrameScore] | None = doc("Each sampled frame's match with the query (the per-frame strip).",
                                          default=None)
    experts: dict[str, float] | None = doc("Each expert's own score: the model's experts (`visual` for a single "
                                           "model), `speech`, `ocr`. Given when text cues or a mixture of experts "
                                           "take part; empty for a listing by filters alone (nothing was scored).",
                                           default=None)
    match: Match | None = doc("The words said or written that match best (when a text cue has any evidence).",
                              default=None)
    confidence: float | None = doc("0-1: the share of development hits at this score that were right (the model's "
                                   "calibration, `reelsearch calibrate`, of its picture's and cues' part of the fused "
                                   "score; its best moment's; docs/search.md). Given when the model has a calibration "
                                   "and the picture takes part.", default=None)
    moments: list[Moment] | None = doc("The video's best segments for the query, best first (at most `moments` of "
                                       "them; the first holds `moment`). Given when the picture takes part.",
                                       default=None)
    unavailable: str | None = doc("Why this host cannot read the file (not reachable, not readable): the video is "
                                  "still found, its thumbnails shown, its file not served. Absent when it can.",
                                  default=None)
    taken_at: float | None = doc("Seconds since the epoch (UTC): when the photo or clip was taken (its EXIF or "
                                 "container date, else the file's time: `taken_from`; reelsearch.media.dates).",
                                 default=None)
    taken_from: Literal["exif", "container", "file"] | None = doc("Where `taken_at` comes from.", default=None)

    def __post_init__(self):
        self.name = display_path(os.path.basename(os.fsencode(self.path)))
        self.path_b64 = path_b64(self.path)
        self.kind = file_kind(self.path)

    def lines(self, rank: int) -> str:
        """The result as ``reelsearch search`` prints it (``reelsearch.display.result_lines`` of its JSON form)."""
        return result_lines(self.to_json(), rank)

    def to_json(self) -> dict:
        """A JSON-safe dict: the path in display form, None parts left out (built field by field: ``asdict`` of
        every frame cost a request about as much as its vector search)."""
        out = {}
        for name, optional in _JSON_FIELDS:
            value = getattr(self, name)
            if not (value is None and optional):
                out[name] = value
        out["path"] = display_path(self.path)
        if self.frames is not None:
            out["frames"] = [{"index": f.index, "t": f.t, "score": f.score} for f in self.frames]
        if self.moments is not None:
            out["moments"] = [{k: v for k, v in vars(m).items() if v is not None} for m in self.moments]  # no null
        if self.match is not None:
            out["match"] = {**vars(self.match), "highlights": [list(h) for h in self.match.highlights]}
        return out


#: (name, left out when None) of each field of a SearchResult, in order (``to_json``).
_JSON_FIELDS = tuple((f.name, f.default is None) for f in dataclasses.fields(SearchResult))


#: How a search's results can be ordered: by relevance (best first), or by date (the same results, newest first).
SORTS = ("relevance", "date")


def dated(results: list[SearchResult], sort: str = "relevance") -> list[SearchResult]:
    """``results`` (each with when it was taken, read with its stored video: ``StoredVideo.taken_at``) in relevance
    order, or for ``sort="date"`` newest first (undated last; ties keep their rank)."""
    if sort == "date":
        return sorted(results, key=lambda r: -r.taken_at if r.taken_at is not None else float("inf"))
    return results


def no_good_match(results: list[SearchResult], threshold: float) -> bool:
    """Whether the most confident of ``results`` (the best hit, in whatever order they are sorted) has a confidence
    below ``threshold`` (the calibration's for the query's length: ``Searcher.no_good_match``); False when they have
    none."""
    sure = [r.confidence for r in results if r.confidence is not None]
    return bool(sure) and max(sure) < threshold

