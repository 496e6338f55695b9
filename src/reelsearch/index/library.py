"""LibraryIndex: a searchable library of videos and images, kept in sync with folders.

Layout of an index directory::

    DIR/library.sqlite     metadata, per-frame embeddings and thumbnails, video vectors: the source of truth
    DIR/vectors.faiss.npz  the FAISS vector index (backend "faiss"), derived from the SQLite rows
    DIR/vectors.milvus.db  Milvus Lite file (backend "milvus" without a URI); a server URI keeps vectors remotely
    DIR/.writer.lock       flock held by the one process that syncs

Every change is committed by one SQLite transaction (WAL) that bumps a generation counter; the vector index is
brought up to that generation afterwards (upserts of rows with a newer generation, deletions from a tombstone
table) and records the generation it reflects. A crash between the two leaves SQLite ahead; the next open replays
the difference (idempotent), so the pair is always consistent as seen through this class.

Search reads it as a catalog (``reelsearch.index.catalog``): the vector index's top N for a query vector, rows and
frame rows of given videos, their biases; ranking, fusion and moments are search's (``reelsearch.search``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import platformdirs
from tqdm import tqdm

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.index.catalog import StoredVideo
from reelsearch.index.media import EmbeddedMedia, absolute, sha256_file, walk_media
from reelsearch.index.milvus import MilvusIndex
from reelsearch.index.textcues import CueReport
from reelsearch.index.vectors import FaissIndex, ScoreFn, VectorIndex

SQLITE_NAME = "library.sqlite"
FAISS_NAME = "vectors.faiss.npz"
MILVUS_LITE_NAME = "vectors.milvus.db"
LOCK_NAME = ".writer.lock"
SCHEMA_VERSION = 2  # 2: videos.bias
MMAP_BYTES = 1 << 32  # SQLite caps it at its compile-time maximum (2 GiB by default)
CACHE_KIB = 65536
BACKENDS = ("faiss", "milvus")

log = logging.getLogger("reelsearch.index")

EmbedFn = Callable[[str], EmbeddedMedia]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS videos (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path BLOB NOT NULL UNIQUE,          -- absolute path, file-system bytes (os.fsencode)
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    duration REAL,
    n_frames INTEGER NOT NULL,
    model_id TEXT NOT NULL,
    added_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    gen INTEGER NOT NULL,               -- generation of the commit that last wrote the vector
    vector BLOB NOT NULL,               -- float32 [D], the video-level embedding
    -- bias: added to every query's score of the video (a querybank offset, negated)
    bias REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS videos_sha256 ON videos (sha256);
CREATE INDEX IF NOT EXISTS videos_gen ON videos (gen);
CREATE INDEX IF NOT EXISTS videos_bias ON videos (bias);
CREATE TABLE IF NOT EXISTS frames (
    video_id INTEGER NOT NULL REFERENCES videos (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    t REAL NOT NULL,                    -- seconds from the start
    thumbnail BLOB,                     -- small JPEG/PNG, or NULL
    PRIMARY KEY (video_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS frame_vectors (
    video_id INTEGER PRIMARY KEY REFERENCES videos (id) ON DELETE CASCADE,
    vectors BLOB NOT NULL,              -- float16 [T, D], row i = frame idx i
    times BLOB NOT NULL                 -- float64 [T], the frames' t (copied here for a one-row moment lookup)
);
CREATE TABLE IF NOT EXISTS tombstones (id INTEGER PRIMARY KEY, gen INTEGER NOT NULL);
"""


class LibraryError(ReelsearchError):
    """The library index cannot do what was asked (locked by another writer, wrong dimension, ...)."""


@dataclass
class SyncReport:
    """Outcome of :meth:`LibraryIndex.sync`: paths per fate; ``failed`` holds (path, problem) pairs."""

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

    path: bytes  # absolute path, file-system bytes
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


class SyncPlan(NamedTuple):
    """What a sync has to do: ``todo`` files to hash, ``gone`` stored videos of its scope whose file vanished, every
    ``stored`` video of its scope, and whether the model changed (everything is embedded again)."""

    todo: list[FileToSync]
    gone: list[StoredFile]
    stored: list[StoredFile]
    model_changed: bool


@dataclass
class VideoRecord:
    """Stored metadata of one video."""

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


def default_index_dir() -> Path:
    """Where the library index lives by default: ``<user data dir>/reelsearch/index``."""
    return Path(platformdirs.user_data_dir("reelsearch")) / "index"


def _under(path: bytes, roots: list[bytes]) -> bool:
    sep = os.fsencode(os.sep)
    return any(path == r or path.startswith(r.rstrip(sep) + sep) for r in roots)


class LibraryIndex:
    """Videos and images with their embeddings, synced with folders; the embedded catalog search reads
    (``reelsearch.index.catalog.Catalog``).

    backend "faiss": an embedded FAISS index in the directory (exact below ``threshold`` videos, HNSW above).
    backend "milvus": a Milvus collection, Milvus Lite in the directory when ``uri`` is None or a file path, a
    server when ``uri`` is "http://host:19530" (``token`` for authentication). ``vector_options`` go to the
    vector index (:class:`FaissIndex` or :class:`MilvusIndex`: ``threshold``, ``hnsw_m``, ``ef_search``, ...).
    """

    def __init__(
        self,
        directory: str | Path | None = None,
        backend: str = "faiss",
        uri: str | None = None,
        *,
        collection: str = "reelsearch",
        token: str | None = None,
        **vector_options,
    ):
        if backend not in BACKENDS:
            raise ConfigError(f"unknown index backend {backend!r}; choose one of {BACKENDS}")
        self.dir = Path(directory) if directory is not None else default_index_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self.uri = uri if uri is not None else (str(self.dir / MILVUS_LITE_NAME) if backend == "milvus" else None)
        self.collection = collection
        self._token = token
        self._vector_options = vector_options
        self._db = sqlite3.connect(self.dir / SQLITE_NAME, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")  # reads of random hits without a syscall per page
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._migrate()
        # (generation, (min, max) of the biases, bias by video id or None until a biased search needs it)
        self._bias_state: tuple[int, tuple[float, float], np.ndarray | None] | None = None
        self.vectors: VectorIndex | None = None
        self._loaded_gen = 0  # generation the in-memory vector index reflects
        self.writer_wait: float | None = 0.0  # seconds sync waits for another writer (None: as long as it takes)
        self._writer_depth = 0  # > 0 while this object holds the writer lock
        self.refresh()

    def _migrate(self) -> None:
        """Create the tables, or bring those of an earlier schema up to this one (1 -> 2: the bias column)."""
        has_meta = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        version = self._meta("schema_version") if has_meta else None
        if version is not None and int(version) > SCHEMA_VERSION:
            raise LibraryError(f"{self.dir / SQLITE_NAME}: written by a newer reelsearch (schema {version})")
        if version is not None and int(version) < 2:
            columns = {r[1] for r in self._db.execute("PRAGMA table_info(videos)")}
            if "bias" not in columns:
                self._db.execute("ALTER TABLE videos ADD COLUMN bias REAL NOT NULL DEFAULT 0")
        self._db.executescript(_SCHEMA)
        if version is None or int(version) < SCHEMA_VERSION:
            self._set_meta("schema_version", SCHEMA_VERSION)

    # -- small helpers ---------------------------------------------------------------------------------------
    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _set_meta(self, key: str, value) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, str(value)))

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

    @property
    def _vector_key(self) -> str:
        where = "faiss" if self.backend == "faiss" else f"milvus:{self.uri}:{self.collection}"
        return f"vector_gen:{where}"

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM videos").fetchone()[0]

    def __enter__(self) -> LibraryIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the vector index and the database."""
        if self.vectors is not None:
            self.vectors.close()
            self.vectors = None
        self._db.close()

    @contextlib.contextmanager
    def writing(self, wait: float | None = 0.0) -> Iterator[None]:
        """Hold the directory's writer lock (one writing process at a time) for a whole update, e.g. ``sync`` and
        then the text cues of what it indexed; waits up to ``wait`` seconds for it (None: as long as it takes),
        LibraryError when another process keeps it. Re-entrant within this object: ``sync`` inside it does not
        wait for itself."""
        with self._writer(wait):
            yield

    @contextlib.contextmanager
    def _writer(self, wait: float | None = 0.0) -> Iterator[None]:
        if self._writer_depth:  # this object holds the lock already
            self._writer_depth += 1
            try:
                yield
            finally:
                self._writer_depth -= 1
            return
        try:
            fh = open(self.dir / LOCK_NAME, "a+")
        except OSError as exc:
            raise LibraryError(f"{self.dir}: cannot write here ({exc.strerror}); the index can be searched but not "
                               "updated") from None
        try:
            deadline = None if wait is None else time.monotonic() + wait
            told = False
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    fh.seek(0)
                    holder = fh.read().strip() or "?"
                    if deadline is not None and time.monotonic() >= deadline:
                        raise LibraryError(f"{self.dir}: another process (pid {holder}) is updating this index; "
                                           "try again when it is done") from None
                    if not told:
                        log.warning("%s: waiting for another process (pid %s) that is updating this index", self.dir,
                                    holder)
                        told = True
                    time.sleep(0.2)
            with contextlib.suppress(OSError):  # who holds it, for the message above (best effort)
                fh.seek(0)
                fh.truncate()
                fh.write(str(os.getpid()))
                fh.flush()
            self._writer_depth = 1
            try:
                yield
            finally:
                self._writer_depth = 0
        finally:
            fh.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")  # inside: a COMMIT that fails (disk full) is rolled back too
        except BaseException:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # keep the original error
                    self._db.execute("ROLLBACK")
            raise

    # -- vector index ----------------------------------------------------------------------------------------
    def _open_vectors(self, dim: int, fresh: bool) -> VectorIndex:
        if self.backend == "faiss":
            index = FaissIndex(dim, None if fresh else self.dir / FAISS_NAME, **self._vector_options)
            index.path = self.dir / FAISS_NAME  # a fresh index replaces the file at its first save
            return index

        return MilvusIndex(self.uri, self.collection, dim, token=self._token, recreate=fresh, **self._vector_options)

    def refresh(self) -> None:
        """Load the vector index and bring it up to the last committed change (also one made by another process).

        Only the process holding the writer lock saves the caught-up vector index; others catch up in memory.
        """
        dim = self.dim
        if dim is None:
            return
        stored = int(self._meta(self._vector_key) or 0)
        if self.vectors is None or self.vectors.dim != dim or (self.backend == "faiss" and stored > self._loaded_gen):
            if self.vectors is not None:
                self.vectors.close()
            self.vectors = self._open_vectors(dim, fresh=stored == 0)
            self._loaded_gen = stored
        if self._loaded_gen == self.generation and len(self.vectors) == len(self):
            return
        try:
            with self._writer():
                self._catch_up(save=True)
        except (LibraryError, OSError, sqlite3.Error):  # a writer at work, or a read-only or full disk: in memory
            self._catch_up(save=False)

    def _catch_up(self, save: bool) -> None:
        """Bring the vector index up to the committed generation (replays are idempotent)."""
        assert self.vectors is not None
        gen = self.generation
        synced = self._loaded_gen
        if synced == gen and len(self.vectors) == len(self):
            return
        if len(self.vectors) != len(self) and synced == gen:
            synced = 0  # the vector store lost or gained rows behind our back: full reconciliation
        if synced == 0:
            known = {str(r[0]) for r in self._db.execute("SELECT id FROM videos")}
            stale = [i for i in self._vector_ids() if i not in known]
            self.vectors.remove(stale)
        else:
            dead = [str(r[0]) for r in self._db.execute("SELECT id FROM tombstones WHERE gen > ?", (synced,))]
            self.vectors.remove(dead)
        cur = self._db.execute("SELECT id, vector FROM videos WHERE gen > ? ORDER BY id", (synced,))
        while rows := cur.fetchmany(4096):
            self.vectors.add([str(r[0]) for r in rows], np.stack([np.frombuffer(r[1], np.float32) for r in rows]))
        self._loaded_gen = gen
        if save:
            self.vectors.save()
            with self._transaction():
                self._set_meta(self._vector_key, gen)
                self._db.execute("DELETE FROM tombstones WHERE gen <= ?", (gen,))

    def _vector_ids(self) -> list[str]:
        ids = getattr(self.vectors, "ids", None)
        if ids is not None:
            return ids()
        return [i for chunk, _ in self.vectors.iter_chunks() for i in chunk]

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
        with self._writer(self.writer_wait), self._write_errors():
            plan = self._plan_sync(list(paths), model_id, exclusive, report)
            gone = plan.gone
            if plan.model_changed:  # start over: the old model's vectors go first
                self._start_over(plan.stored)
                report.removed.extend(os.fsdecode(s.path) for s in gone)
                gone = []
            last = self._embed_changes(plan.todo, embed_fn, model_id, report, progress, commit_every, commit_seconds)
            self._commit(last, gone, model_id)
            report.removed.extend(os.fsdecode(s.path) for s in gone)
            if self.dim is not None:
                if self.vectors is None:
                    self.vectors = self._open_vectors(self.dim, fresh=True)
                    self._loaded_gen = 0
                self._catch_up(save=True)
        return report

    def _plan_sync(self, paths: list, model_id: str, exclusive: bool, report: SyncReport) -> SyncPlan:
        """What a sync of ``paths`` has to do: the files to hash (new, or whose size or mtime changed), the stored
        videos in its scope that are gone; unchanged files and unreadable ones are reported here."""
        walk = walk_media(paths)
        report.failed.extend(walk.missing)
        missing_roots = {m[0] for m in walk.missing}
        roots = [r for r in (os.fsencode(absolute(p)) for p in paths) if os.fsdecode(r) not in missing_roots]
        model_changed = self.model_id is not None and self.model_id != model_id
        rows = map(StoredFile._make, self._db.execute("SELECT path, id, size, mtime_ns, sha256 FROM videos"))
        stored = {s.path: s for s in rows if model_changed or exclusive or _under(s.path, roots)}
        found = {os.fsencode(f) for f in walk.files}
        todo = []
        for f in walk.files:
            known = stored.get(os.fsencode(f))
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

    def _start_over(self, stored: list[StoredFile]) -> None:
        """Another model's embeddings: drop every video (tombstoned for the vector index) and the model's meta."""
        with self._transaction():
            gen = self.generation + 1
            self._db.executemany("INSERT OR REPLACE INTO tombstones (id, gen) VALUES (?, ?)",
                                 [(s.id, gen) for s in stored])
            self._db.execute("DELETE FROM videos")
            for key in ("dim", "model_id"):
                self._db.execute("DELETE FROM meta WHERE key = ?", (key,))
            self._set_meta("gen", gen)
        self._close_vectors()

    def _embed_changes(self, todo: list[FileToSync], embed_fn: EmbedFn, model_id: str, report: SyncReport,
                       progress: bool, commit_every: int, commit_seconds: float) -> list[FileChange]:
        """Hash each file of ``todo``; touch the ones whose content is unchanged, embed (or reuse the embeddings of
        an identical indexed file) the others; commit in batches and return the last, uncommitted one. A file that
        fails is reported, the rest go on."""
        changes: list[FileChange] = []
        last_commit = time.monotonic()
        bar = tqdm(todo, desc="indexing", unit="file", disable=not progress or not todo)
        for item in bar:
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
            if len(changes) >= commit_every or time.monotonic() - last_commit > commit_seconds:
                self._commit(changes, [], model_id)
                changes, last_commit = [], time.monotonic()
        bar.close()
        return changes

    @contextlib.contextmanager
    def _write_errors(self) -> Iterator[None]:
        """A failed write (full or read-only disk, I/O error) becomes one LibraryError; what was committed stays."""
        try:
            yield
        except sqlite3.Error as exc:
            raise LibraryError(f"{self.dir}: cannot write the index ({exc}); every batch committed before is kept "
                               "and the index stays usable: free some space (or fix the permissions) and run again") \
                from exc
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT,
                                 errno.EIO):
                raise
            raise LibraryError(f"{self.dir}: cannot write the index ({exc.strerror}); every batch committed before "
                               "is kept and the index stays usable: free some space (or fix the permissions) and run "
                               "again") from exc

    def _close_vectors(self) -> None:
        if self.vectors is not None:
            self.vectors.close()
            self.vectors = None
        self._loaded_gen = 0
        self._set_meta(self._vector_key, 0)
        if self.backend == "faiss":
            with contextlib.suppress(FileNotFoundError):
                (self.dir / FAISS_NAME).unlink()

    def _reuse(self, digest: str, model_id: str) -> tuple[EmbeddedMedia | None, int]:
        """Embeddings of an indexed file with the same content and model, if any."""
        if self.model_id != model_id:
            return None, 0
        row = self._db.execute("SELECT id FROM videos WHERE sha256 = ? LIMIT 1", (digest,)).fetchone()
        if row is None:
            return None, 0
        return self.media(str(row[0])), 1

    def _commit(self, changes: list[FileChange], gone: list[StoredFile], model_id: str) -> None:
        """Write a batch of sync results and removals in one transaction (one new generation)."""
        if not changes and not gone:
            return
        now = time.time()
        with self._transaction() as db:
            gen = self.generation + 1
            for change in changes:
                file, st, media = change.file, change.file.stat, change.media
                if media is None:  # same content: only its size and mtime changed
                    db.execute("UPDATE videos SET size = ?, mtime_ns = ? WHERE id = ?",
                               (st.st_size, st.st_mtime_ns, file.stored.id))
                    continue
                values = (st.st_size, st.st_mtime_ns, change.sha256, media.duration, len(media.timestamps), model_id,
                          now, gen, media.video_vector.astype(np.float32).tobytes(), float(media.bias))
                if file.stored is not None:
                    vid = file.stored.id
                    db.execute("UPDATE videos SET size=?, mtime_ns=?, sha256=?, duration=?, n_frames=?, model_id=?, "
                               "updated_at=?, gen=?, vector=?, bias=? WHERE id=?", (*values, vid))
                    db.execute("DELETE FROM frames WHERE video_id = ?", (vid,))
                else:
                    vid = db.execute(
                        "INSERT INTO videos (size, mtime_ns, sha256, duration, n_frames, model_id, updated_at, gen, "
                        "vector, bias, path, added_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (*values, os.fsencode(file.path), now)).lastrowid
                self._write_frames(vid, media)
                if self.dim is None:
                    self._set_meta("dim", media.video_vector.shape[0])
            for s in gone:
                db.execute("DELETE FROM videos WHERE id = ?", (s.id,))
                db.execute("INSERT OR REPLACE INTO tombstones (id, gen) VALUES (?, ?)", (s.id, gen))
            self._set_meta("model_id", model_id)
            self._set_meta("gen", gen)

    def _write_frames(self, vid: int, media: EmbeddedMedia) -> None:
        """A video's frames (times, thumbnails) and frame vectors, inside the commit's transaction."""
        thumbs = media.thumbnails or [None] * len(media.timestamps)
        rows = [(vid, i, float(t), th) for i, (t, th) in enumerate(zip(media.timestamps, thumbs, strict=True))]
        self._db.executemany("INSERT INTO frames (video_id, idx, t, thumbnail) VALUES (?, ?, ?, ?)", rows)
        self._db.execute("INSERT OR REPLACE INTO frame_vectors (video_id, vectors, times) VALUES (?, ?, ?)",
                         (vid, media.frame_vectors.astype(np.float16).tobytes(),
                          media.timestamps.astype(np.float64).tobytes()))

    # -- reading ---------------------------------------------------------------------------------------------
    def nearest(self, query: np.ndarray, n: int, score_fn: ScoreFn | None = None) -> tuple[list[str], np.ndarray]:
        """(ids, scores best first) of the ``n`` videos whose vectors score best with ``query`` [D]: the vector index's
        inner product (exact below its threshold, HNSW above), or ``score_fn(queries [1, D], vectors [m, D])`` (e.g.
        order similarity, which no ANN index serves) by an exact chunked scan. No bias is added here."""
        if self.vectors is None or len(self.vectors) == 0:
            return [], np.empty(0, np.float32)
        q = np.asarray(query, np.float32).reshape(1, -1)
        if q.shape[1] != self.dim:
            raise LibraryError(f"query has {q.shape[1]} dimensions, the index holds {self.dim}-dimensional vectors")
        found, scores = self.vectors.scan(q, n, score_fn) if score_fn is not None else self.vectors.search(q, n)
        ids = list(found[0])
        return ids, scores[0, : len(ids)]

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """The video vectors [len(ids), D] of ``ids`` (KeyError for one not stored)."""
        if self.vectors is None:
            if ids:
                raise KeyError(ids[0])
            return np.empty((0, self.dim or 0), np.float32)
        return self.vectors.get(ids)

    def chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (ids, video vectors [m, D]), in the vector index's blocks (views valid until it next changes)."""
        if self.vectors is not None:
            yield from self.vectors.iter_chunks()

    def ids(self) -> list[str]:
        """Every video's id, in the order of ``chunks``."""
        return [i for chunk, _ in self.chunks() for i in chunk]

    def known(self, ids: Sequence[str]) -> list[bool]:
        """Whether each of ``ids`` is in the vector index."""
        return [self.vectors is not None and i in self.vectors for i in ids]

    def stored(self, ids: Sequence[str]) -> dict[str, StoredVideo]:
        """Path, duration, frame vectors and times of ``ids``, in one query (ids no longer stored are left out)."""
        keys = [int(i) for i in ids]
        if not keys:
            return {}
        rows = self._db.execute(
            "SELECT v.id, v.path, v.duration, f.vectors, f.times FROM videos v JOIN frame_vectors f "
            f"ON f.video_id = v.id WHERE v.id IN ({','.join('?' * len(keys))})", keys)
        out = {}
        for id_, path, duration, vectors, times in rows:
            frame_rows = np.frombuffer(vectors, np.float16).reshape(-1, self.dim).astype(np.float32)
            out[str(id_)] = StoredVideo(str(id_), os.fsdecode(path), duration, frame_rows,
                                        np.frombuffer(times, np.float64))
        return out

    def _biases_now(self, table: bool = False) -> tuple[tuple[float, float], np.ndarray | None]:
        """((min, max) bias, bias by video id when ``table`` and the biases differ, else None) of the current
        generation: the range from the ``bias`` index, the table (all rows; ~40 ms at 100,000 videos) loaded once per
        generation when first asked."""
        gen = self.generation
        if self._bias_state is None or self._bias_state[0] != gen:
            lo, hi = self._db.execute("SELECT MIN(bias), MAX(bias) FROM videos").fetchone()
            self._bias_state = (gen, (float(lo or 0.0), float(hi or 0.0)), None)
        _, span, by_id = self._bias_state
        if table and by_id is None and span[0] != span[1]:
            rows = np.array(self._db.execute("SELECT id, bias FROM videos").fetchall(), np.float64).reshape(-1, 2)
            by_id = np.zeros(int(rows[:, 0].max(initial=0)) + 1)
            by_id[rows[:, 0].astype(np.int64)] = rows[:, 1]
            self._bias_state = (gen, span, by_id)
        return span, by_id

    def bias_range(self) -> tuple[float, float]:
        """(smallest, largest) bias of the stored videos ((0, 0) when there are none)."""
        return self._biases_now()[0]

    def biases(self, ids: Sequence[str]) -> np.ndarray:
        """Each video's bias, in the order of ``ids`` (0 for an id no longer stored), from a table of every video's
        bias loaded once per generation: re-ranking a few hundred candidates costs microseconds, not a SQLite
        lookup of each."""
        keys = np.fromiter((int(i) for i in ids), np.int64, len(ids))
        span, table = self._biases_now(table=True)
        if table is None:  # every video has the same bias
            return np.full(len(keys), span[0])
        inside = keys < len(table)
        return np.where(inside, table[np.where(inside, keys, 0)], 0.0)

    def video(self, id_: str) -> VideoRecord:
        """Metadata of one indexed video (KeyError when absent)."""
        row = self._db.execute(
            "SELECT id, path, size, mtime_ns, sha256, duration, n_frames, model_id, added_at, updated_at "
            "FROM videos WHERE id = ?", (int(id_),)).fetchone()
        if row is None:
            raise KeyError(id_)
        return VideoRecord(str(row[0]), os.fsdecode(row[1]), *row[2:])

    def videos(self) -> list[VideoRecord]:
        """Every indexed video, by id."""
        return [self.video(str(r[0])) for r in self._db.execute("SELECT id FROM videos ORDER BY id").fetchall()]

    def contents(self) -> dict[str, str]:
        """{video id: SHA-256 of its file} of every indexed video."""
        return {str(r[0]): r[1] for r in self._db.execute("SELECT id, sha256 FROM videos")}

    def find(self, path: str | os.PathLike) -> str | None:
        """Id of the video indexed at ``path`` (made absolute), or None."""
        row = self._db.execute("SELECT id FROM videos WHERE path = ?",
                               (os.fsencode(absolute(path)),)).fetchone()
        return None if row is None else str(row[0])

    def media(self, id_: str) -> EmbeddedMedia:
        """Everything stored for one video: vectors (frame vectors as stored, float16 precision), times, thumbs."""
        row = self._db.execute(
            "SELECT v.vector, v.duration, f.vectors, v.bias FROM videos v JOIN frame_vectors f ON f.video_id = v.id "
            "WHERE v.id = ?", (int(id_),)).fetchone()
        if row is None:
            raise KeyError(id_)
        frames = self._db.execute("SELECT t, thumbnail FROM frames WHERE video_id = ? ORDER BY idx",
                                  (int(id_),)).fetchall()
        vector = np.frombuffer(row[0], np.float32).copy()
        fv = np.frombuffer(row[2], np.float16).reshape(len(frames), -1).astype(np.float32)
        thumbs = [f[1] for f in frames]
        return EmbeddedMedia(vector, fv, np.array([f[0] for f in frames], np.float64), row[1],
                             None if any(t is None for t in thumbs) else thumbs, float(row[3]))

    def thumbnail(self, id_: str, frame: int) -> bytes | None:
        """The stored thumbnail of one frame (None when the embedder gave none)."""
        row = self._db.execute("SELECT thumbnail FROM frames WHERE video_id = ? AND idx = ?",
                               (int(id_), int(frame))).fetchone()
        if row is None:
            raise KeyError((id_, frame))
        return row[0]


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
