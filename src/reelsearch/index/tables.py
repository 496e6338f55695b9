"""A library's tables in a SQL database, and the sync that fills them: written once for the embedded catalog (SQLite
+ FAISS, ``reelsearch.index.library``) and the shared one (PostgreSQL + pgvector, ``reelsearch.index.pg``).

Tables (same names and columns in both databases)::

    videos(id, path, size, mtime_ns, sha256, duration, n_frames, model_id, added_at, updated_at, gen, vector, bias,
           taken_at, taken_from)                    when it was taken (``reelsearch.media.dates``: seconds, and
                                                    "container", "exif" or "file"; NULL: indexed before the column,
                                                    read as the file's mtime until the next sync fills it)
    frames(video_id, idx, t, thumbnail)             one row per sampled frame
    frame_vectors(video_id, vectors, times, detail) float16 [T, D], float64 [T] and float32 [T] (how much each
                                                    frame shows; empty: not measurable; NULL: indexed before the
                                                    detail column, measured from the thumbnails by the next sync)
    meta(key, value)                                dim, model_id, gen (the last committed change), ...

A sync plans (which files are new, changed or gone), embeds, and commits in batches, each batch one transaction that
bumps the generation. SQL is written with ``?`` parameters (the PostgreSQL connection translates them). What differs
between the databases — how a vector column is written and read, how a row's id comes back, the writer lock, the
vector index — is a few hooks that each implementation fills in.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from tqdm import tqdm

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import StoredVideo, VideoFacts
from reelsearch.index.media import EmbeddedMedia, absolute, sha256_file, thumbnail_detail, walk_media
from reelsearch.index.paths import MediaRoots
from reelsearch.index.textcues import CueReport, Encoder, TextCues
from reelsearch.index.vectors import ScoreFn, scan_chunks
from reelsearch.media.dates import taken_at

EmbedFn = Callable[[str], EmbeddedMedia]


class LibraryError(ReelsearchError):
    """The library index cannot do what was asked (locked by another writer, wrong dimension, ...)."""


@dataclass
class SyncReport:
    """Outcome of :meth:`LibraryTables.sync`: paths per fate; ``failed`` holds (path, problem) pairs."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    reused: int = 0  # added/updated files whose embeddings were copied from an identical file already indexed
    cues: CueReport | None = None  # the text-cue stage after the sync (``reelsearch.search.cue_indexing``)
    cues_off: dict[str, str] = field(default_factory=dict)  # cue -> why it did not run

    def summary(self) -> str:
        out = (f"{len(self.added)} added, {len(self.updated)} updated, {len(self.removed)} removed, "
               f"{len(self.unchanged)} unchanged, {len(self.failed)} failed")
        if self.cues is not None:
            out += f"; speech/text: {self.cues.summary()}"
        return out


class StoredFile(NamedTuple):
    """A video row as sync compares it with a file on disk."""

    path: bytes  # absolute path as stored, file-system bytes
    id: int
    size: int
    mtime_ns: int
    sha256: str


class FileToSync(NamedTuple):
    """A file sync hashes: new, or its size or mtime changed; ``stored`` its row (None: new, or a model change)."""

    path: str
    stat: os.stat_result
    stored: StoredFile | None


class FileChange(NamedTuple):
    """What a commit writes for one file: its content hash and new embeddings, or with ``media`` None only its new
    size and mtime (same content)."""

    file: FileToSync
    sha256: str
    media: EmbeddedMedia | None = None
    taken: tuple[float, str] | None = None  # (taken_at, taken_from) known already (a copy); None: read from the file


class SyncPlan(NamedTuple):
    """What a sync has to do: ``todo`` files to hash, ``gone`` stored videos of its scope whose file vanished, every
    ``stored`` video of its scope, and whether the model changed (everything is embedded again)."""

    todo: list[FileToSync]
    gone: list[StoredFile]
    stored: list[StoredFile]
    model_changed: bool


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


def _under(path: bytes, roots: list[bytes]) -> bool:
    sep = os.fsencode(os.sep)
    return any(path == r or path.startswith(r.rstrip(sep) + sep) for r in roots)


class LibraryTables(ABC):
    """Videos and images with their embeddings, synced with folders, in a SQL database; the catalog search reads
    (``reelsearch.index.catalog.Catalog``: ``nearest``, ``rows``, ``chunks``, ``ids`` and ``known`` are the vector
    index's, implemented by each database).

    ``media_roots`` maps the paths stored (as the indexing host saw them) to this host's (``--media-root OLD=NEW``).
    """

    #: The SQL expression that reads ``videos.vector`` of ``videos v`` (decoded by ``_vector``).
    VECTOR_SQL = "v.vector"

    _db = None  # a connection with sqlite3's execute / executemany (``?`` parameters)
    media_roots: MediaRoots
    writer_wait: float | None = 0.0  # seconds sync waits for another writer (None: as long as it takes)

    # -- what each database implements -----------------------------------------------------------------------
    @property
    @abstractmethod
    def location(self) -> str:
        """Where the library is, as messages show it (a folder, or a database URL without its password)."""

    @abstractmethod
    def _transaction(self) -> contextlib.AbstractContextManager:
        """One write transaction on ``_db`` (rolled back on any exception)."""

    @abstractmethod
    def _writer_lock(self, wait: float | None) -> contextlib.AbstractContextManager:
        """Take the library's writer lock (one writing process at a time), waiting up to ``wait`` seconds (None: as
        long as it takes); LibraryError naming the holder when another process keeps it."""

    @abstractmethod
    def _write_errors(self) -> contextlib.AbstractContextManager:
        """A failed write (full disk, lost connection, ...) becomes one ReelsearchError; what was committed stays."""

    @abstractmethod
    def _vector_param(self, vector: np.ndarray):
        """The SQL parameter that writes ``vector`` [D] to ``videos.vector``."""

    @abstractmethod
    def _vector(self, value) -> np.ndarray:
        """A ``VECTOR_SQL`` value as float32 [D]."""

    @abstractmethod
    def _insert_video(self, values: tuple) -> int:
        """INSERT a video row (columns of ``_INSERT``) in the open transaction; its id."""

    @abstractmethod
    def _forget(self, ids: Sequence[int], gen: int) -> None:
        """Videos ``ids`` were deleted by commit ``gen`` (in its transaction): tell the vector index."""

    @abstractmethod
    def _vectors_dropped(self) -> None:
        """Every video was dropped for another model's (after the transaction): reset the vector index."""

    @abstractmethod
    def _first_vector(self, dim: int) -> None:
        """The first video of a model sets the vector width ``dim`` (in the commit's transaction)."""

    @abstractmethod
    def _synced(self) -> None:
        """After a sync's last commit, in the writer lock: bring the vector index up to date."""

    @abstractmethod
    def refresh(self) -> None:
        """See what other processes committed since (a no-op where every read sees it already)."""

    @abstractmethod
    def settings(self) -> dict:
        """What the library remembers of how it was built (``{"model": ...}``; {} before the first index)."""

    @abstractmethod
    def remember(self, settings: dict) -> None:
        """Store ``settings`` (returned by ``settings`` from now on, in every process)."""

    @abstractmethod
    def text_cues(self, encoder: Encoder | None, create: bool = False) -> TextCues | None:
        """The speech and on-screen-text segments of this library's videos (None when there are none and not
        ``create``)."""

    @abstractmethod
    def close(self) -> None:
        """Release the database (and the vector index)."""

    @abstractmethod
    def _nearest_inner(self, queries: np.ndarray, n: int, biased: bool) -> tuple[list[list[str]], list[np.ndarray]]:
        """The vector index's top ``n`` of each row of ``queries`` [Q, D] (float32, of the index's width) by the inner
        product with the rows, plus each video's bias when ``biased`` (ids, scores best first)."""

    @abstractmethod
    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """``Catalog.rows``."""

    @abstractmethod
    def chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """``Catalog.chunks``."""

    @abstractmethod
    def known(self, ids: Sequence[str]) -> list[bool]:
        """``Catalog.known``."""

    # -- per-file claims (cooperating writers); the embedded index's writer lock makes every file its own -------
    #: Commit each file in a transaction of its own (the claims of cooperating writers are per file).
    ONE_FILE_PER_COMMIT = False
    #: Seconds between looks at files that another writer holds.
    CLAIM_POLL = 0.5

    def _claim(self, item: FileToSync, model_id: str) -> FileToSync | None | bool:
        """Take ``item`` for this writer before it is hashed: the item (with its stored row as it is now), None when
        there is nothing to do (another writer indexed it since the plan, or failed on it), False while another
        writer holds it (asked again later)."""
        return item

    def _claim_failed(self, item: FileToSync, problem: str) -> None:
        """This writer could not index ``item`` (reported here: other writers leave it alone)."""
        return None

    def _owned(self, changes: list[FileChange]) -> list[FileChange]:
        """Inside a commit's transaction: the ``changes`` whose files this writer still holds (their claims
        released by the commit)."""
        return changes

    def _exclusive(self) -> None:
        """Inside a transaction: wait until no other writer is in one that must be alone (a change of model)."""
        return None

    _writer_depth = 0  # > 0 while this object holds the writer lock

    @contextlib.contextmanager
    def writing(self, wait: float | None = 0.0) -> Iterator[None]:
        """Hold the library's writer lock for a whole update, e.g. ``sync`` and then the text cues of what it
        indexed; waits up to ``wait`` seconds (None: as long as it takes), LibraryError when another process keeps
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
        """Embedding size of the stored vectors (None while the index is empty and has never been synced)."""
        value = self._meta("dim")
        return None if value is None else int(value)

    @property
    def model_id(self) -> str | None:
        """Id of the model whose embeddings the index holds."""
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

    # -- sync ------------------------------------------------------------------------------------------------
    def sync(
        self,
        paths: Iterable[str | os.PathLike],
        embed_fn: EmbedFn,
        model_id: str = "default",
        *,
        progress: bool = True,
        commit_every: int = 64,
        commit_seconds: float = 60.0,
        exclusive: bool = False,
    ) -> SyncReport:
        """Make the index reflect the media files under ``paths`` (files, or folders searched recursively).

        New files are added, files whose content changed (SHA-256; files with unchanged size and mtime are not
        re-hashed) are re-embedded, and indexed files that vanished from under ``paths`` are dropped; files under
        other roots are left alone, and so are files under a root that is absent (an unmounted disk does not
        empty the index). ``embed_fn(path)`` is called only for new or changed files whose content is not
        already indexed (a moved or copied file reuses its embeddings). A file that fails is recorded in
        ``failed`` and the rest go on. Work is committed every ``commit_every`` files or ``commit_seconds``: a
        crash keeps every committed file and a re-run continues from there.

        A different ``model_id`` than the stored one re-embeds everything under ``paths`` and drops every other
        video (embeddings of two models cannot be compared). ``exclusive``: the index is to hold exactly the files
        under ``paths``: videos indexed from other roots are dropped too.
        """
        report = SyncReport()
        with self.writing(self.writer_wait), self._write_errors():
            plan = self._plan_sync(list(paths), model_id, exclusive, report)
            gone = plan.gone
            if plan.model_changed:  # start over: the old model's vectors go first
                self._start_over(plan.stored, model_id)
                report.removed.extend(self._local(s.path) for s in gone)
                gone = []
            if self.ONE_FILE_PER_COMMIT:
                commit_every = 1
            last = self._embed_changes(plan.todo, embed_fn, model_id, report, progress, commit_every, commit_seconds)
            self._commit(last, gone, model_id)
            report.removed.extend(self._local(s.path) for s in gone)
            self._fill_detail()
            self._fill_taken()
            self._synced()
        return report

    def _local(self, stored: bytes) -> str:
        """A stored path as this host reaches it."""
        return self.media_roots.local(os.fsdecode(stored))

    def _plan_sync(self, paths: list, model_id: str, exclusive: bool, report: SyncReport) -> SyncPlan:
        """What a sync of ``paths`` has to do: the files to hash (new, or whose size or mtime changed), the stored
        videos in its scope that are gone; unchanged files and unreadable ones are reported here. Paths are compared
        in their stored form (``media_roots``)."""
        walk = walk_media(paths)
        report.failed.extend(walk.missing)
        missing_roots = {m[0] for m in walk.missing}
        roots = [os.fsencode(self.media_roots.stored(r)) for r in (absolute(p) for p in paths)
                 if r not in missing_roots]
        model_changed = self.model_id is not None and self.model_id != model_id
        rows = map(StoredFile._make, self._db.execute("SELECT path, id, size, mtime_ns, sha256 FROM videos"))
        stored = {bytes(s.path): s for s in rows if model_changed or exclusive or _under(bytes(s.path), roots)}
        found = set()
        todo = []
        for f in walk.files:
            key = os.fsencode(self.media_roots.stored(f))
            found.add(key)
            known = stored.get(key)
            try:
                st = os.stat(f)
            except OSError as exc:
                report.failed.append((f, f"cannot read: {exc.strerror}"))
                continue
            if known is not None and not model_changed and (known.size, known.mtime_ns) == (st.st_size, st.st_mtime_ns):
                report.unchanged.append(f)
            else:
                todo.append(FileToSync(f, st, None if model_changed else known))
        gone = [s for path, s in stored.items() if path not in found]
        return SyncPlan(todo, gone, list(stored.values()), model_changed)

    def _start_over(self, stored: list[StoredFile], model_id: str) -> None:
        """Another model's embeddings: drop every video (the vector index told) and the model's meta."""
        with self._transaction():
            self._exclusive()
            if self.model_id in (None, model_id):
                return  # another writer started over already
            gen = self._next_generation()
            self._forget([s.id for s in stored], gen)
            self._db.execute("DELETE FROM videos")
            for key in ("dim", "model_id"):
                self._db.execute("DELETE FROM meta WHERE key = ?", (key,))
        self._vectors_dropped()

    def _embed_changes(self, todo: list[FileToSync], embed_fn: EmbedFn, model_id: str, report: SyncReport,
                       progress: bool, commit_every: int, commit_seconds: float) -> list[FileChange]:
        """Hash each file of ``todo``; touch the ones whose content is unchanged, embed (or reuse the embeddings of
        an identical indexed file) the others; commit in batches and return the last, uncommitted one. A file that
        fails is reported, the rest go on."""
        changes: list[FileChange] = []
        last_commit = time.monotonic()
        bar = tqdm(total=len(todo), desc="indexing", unit="file", disable=not progress or not todo)
        pending = list(todo)
        while pending:
            held = []
            for item in pending:
                claimed = self._claim(item, model_id)
                if claimed is False:
                    held.append(item)
                    continue
                bar.update()
                if claimed is None:
                    continue
                item = claimed
                try:
                    digest = sha256_file(item.path)
                    if item.stored is not None and item.stored.sha256 == digest:
                        changes.append(FileChange(item, digest))
                        report.unchanged.append(item.path)
                    else:
                        media, reused = self._reuse(digest, model_id)
                        if media is None:
                            media = embed_fn(item.path)
                            if not isinstance(media, EmbeddedMedia):
                                raise TypeError(f"embed_fn returned {type(media).__name__}, not EmbeddedMedia")
                        media = media.checked(self.dim or _first_dim(changes))
                        report.reused += reused
                        changes.append(FileChange(item, digest, media))
                        (report.updated if item.stored is not None else report.added).append(item.path)
                except (KeyboardInterrupt, SystemExit, MemoryError):
                    raise
                except Exception as exc:  # one bad file never stops the sync
                    report.failed.append((item.path, _describe(exc)))
                    self._claim_failed(item, _describe(exc))
                if len(changes) >= commit_every or time.monotonic() - last_commit > commit_seconds:
                    self._commit(changes, [], model_id)
                    changes, last_commit = [], time.monotonic()
            if held:  # files other writers hold: done by them, or taken over once their lease expires
                time.sleep(self.CLAIM_POLL)
            pending = held
        bar.close()
        return changes

    def _reuse(self, digest: str, model_id: str) -> tuple[EmbeddedMedia | None, int]:
        """Embeddings of an indexed file with the same content and model, if any."""
        if self.model_id != model_id:
            return None, 0
        row = self._db.execute("SELECT id FROM videos WHERE sha256 = ? LIMIT 1", (digest,)).fetchone()
        if row is None:
            return None, 0
        return self.media(str(row[0])), 1

    def copy_from(self, source: LibraryTables, *, progress: bool = True, commit_every: int = 256) -> SyncReport:
        """Copy every video of ``source`` (another library, e.g. an embedded index into PostgreSQL) with everything
        stored for it — paths, sizes, hashes, vectors, frames, thumbnails, biases, the model id, the text cues, the
        settings — without reading a media file or running a model; a file already stored here is left as it is
        (``unchanged``). LibraryError when this library holds another model's embeddings."""
        report = SyncReport()
        model = source.model_id
        with self.writing(self.writer_wait), self._write_errors():
            if model is None:
                return report
            if self.model_id not in (None, model):
                raise LibraryError(f"{self.location} holds embeddings of another model ({self.model_id}) than "
                                   f"{source.location} ({model}); copy into an empty catalog")
            records, changes = source.videos(), []
            for record in tqdm(records, desc="copying", unit="video", disable=not progress):
                if self.find(record.path) is not None:
                    report.unchanged.append(record.path)
                    continue
                file = FileToSync(record.path, _Stat(record.size, record.mtime_ns), None)
                taken = None if record.taken_at is None else (record.taken_at, record.taken_from)
                changes.append(FileChange(file, record.sha256, source.media(record.id), taken))
                report.added.append(record.path)
                if len(changes) >= commit_every:
                    self._commit(changes, [], model)
                    changes = []
            self._commit(changes, [], model)
            self._synced()
            ids = {r.id: self.find(r.path) for r in records}
            cues = source.text_cues(None)
            if cues is not None:
                target = self.text_cues(None, create=True)
                try:
                    target.copy_from(cues, ids)
                finally:
                    target.close()
                    cues.close()
            if source.settings():
                self.remember(source.settings())
        return report

    #: The columns ``_insert_video`` writes, in the order of its values.
    _INSERT = ("size, mtime_ns, sha256, duration, n_frames, model_id, updated_at, gen, vector, bias, taken_at, "
               "taken_from, path, added_at")

    def _commit(self, changes: list[FileChange], gone: list[StoredFile], model_id: str) -> None:
        """Write a batch of sync results and removals in one transaction (one new generation)."""
        if not changes and not gone:
            return
        now = time.time()
        with self._transaction() as db:
            gen = self._next_generation()
            for change in self._owned(changes):
                file, st, media = change.file, change.file.stat, change.media
                taken = change.taken or taken_at(file.path, st.st_mtime_ns / 1e9)
                if media is None:  # same content: only its size and mtime (and a date from the mtime) changed
                    db.execute("UPDATE videos SET size = ?, mtime_ns = ?, taken_at = ?, taken_from = ? WHERE id = ?",
                               (st.st_size, st.st_mtime_ns, *taken, file.stored.id))
                    continue
                if self.dim is None:
                    self._set_meta("dim", media.video_vector.shape[0])
                    self._first_vector(media.video_vector.shape[0])
                values = (st.st_size, st.st_mtime_ns, change.sha256, media.duration, len(media.timestamps), model_id,
                          now, gen, self._vector_param(media.video_vector), float(media.bias), *taken)
                if file.stored is not None:
                    vid = file.stored.id
                    db.execute("UPDATE videos SET size=?, mtime_ns=?, sha256=?, duration=?, n_frames=?, model_id=?, "
                               "updated_at=?, gen=?, vector=?, bias=?, taken_at=?, taken_from=? WHERE id=?",
                               (*values, vid))
                    db.execute("DELETE FROM frames WHERE video_id = ?", (vid,))
                else:
                    vid = self._insert_video((*values, os.fsencode(self.media_roots.stored(file.path)), now))
                self._write_frames(vid, media)
            for s in gone:
                db.execute("DELETE FROM videos WHERE id = ?", (s.id,))
            self._forget([s.id for s in gone], gen)
            self._set_meta("model_id", model_id)

    def _write_frames(self, vid: int, media: EmbeddedMedia) -> None:
        """A video's frames (times, thumbnails) and frame vectors, inside the commit's transaction."""
        thumbs = media.thumbnails or [None] * len(media.timestamps)
        rows = [(vid, i, float(t), th) for i, (t, th) in enumerate(zip(media.timestamps, thumbs, strict=True))]
        self._db.executemany("INSERT INTO frames (video_id, idx, t, thumbnail) VALUES (?, ?, ?, ?)", rows)
        detail = b"" if media.detail is None else media.detail.astype(np.float32).tobytes()  # b"": not measured
        self._db.execute("INSERT INTO frame_vectors (video_id, vectors, times, detail) VALUES (?, ?, ?, ?) ON CONFLICT "
                         "(video_id) DO UPDATE SET vectors = excluded.vectors, times = excluded.times, "
                         "detail = excluded.detail",
                         (vid, media.frame_vectors.astype(np.float16).tobytes(),
                          media.timestamps.astype(np.float64).tobytes(), detail))

    def _fill_detail(self, batch: int = 256) -> None:
        """Measure on their stored thumbnails the frames' detail of the videos indexed before the detail column
        (NULL), a batch per transaction; an empty value marks a video without thumbnails (not measurable)."""
        while True:
            keys = [r[0] for r in self._db.execute("SELECT video_id FROM frame_vectors WHERE detail IS NULL LIMIT ?",
                                                   (batch,))]
            if not keys:
                return
            thumbs: dict[int, list] = {k: [] for k in keys}
            for vid, thumb in self._db.execute(f"SELECT video_id, thumbnail FROM frames WHERE video_id IN "
                                               f"({','.join('?' * len(keys))}) ORDER BY video_id, idx", keys):
                thumbs[vid].append(thumb)
            with self._transaction() as db:
                for vid, ts in thumbs.items():
                    value = b""
                    if ts and all(t is not None for t in ts):
                        with contextlib.suppress(ValueError):  # an undecodable thumbnail: not measurable
                            value = np.array([thumbnail_detail(bytes(t)) for t in ts], np.float32).tobytes()
                    db.execute("UPDATE frame_vectors SET detail = ? WHERE video_id = ?", (value, vid))

    def _fill_taken(self, batch: int = 256) -> None:
        """Read the date of the videos indexed before it was stored (``taken_at`` NULL) from their files (the
        file's stored mtime when it is gone or says nothing), a batch per transaction."""
        while True:
            rows = self._db.execute("SELECT id, path, mtime_ns FROM videos WHERE taken_at IS NULL LIMIT ?",
                                    (batch,)).fetchall()
            if not rows:
                return
            dates = [(*taken_at(self._local(path), mtime_ns / 1e9), id_) for id_, path, mtime_ns in rows]
            with self._transaction() as db:
                self._next_generation()  # a change: what other processes hold of the dates is out of date
                db.executemany("UPDATE videos SET taken_at = ?, taken_from = ? WHERE id = ?", dates)

    # -- reading ---------------------------------------------------------------------------------------------
    _facts_state: tuple[int, VideoFacts] | None = None

    def facts(self) -> VideoFacts:
        """What search filters read of every video (``Catalog.facts``): one query, once per generation."""
        gen = self.generation
        if self._facts_state is None or self._facts_state[0] != gen:
            rows = self._db.execute("SELECT id, path, duration, taken_at, taken_from, mtime_ns FROM videos "
                                    "ORDER BY id").fetchall()
            facts = VideoFacts([str(r[0]) for r in rows], [self._local(r[1]) for r in rows],
                               np.array([np.nan if r[2] is None else r[2] for r in rows], np.float64),
                               np.array([r[5] / 1e9 if r[3] is None else r[3] for r in rows], np.float64),
                               [r[4] or "file" for r in rows])
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
            chunks = ((ids, np.column_stack([rows, self.biases(ids)]).astype(np.float32)) for ids, rows in chunks)
            fn = lambda qs, rows: score_fn(qs, rows[:, :-1]) + rows[:, -1]  # noqa: E731
        found, scores = scan_chunks(chunks, q, n, fn)
        return [list(f) for f in found], [s[: len(f)] for s, f in zip(scores, found, strict=True)]

    def _queries(self, queries: np.ndarray) -> np.ndarray:
        """``queries`` [Q, D] as float32, or LibraryError when their width is not the index's."""
        q = np.asarray(queries, np.float32)
        if q.ndim != 2 or (self.dim is not None and q.shape[1] != self.dim):
            raise LibraryError(f"query has {q.shape[-1]} dimensions, the index holds {self.dim}-dimensional vectors")
        return q

    def stored(self, ids: Sequence[str]) -> dict[str, StoredVideo]:
        """Path, duration, frame vectors, times and detail of ``ids``, in one query (ids no longer stored are left
        out; detail None where it is not measured: no thumbnails, or indexed before the detail column and not yet
        synced)."""
        keys = [int(i) for i in ids]
        if not keys:
            return {}
        rows = self._db.execute(
            "SELECT v.id, v.path, v.duration, f.vectors, f.times, f.detail FROM videos v JOIN frame_vectors f "
            f"ON f.video_id = v.id WHERE v.id IN ({','.join('?' * len(keys))})", keys)
        out = {}
        dim = self.dim
        for id_, path, duration, vectors, times, detail in rows:
            frame_rows = np.frombuffer(vectors, np.float16).reshape(-1, dim).astype(np.float32)
            out[str(id_)] = StoredVideo(str(id_), self._local(path), duration, frame_rows,
                                        np.frombuffer(times, np.float64),
                                        np.frombuffer(detail, np.float32) if detail else None)
        return out

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
        bias, detail."""
        row = self._db.execute(f"SELECT {self.VECTOR_SQL}, v.bias FROM videos v WHERE v.id = ?",
                               (int(id_),)).fetchone()
        video = self.stored([id_]).get(str(int(id_)))
        if row is None or video is None:
            raise KeyError(id_)
        thumbs = [None if r[0] is None else bytes(r[0]) for r in
                  self._db.execute("SELECT thumbnail FROM frames WHERE video_id = ? ORDER BY idx", (int(id_),))]
        return EmbeddedMedia(self._vector(row[0]).copy(), video.frame_rows, video.times.copy(), video.duration,
                             None if any(t is None for t in thumbs) else thumbs, float(row[1]), video.detail)

    def thumbnail(self, id_: str, frame: int) -> bytes | None:
        """The stored thumbnail of one frame (None when the embedder gave none)."""
        row = self._db.execute("SELECT thumbnail FROM frames WHERE video_id = ? AND idx = ?",
                               (int(id_), int(frame))).fetchone()
        if row is None:
            raise KeyError((id_, frame))
        return None if row[0] is None else bytes(row[0])


class _Stat(NamedTuple):
    """The size and mtime of a file as stored (what a commit writes of its ``os.stat_result``)."""

    st_size: int
    st_mtime_ns: int


def _first_dim(changes: list[FileChange]) -> int | None:
    """The width of the first embedding in ``changes`` (the index's, before its first commit sets it)."""
    return next((int(c.media.video_vector.shape[0]) for c in changes if c.media is not None), None)


def _describe(exc: Exception) -> str:
    """A one-line problem description for the sync report."""
    if isinstance(exc, ReelsearchError):
        return getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"
