"""SqlCatalog: a catalog's tables in a SQL database and their reads; written once for the embedded catalog (SQLite +
FAISS, ``reelsearch.index.embedded``) and the shared one (PostgreSQL + pgvector, ``reelsearch.index.pg``).

Tables (same names and columns in both databases)::

    videos(id, path, size, mtime_ns, sha256, duration, n_frames, model_id, added_at, updated_at, gen, vector, bias,
           taken_at, taken_from)                    when it was taken (``reelsearch.media.dates``: seconds, and
                                                    "container", "exif" or "file"; NULL: indexed before the column,
                                                    read as the file's mtime until the next sync fills it); vector
                                                    NULL: no picture (sound alone: no frames, no segments)
    frames(video_id, idx, t, thumbnail)             one row per sampled frame
    frame_vectors(video_id, vectors, times, detail) float16 [T, D], float64 [T] and float32 [T] (how much each
                                                    frame shows; empty: not measurable; NULL: indexed before the
                                                    detail column, measured from the thumbnails by the next sync)
    video_segments(video_id, ordinal, start, stop, first_frame, n_frames, vector, bias)
                                                    one row per segment (frames first_frame .. + n_frames - 1, on
                                                    screen over [start, stop) s), its vector in the segments'
                                                    vector index: what a text query ranks
    meta(key, value)                                dim, model_id, gen (the last committed change), ...

Reads are here; how a catalog is filled (``sync``, ``copy_from``) is ``reelsearch.index.sync``'s. SQL is written
with ``?`` parameters (the PostgreSQL connection translates them). What differs between the databases — how a vector
column is read, the writer lock, the vector index — is a few hooks that each implementation fills in.
"""

from __future__ import annotations

import contextlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from reelsearch.index.catalog import CatalogError, StoredSegments, StoredVideo, VideoFacts, float16_rows
from reelsearch.index.media import EmbeddedMedia, absolute
from reelsearch.index.paths import MediaRoots
from reelsearch.index.sync import CatalogSync
from reelsearch.index.textcue_records import Encoder
from reelsearch.index.textcues import TextCues
from reelsearch.index.vectors import ScoreFn, scan_chunks, with_biases

#: When a video (``videos v``) was taken, as ``facts`` and ``stored`` give it: the file's time where no date was read.
TAKEN = "COALESCE(v.taken_at, v.mtime_ns / 1e9), COALESCE(v.taken_from, 'file')"

@dataclass
class VideoRecord:
    """Stored metadata of one video (``path`` as this host reaches it: ``MediaRoots.local``)."""

    id: str
    path: str
    size: int
    mtime_ns: int
    sha256: str
    duration: float | None
    n_frames: int
    model_id: str
    added_at: float
    updated_at: float
    taken_at: float | None = None  # seconds since the epoch (None: indexed before it was stored)
    taken_from: str | None = None  # "container", "exif" or "file"


class SqlCatalog(CatalogSync, ABC):
    """Videos and images with their embeddings, synced with folders (``CatalogSync``), in a SQL database; the catalog
    search reads (``reelsearch.index.catalog.Catalog``: ``nearest``, ``rows``, ``chunks``, ``ids`` and ``known`` are the
    vector index's, implemented by each database).

    ``media_roots`` maps the paths stored (as the indexing host saw them) to this host's (``--media-root OLD=NEW``).
    """

    #: The SQL expression that reads ``videos.vector`` of ``videos v`` (decoded by ``_vector``).
    VECTOR_SQL = "v.vector"

    _db = None  # a connection with sqlite3's execute / executemany (``?`` parameters)
    media_roots: MediaRoots
    writer_wait: float | None = 0.0  # seconds sync waits for another writer (None: as long as it takes)

    # -- what each database implements ---------------------------------------------------------------------------
    @property
    @abstractmethod
    def location(self) -> str:
        """Where the catalog is, as messages show it (a folder, or a database URL without its password)."""

    @abstractmethod
    def _transaction(self) -> contextlib.AbstractContextManager:
        """One write transaction on ``_db`` (rolled back on any exception)."""

    @abstractmethod
    def _writer_lock(self, wait: float | None) -> contextlib.AbstractContextManager:
        """Take the catalog's writer lock (one writing process at a time), waiting up to ``wait`` seconds (None: as
        long as it takes); CatalogError naming the holder when another process keeps it."""

    @abstractmethod
    def _vector(self, value) -> np.ndarray:
        """A ``VECTOR_SQL`` value as float32 [D]."""

    @abstractmethod
    def refresh(self) -> None:
        """See what other processes committed since (a no-op where every read sees it already)."""

    @abstractmethod
    def settings(self) -> dict:
        """What the catalog remembers of how it was built (``{"model": ...}``; {} before the first index)."""

    @abstractmethod
    def remember(self, settings: dict) -> None:
        """Store ``settings`` (returned by ``settings`` from now on, in every process)."""

    @abstractmethod
    def text_cues(self, encoder: Encoder | None, create: bool = False) -> TextCues | None:
        """The speech and on-screen-text segments of this catalog's videos (None when there are none and not
        ``create``)."""

    @abstractmethod
    def close(self) -> None:
        """Release the database (and the vector index)."""

    @abstractmethod
    def _nearest_inner(self, queries: np.ndarray, n: int, biased: bool) -> tuple[list[list[str]], list[np.ndarray]]:
        """The vector index's top ``n`` of each row of ``queries`` [Q, D] (float32, of the index's width) by the inner
        product with the rows, plus each video's bias when ``biased`` (ids, scores best first)."""

    @abstractmethod
    def _nearest_segments_inner(self, queries: np.ndarray, n: int,
                                biased: bool) -> tuple[list[list[str]], list[np.ndarray]]:
        """``_nearest_inner`` over the segments' rows (ids ``"VIDEO:ORDINAL"``)."""

    @abstractmethod
    def segment_count(self) -> int:
        """``Catalog.segment_count``."""

    def several_segments(self) -> bool:
        """``Catalog.several_segments``."""
        return self.segment_count() > self.row_count()

    def row_count(self) -> int:
        """How many videos have a row (a picture): those the vector indexes hold."""
        return len(self) - len(self.sound_only())

    _sound_state: tuple[int, set[str]] | None = None

    def sound_only(self) -> set[str]:
        """``Catalog.sound_only``: read once per generation (a partial index holds them)."""
        gen = self.generation
        if self._sound_state is None or self._sound_state[0] != gen:
            ids = {str(r[0]) for r in self._db.execute("SELECT id FROM videos WHERE vector IS NULL")}
            self._sound_state = (gen, ids)
        return self._sound_state[1]

    @abstractmethod
    def segment_chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (segment ids, rows [m, D]), in blocks."""

    @abstractmethod
    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """``Catalog.rows``."""

    @abstractmethod
    def chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """``Catalog.chunks``."""

    @abstractmethod
    def known(self, ids: Sequence[str]) -> list[bool]:
        """``Catalog.known``."""

    _writer_depth = 0  # > 0 while this object holds the writer lock

    @contextlib.contextmanager
    def writing(self, wait: float | None = 0.0) -> Iterator[None]:
        """Hold the catalog's writer lock for a whole update, e.g. ``sync`` and then the text cues of what it
        indexed; waits up to ``wait`` seconds (None: as long as it takes), CatalogError when another process keeps
        it. Re-entrant within this object: ``sync`` inside it does not wait for itself."""
        if self._writer_depth:
            self._writer_depth += 1
            try:
                yield
            finally:
                self._writer_depth -= 1
            return
        with self._writer_lock(wait):
            self._writer_depth = 1
            try:
                yield
            finally:
                self._writer_depth = 0
                if (held := self._holding()) is not None:  # what was held before the writes is read again
                    held.clear()

    # -- meta ------------------------------------------------------------------------------------------------
    _held: dict | None = None  # inside ``snapshot``: the meta values and count read so far
    _held_by: int | None = None  # the thread whose snapshot it is

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Inside (in this thread): the meta (dim, model id, generation, ...) and the number of videos are read from
        the database once and then held, so a search reads them once instead of a dozen times. Another process's
        commit shows at the next snapshot; while this object holds the writer lock nothing is held, and what was
        held before is read again after it. Nested, or in another thread's snapshot: reads as outside."""
        if self._held_by is not None:
            yield
            return
        self._held, self._held_by = {}, threading.get_ident()
        try:
            yield
        finally:
            self._held = self._held_by = None

    def _holding(self) -> dict | None:
        """This thread's snapshot, if it has one and this object is not writing."""
        return self._held if self._held_by == threading.get_ident() and not self._writer_depth else None

    def _read_held(self, key: str, read: Callable[[], object]):
        held = self._holding()
        if held is None:
            return read()
        if key not in held:
            held[key] = read()
        return held[key]

    def _meta(self, key: str) -> str | None:
        def read():
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return None if row is None else row[0]

        return self._read_held(key, read)

    def _set_meta(self, key: str, value) -> None:
        self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, str(value)))
        if (held := self._holding()) is not None:
            held.pop(key, None)

    def _next_generation(self) -> int:
        """Bump the generation in the open transaction (its row stays locked until the commit); the new one."""
        self._db.execute("INSERT INTO meta (key, value) VALUES ('gen', '1') ON CONFLICT (key) "
                         "DO UPDATE SET value = CAST(CAST(meta.value AS INTEGER) + 1 AS TEXT)")
        return self.generation

    @property
    def dim(self) -> int | None:
        """Embedding size of the stored vectors (None while the catalog is empty and has never been synced)."""
        value = self._meta("dim")
        return None if value is None else int(value)

    @property
    def model_id(self) -> str | None:
        """Id of the model whose embeddings the catalog holds."""
        return self._meta("model_id")

    @property
    def generation(self) -> int:
        """Number of the last committed change."""
        return int(self._meta("gen") or 0)

    def __len__(self) -> int:
        return self._read_held(" count", lambda: self._db.execute("SELECT COUNT(*) FROM videos").fetchone()[0])

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ids(self) -> list[str]:
        """Every video's id, in the order of ``chunks``."""
        return [i for chunk, _ in self.chunks() for i in chunk]

    def _local(self, stored: bytes) -> str:
        """A stored path as this host reaches it."""
        return self.media_roots.local(os.fsdecode(stored))


    # -- reading ---------------------------------------------------------------------------------------------
    _facts_state: tuple[int, VideoFacts] | None = None

    def facts(self) -> VideoFacts:
        """What search filters read of every video (``Catalog.facts``): one query, once per generation."""
        gen = self.generation
        if self._facts_state is None or self._facts_state[0] != gen:
            rows = self._db.execute(f"SELECT v.id, v.path, v.duration, {TAKEN}, v.vector IS NULL FROM videos v "
                                    "ORDER BY v.id").fetchall()
            facts = VideoFacts([str(r[0]) for r in rows], [self._local(r[1]) for r in rows],
                               np.array([np.nan if r[2] is None else r[2] for r in rows], np.float64),
                               np.array([r[3] for r in rows], np.float64), [r[4] for r in rows],
                               np.array([bool(r[5]) for r in rows], bool))
            self._facts_state = (gen, facts)
        return self._facts_state[1]

    def nearest(self, query: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                biased: bool = False) -> tuple[list[str], np.ndarray]:
        """``Catalog.nearest``: the ``nearest_many`` of one query [D]."""
        ids, scores = self.nearest_many(np.asarray(query, np.float32).reshape(1, -1), n, score_fn, biased=biased)
        return ids[0], scores[0]

    def nearest_many(self, queries: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                     biased: bool = False) -> tuple[list[list[str]], list[np.ndarray]]:
        """``Catalog.nearest_many``: the vector index's inner product (``_nearest_inner``: the bias is in the index,
        so one search ranks by score + bias), or ``score_fn`` (e.g. order similarity, which no ANN index serves) by
        an exact chunked scan of ``chunks`` (+ ``biases``)."""
        q = self._queries(queries)
        if self.dim is None or n < 1:
            return [[] for _ in q], [np.empty(0, np.float32) for _ in q]
        if score_fn is None:
            return self._nearest_inner(q, n, biased)
        chunks, fn = self.chunks(), score_fn
        if biased:
            chunks, fn = with_biases(chunks, self.biases, score_fn)
        found, scores = scan_chunks(chunks, q, n, fn)
        return [list(f) for f in found], [s[: len(f)] for s, f in zip(scores, found, strict=True)]

    def nearest_segments(self, query: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                         biased: bool = False) -> tuple[list[str], np.ndarray]:
        """``Catalog.nearest_segments``: the segments' vector index by inner product (+ bias), or ``score_fn`` by an
        exact chunked scan of ``segment_chunks`` (+ their biases)."""
        q = self._queries(np.asarray(query, np.float32).reshape(1, -1))
        if self.dim is None or n < 1:
            return [], np.empty(0, np.float32)
        if score_fn is None:
            ids, scores = self._nearest_segments_inner(q, n, biased)
            return ids[0], scores[0]
        chunks, fn = self.segment_chunks(), score_fn
        if biased:
            chunks, fn = with_biases(chunks, self._segment_biases, score_fn)
        found, scores = scan_chunks(chunks, q, n, fn)
        return list(found[0]), scores[0][: len(found[0])]

    def _segment_biases(self, segment_ids: Sequence[str]) -> np.ndarray:
        """The biases of some segments (ids ``"VIDEO:ORDINAL"``)."""
        videos = sorted({i.rpartition(":")[0] for i in segment_ids})
        by = {f"{vid}:{o}": b for vid, segs in self.segments(videos).items() for o, b in enumerate(segs.biases)}
        return np.array([by.get(i, 0.0) for i in segment_ids], np.float64)

    def segments(self, ids: Sequence[str]) -> dict[str, StoredSegments]:
        """``Catalog.segments``: one query."""
        keys = [int(i) for i in ids]
        if not keys:
            return {}
        rows = self._db.execute(
            f"SELECT s.video_id, s.start, s.stop, s.first_frame, s.n_frames, {self.VECTOR_SQL.replace('v.', 's.')}, "
            f"s.bias FROM video_segments s WHERE s.video_id IN ({','.join('?' * len(keys))}) "
            "ORDER BY s.video_id, s.ordinal", keys).fetchall()
        if not rows:
            return {}
        every = self._stored_segments([r[1:] for r in rows])  # one array per column, each video's a slice of it
        vids = [r[0] for r in rows]
        bounds = [j for j in range(1, len(vids)) if vids[j] != vids[j - 1]]
        return {str(vids[a]): StoredSegments(**{name: column[a:b] for name, column in vars(every).items()})
                for a, b in zip([0, *bounds], [*bounds, len(vids)], strict=True)}

    def _stored_segments(self, rows: Sequence[tuple]) -> StoredSegments:
        """One video's segments from its rows (start, stop, first_frame, n_frames, ``VECTOR_SQL`` value, bias) in
        ordinal order."""
        return StoredSegments(np.array([r[0] for r in rows], np.float64), np.array([r[1] for r in rows], np.float64),
                              np.array([r[2] for r in rows], np.int64), np.array([r[3] for r in rows], np.int64),
                              np.array([self._vector(r[4]) for r in rows], np.float32),
                              np.array([r[5] for r in rows], np.float64))

    def _queries(self, queries: np.ndarray) -> np.ndarray:
        """``queries`` [Q, D] as float32, or CatalogError when their width is not the catalog's."""
        q = np.asarray(queries, np.float32)
        if q.ndim != 2 or (self.dim is not None and q.shape[1] != self.dim):
            raise CatalogError(f"query has {q.shape[-1]} dimensions, the catalog holds {self.dim}-dimensional vectors")
        return q

    def stored(self, ids: Sequence[str]) -> dict[str, StoredVideo]:
        """Path, duration, frame vectors, times, detail and when taken of ``ids``, in one query (ids no longer stored
        are left out; detail None where it is not measured: no thumbnails, or indexed before the detail column and not
        yet synced; no frames for a video without a picture)."""
        keys = [int(i) for i in ids]
        if not keys:
            return {}
        rows = self._db.execute(
            f"SELECT v.id, v.path, v.duration, f.vectors, f.times, f.detail, {TAKEN} FROM videos v LEFT JOIN "
            f"frame_vectors f ON f.video_id = v.id WHERE v.id IN ({','.join('?' * len(keys))})", keys)
        dim = self.dim or 0
        return {str(r[0]): self._stored_video(r, dim) for r in rows}

    def _stored_video(self, row: Sequence, dim: int) -> StoredVideo:
        """A ``StoredVideo`` from its row (id, path, duration, frame vectors, times, detail, taken at, taken from:
        ``TAKEN``) of ``videos`` and ``frame_vectors`` (vectors, times and detail None: no picture)."""
        id_, path, duration, vectors, times, detail, taken_at, taken_from = row
        frame_rows = (np.empty((0, dim), np.float32) if vectors is None else
                      float16_rows(vectors, dim))
        return StoredVideo(str(id_), self._local(path), duration, frame_rows, np.frombuffer(times or b"", np.float64),
                           np.frombuffer(detail, np.float32) if detail else None, float(taken_at), taken_from)

    _bias_state: tuple[int, tuple[float, float], np.ndarray | None] | None = None

    def _biases_now(self) -> tuple[tuple[float, float], np.ndarray | None]:
        """((min, max) bias, bias by video id, or None when every video has the same bias) of the current generation:
        the range from the ``bias`` index, the table (all rows; ~40 ms at 100,000 videos) loaded once per
        generation."""
        gen = self.generation
        if self._bias_state is None or self._bias_state[0] != gen:
            lo, hi = self._db.execute("SELECT MIN(bias), MAX(bias) FROM videos").fetchone()
            span, by_id = (float(lo or 0.0), float(hi or 0.0)), None
            if span[0] != span[1]:
                rows = np.array(self._db.execute("SELECT id, bias FROM videos").fetchall(), np.float64).reshape(-1, 2)
                by_id = np.zeros(int(rows[:, 0].max(initial=0)) + 1)
                by_id[rows[:, 0].astype(np.int64)] = rows[:, 1]
            self._bias_state = (gen, span, by_id)
        return self._bias_state[1], self._bias_state[2]

    def biases(self, ids: Sequence[str]) -> np.ndarray:
        """Each video's bias, in the order of ``ids`` (0 for an id no longer stored), from a table of every video's
        bias loaded once per generation: re-ranking a few hundred candidates costs microseconds, not a database
        lookup of each."""
        keys = np.fromiter((int(i) for i in ids), np.int64, len(ids))
        span, table = self._biases_now()
        if table is None:  # every video has the same bias
            return np.full(len(keys), span[0])
        inside = keys < len(table)
        return np.where(inside, table[np.where(inside, keys, 0)], 0.0)

    def video(self, id_: str) -> VideoRecord:
        """Metadata of one indexed video (KeyError when absent)."""
        row = self._db.execute(
            "SELECT id, path, size, mtime_ns, sha256, duration, n_frames, model_id, added_at, updated_at, taken_at, "
            "taken_from FROM videos WHERE id = ?", (int(id_),)).fetchone()
        if row is None:
            raise KeyError(id_)
        return VideoRecord(str(row[0]), self._local(row[1]), *row[2:])

    def videos(self) -> list[VideoRecord]:
        """Every indexed video, by id."""
        return [self.video(str(r[0])) for r in self._db.execute("SELECT id FROM videos ORDER BY id").fetchall()]

    def contents(self) -> dict[str, str]:
        """{video id: SHA-256 of its file} of every indexed video."""
        return {str(r[0]): r[1] for r in self._db.execute("SELECT id, sha256 FROM videos")}

    def with_content(self, sha256: str) -> list[str]:
        """Ids of the indexed files whose content has this SHA-256 (copies of one file), by id."""
        return [str(r[0]) for r in self._db.execute("SELECT id FROM videos WHERE sha256 = ? ORDER BY id", (sha256,))]

    def find(self, path: str | os.PathLike) -> str | None:
        """Id of the video indexed at ``path`` (made absolute; this host's path), or None."""
        stored = self.media_roots.stored(absolute(path))
        row = self._db.execute("SELECT id FROM videos WHERE path = ?", (os.fsencode(stored),)).fetchone()
        return None if row is None else str(row[0])

    def media(self, id_: str) -> EmbeddedMedia:
        """Everything stored for one video: vectors (frame vectors as stored, float16 precision), times, thumbs,
        bias, detail; a video without a picture has none of them (``EmbeddedMedia.pictured``)."""
        row = self._db.execute(f"SELECT {self.VECTOR_SQL}, v.bias FROM videos v WHERE v.id = ?",
                               (int(id_),)).fetchone()
        video = self.stored([id_]).get(str(int(id_)))
        if row is None or video is None:
            raise KeyError(id_)
        if row[0] is None:
            return EmbeddedMedia(None, None, np.zeros(0), video.duration)
        thumbs = [None if r[0] is None else bytes(r[0]) for r in
                  self._db.execute("SELECT thumbnail FROM frames WHERE video_id = ? ORDER BY idx", (int(id_),))]
        segs = self.segments([id_]).get(str(int(id_)))
        parts = {} if segs is None else dict(
            segment_vectors=segs.rows, segment_frames=np.column_stack([segs.firsts, segs.firsts + segs.counts]),
            segment_times=np.column_stack([segs.starts, segs.ends]), segment_biases=segs.biases)
        return EmbeddedMedia(self._vector(row[0]).copy(), video.frame_rows, video.times.copy(), video.duration,
                             None if any(t is None for t in thumbs) else thumbs, float(row[1]), video.detail, **parts)

    def thumbnails(self, ids: Sequence[str]) -> dict[str, list[bytes | None]]:
        """``Catalog.thumbnails``: one query."""
        keys = [int(i) for i in ids]
        out: dict[str, list[bytes | None]] = {}
        if not keys:
            return out
        for vid, thumb in self._db.execute(f"SELECT video_id, thumbnail FROM frames WHERE video_id IN "
                                           f"({','.join('?' * len(keys))}) ORDER BY video_id, idx", keys):
            out.setdefault(str(vid), []).append(None if thumb is None else bytes(thumb))
        return out

    def thumbnail(self, id_: str, frame: int) -> bytes | None:
        """The stored thumbnail of one frame (None when the embedder gave none)."""
        row = self._db.execute("SELECT thumbnail FROM frames WHERE video_id = ? AND idx = ?",
                               (int(id_), int(frame))).fetchone()
        if row is None:
            raise KeyError((id_, frame))
        return None if row[0] is None else bytes(row[0])
