"""What search reads of a catalog: the ``Catalog`` interface, the records it reads and the catalog's errors.

``Catalog`` is implemented by ``SqlCatalog`` (``reelsearch.index.tables``), and so by ``EmbeddedCatalog`` (SQLite +
FAISS) and ``PostgresCatalog`` (PostgreSQL + pgvector: ``nearest`` an ``ORDER BY vector <#> q LIMIT n``, the rest
plain ``SELECT``\\ s), and by ``reelsearch.search.subset.Subset`` (some of a catalog's videos); the search sources
run on any of them unchanged.

Ids are strings; a video's *row* is its stored video-level embedding, its *frame rows* one per sampled frame (what
a row holds is the model's business: ``reelsearch.models.interface``); its *bias* is added to every query's score of
it (a querybank offset, negated; 0 without one). Its *segments* (runs of alike frames, the unit of retrieval) each
have a row and a bias too, with ids ``"VIDEO:ORDINAL"`` in the segments' vector index. A video without a picture
(a file of sound alone: ``sound_only``) is a video of the catalog (``len``, ``known``, ``stored``, ``facts``) with no
row, frame or segment: the vector side (``nearest``, ``rows``, ``chunks``, ``ids``) never holds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Protocol

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.index.vectors import ScoreFn
from reelsearch.media.decode import is_image_path


def float16_rows(data: bytes, dim: int) -> np.ndarray:
    """float32 [T, dim] of stored float16 rows (bytes): each value looked up in a table of every float16's float32 by
    numpy's own conversion, so the same bits in about half its time (numpy converts float16 one value at a time: 16-20
    us for a video's 8 frames of 1,025, 8 by the table)."""
    return _float16_values().take(np.frombuffer(data, np.uint16)).reshape(-1, dim)


@cache
def _float16_values() -> np.ndarray:
    """The float32 of each of the 65,536 float16 bit patterns (256 KiB)."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


@dataclass
class StoredVideo:
    """What a result needs of one video, read with others in one query: its path, duration, frame rows [T, D]
    (float32, stored as float16), their times [T] (seconds) and their detail [T] (how much each frame shows: the luma
    standard deviation of its thumbnail, ``reelsearch.index.media.frame_detail``; None when not measured) and when it
    was taken (``taken_at``, ``taken_from``: as ``Catalog.facts`` gives them, the file's time where no date was
    read)."""

    id: str
    path: str
    duration: float | None
    frame_rows: np.ndarray
    times: np.ndarray
    detail: np.ndarray | None = None
    taken_at: float | None = None
    taken_from: str | None = None

    @property
    def pictured(self) -> bool:
        """Whether the video has a picture: a file of sound alone has no frames (and no row, no segments:
        ``reelsearch.search.embed.sound_only``)."""
        return len(self.times) > 0


@dataclass
class StoredSegments:
    """One video's segments in time order: ``starts``, ``ends`` [S] (seconds), ``firsts``, ``counts`` [S] (their
    frames: ``firsts[s]`` to ``firsts[s] + counts[s] - 1``), ``rows`` [S, D] float32 and ``biases`` [S]."""

    starts: np.ndarray
    ends: np.ndarray
    firsts: np.ndarray
    counts: np.ndarray
    rows: np.ndarray
    biases: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)


def segment_key(segment_id: str) -> tuple[str, int]:
    """(video id, ordinal) of a segment id ``"VIDEO:ORDINAL"``."""
    video, _, ordinal = segment_id.rpartition(":")
    return video, int(ordinal)


@dataclass
class VideoFacts:
    """What search filters read of every video (``reelsearch.search.filters``), in id order: ``paths`` (this host's),
    ``duration`` [N] (seconds; NaN for an image or unknown), ``taken_at`` [N] (seconds since the epoch: when it was
    taken, ``reelsearch.media.dates``), ``taken_from`` ("container", "exif" or "file") and ``sound_only`` [N] (no
    picture: a file of sound alone). A catalog keeps one per generation; what filters derive of it is computed once
    (``id_array``, ``kinds``, ``folders``, ``position``, ``newest``)."""

    ids: list[str]
    paths: list[str]
    duration: np.ndarray
    taken_at: np.ndarray
    taken_from: list[str]
    sound_only: np.ndarray | None = None  # None: every video has a picture
    #: masks filters derived of these facts, by what they test (``reelsearch.search.filters``): made once each
    derived: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def id_array(self) -> np.ndarray:
        """[N] object: ``ids`` as an array (picked by a mask or positions at numpy speed)."""
        return np.array(self.ids, object)

    @cached_property
    def kinds(self) -> np.ndarray:
        """[N] str: each file's kind, "audio" (no picture: whatever its extension, e.g. an .mp4 of sound alone),
        "image" (by its extension) or "video"."""
        sound = np.zeros(len(self.paths), bool) if self.sound_only is None else self.sound_only
        return np.array([file_kind(p, not s) for p, s in zip(self.paths, sound, strict=True)], str)

    @cached_property
    def folders(self) -> np.ndarray:
        """[N] str: the path's folder, lower-cased, with a ``/`` at each end (``/media/holiday/``)."""
        return np.array(["/" + p.lower().rpartition("/")[0].strip("/") + "/" for p in self.paths], str)

    @cached_property
    def position(self) -> dict[str, int]:
        """Each id's position in ``ids``."""
        return {i: j for j, i in enumerate(self.ids)}

    @cached_property
    def newest(self) -> np.ndarray:
        """[N] positions, newest first (ties: by id)."""
        return np.lexsort((np.array([int(i) if i.isdigit() else 0 for i in self.ids], np.int64), -self.taken_at))


class Catalog(Protocol):
    """The videos search ranks, as the search sources (``reelsearch.search.sources``) read them."""

    def __len__(self) -> int:
        """How many videos there are."""

    def nearest(self, query: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                biased: bool = False) -> tuple[list[str], np.ndarray]:
        """(ids, scores best first) of the ``n`` videos whose rows score best with ``query`` [D]: by inner product
        (the vector index: exact or approximate, its own business), or by ``score_fn(queries [1, D], rows [m, D])``
        in an exact scan; ``biased``: each video's bias added to its score (the vector index holds it, so one search
        ranks by both). Fewer when there are fewer videos."""

    def nearest_many(self, queries: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                     biased: bool = False) -> tuple[list[list[str]], list[np.ndarray]]:
        """``nearest`` of each row of ``queries`` [Q, D], in one call (near-duplicate detection's candidates)."""

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """The rows [len(ids), D] of ``ids``, in that order (KeyError for an unknown id)."""

    def chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (ids, rows [m, D]) of the videos with a picture, in blocks; their ids in order are ``ids()``."""

    def ids(self) -> list[str]:
        """The id of every video with a picture (a row), in the order of ``chunks``."""

    def known(self, ids: Sequence[str]) -> list[bool]:
        """Whether each of ``ids`` is stored, with a picture or without (text cues may name videos a reader has not
        seen yet, or that are gone)."""

    def stored(self, ids: Sequence[str]) -> dict[str, StoredVideo]:
        """Path, duration, frame rows, times and detail of ``ids`` (those still stored; no frames for one without a
        picture), in one read."""

    def thumbnails(self, ids: Sequence[str]) -> dict[str, list[bytes | None]]:
        """The stored thumbnails of ``ids``' frames (those still stored; each frame's JPEG, None where the embedder
        gave none), in frame order, in one read (near-duplicate detection compares the pictures)."""

    def biases(self, ids: Sequence[str]) -> np.ndarray:
        """Each video's bias, in the order of ``ids`` (0 for an id no longer stored)."""

    def nearest_segments(self, query: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                         biased: bool = False) -> tuple[list[str], np.ndarray]:
        """``nearest`` over the segments' rows: (segment ids ``"VIDEO:ORDINAL"``, scores best first)."""

    def segment_count(self) -> int:
        """How many segments there are (over every video)."""

    def several_segments(self) -> bool:
        """Whether some video has more than one segment (when none has, each video with a picture has one segment,
        its row with its bias, so the video rows rank alike: search then reads those)."""

    def segments(self, ids: Sequence[str]) -> dict[str, StoredSegments]:
        """The segments of ``ids`` (those still stored), in one read."""

    def facts(self) -> VideoFacts:
        """Every video's path, duration, date and whether it has a picture, in one read (what search filters select
        by)."""

    def sound_only(self) -> set[str]:
        """The ids of the videos without a picture (files of sound alone): no row, no frames, no segments."""


def file_kind(path: str, pictured: bool = True) -> str:
    """A file's kind: "audio" without a picture (sound alone, whatever its extension), else "image" by its
    extension, else "video" (the one rule of ``kind:``, ``VideoFacts.kinds``, results and ``/videos``)."""
    return "audio" if not pictured else "image" if is_image_path(path) else "video"


class CatalogError(ReelsearchError):
    """The catalog cannot do what was asked (locked by another writer, wrong dimension, ...)."""


class CatalogUnavailable(ReelsearchError):
    """The catalog's database cannot be reached now (a lost connection, a server restarting): the request fails with
    this error and the next one reconnects."""
