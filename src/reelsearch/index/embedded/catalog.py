"""EmbeddedCatalog: the catalog in a folder (an index folder), SQLite and FAISS, kept in sync with folders of files.

Layout of an index directory::

    DIR/library.sqlite     metadata, per-frame embeddings and thumbnails, video vectors: the source of truth
    DIR/vectors.faiss.npz  the FAISS vector index of the videos' [row, bias] (D + 1), derived from the SQLite rows
                           (rebuilt when lost, damaged or of another width): exact below 20,000 rows, product-
                           quantised codes above, whose candidates are scored again with their rows read from SQLite
    DIR/segments.faiss.npz the same of the segments' rows (ids "VIDEO:ORDINAL"): what a text query ranks
    DIR/textcues.sqlite    the speech and on-screen-text segments (``reelsearch.index.embedded.textcues``)
    DIR/searcher.json      what the index remembers of how it was built (the model: ``settings``)
    DIR/.writer.lock       flock held by the one process that syncs

Every change is committed by one SQLite transaction (WAL) that bumps a generation counter; the vector index is
brought up to that generation afterwards (upserts of rows with a newer generation, deletions from a tombstone
table) and records the generation it reflects. A crash between the two leaves SQLite ahead; the next open replays
the difference (idempotent), so the pair is always consistent as seen through this class. The tables, the reads and
the sync are ``reelsearch.index.tables``'s and ``reelsearch.index.sync``'s, shared with the PostgreSQL catalog.

Search reads it as a ``Catalog`` (``reelsearch.index.catalog``): the vector index's top N for a query vector, rows and
frame rows of given videos, their biases; ranking, fusion and moments are search's (``reelsearch.search``). Each
video's bias is the vector index's last dimension, so one search ranks by row . q + bias ([row, bias] . [q, 1]) or by
row . q alone ([q, 0]).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import CatalogError
from reelsearch.index.embedded.exact_rows import segment_rows, train_for, video_rows
from reelsearch.index.embedded.schema import (
    ONE_SEGMENT_EACH,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    SEGMENTS_SQL,
    SEGMENTS_TABLE,
    VIDEOS_SQL,
)
from reelsearch.index.embedded.sqlite import SqliteDb
from reelsearch.index.embedded.textcues import SQLITE_NAME as TEXTCUES_NAME
from reelsearch.index.embedded.textcues import EmbeddedTextCues
from reelsearch.index.embedded.vectors import FaissIndex
from reelsearch.index.paths import MediaRoots
from reelsearch.index.tables import SqlCatalog
from reelsearch.index.textcue_records import Encoder
from reelsearch.index.vectors import VectorIndex
from reelsearch.io import atomic_write_json
from reelsearch.location import default_index_dir

SQLITE_NAME = "library.sqlite"
FAISS_NAME = "vectors.faiss.npz"
SEGMENTS_FAISS_NAME = "segments.faiss.npz"
LOCK_NAME = ".writer.lock"
SETTINGS_NAME = "searcher.json"
#: No memory-mapped reads: the re-rank reads a few hundred random rows a query, whose mapped pages would stay in the
#: process's resident set (pread puts them in the page cache, and SQLite's own cache holds CACHE_KIB at most)
MMAP_BYTES = 0
#: SQLite's page cache: CACHE_KIB to read (a search's rows, random in a file of GBs, are seldom read again: 8 MiB cost
#: a search no more CPU than 16 and ``serve`` holds 8 MiB less: docs/benchmarks.md, "serve at 100,000 videos of four
#: segments: where its memory goes"), WRITE_CACHE_KIB while the writer lock is held (a batch's pages)
CACHE_KIB, WRITE_CACHE_KIB = 8192, 16384
#: The meta key of the generation the vector file reflects.
VECTOR_KEY = "vector_gen:faiss"

logger = logging.getLogger(__name__)

class EmbeddedCatalog(SqlCatalog):
    """The embedded catalog: SQLite (the source of truth) and a FAISS vector index in ``directory`` (exact below
    ``threshold`` videos; above, product-quantised codes whose candidates are scored again with their float32 rows
    read from SQLite, so memory holds no float32 row). ``vector_options`` go to :class:`FaissIndex` (``threshold``,
    ``rerank``, ``nprobe``, ``kind``: "hnsw" keeps float32 HNSW in memory, ...). A damaged vector file is rebuilt
    from SQLite; a damaged SQLite file raises DamagedIndexError (``check`` and ``repair``)."""

    def __init__(self, directory: str | Path | None = None, *, media_roots: MediaRoots | None = None,
                 **vector_options):
        self.dir = Path(directory) if directory is not None else default_index_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.media_roots = media_roots or MediaRoots()
        self._vector_options = vector_options
        self._db = SqliteDb(self.dir / SQLITE_NAME, self.dir)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            self._migrate()
        except BaseException:
            self._db.close()
            raise
        self.vectors: VectorIndex | None = None
        self.segment_vectors: VectorIndex | None = None  # the segments' [row, bias], ids "VIDEO:ORDINAL"
        self._loaded_gen = 0  # generation the in-memory vector index reflects
        self.refresh()

    def _migrate(self) -> None:
        """Create the tables, or bring those of an earlier schema up to this one (1 -> 2: the bias column; 2 -> 3:
        the frames' detail, NULL for the videos already stored until the next ``sync`` measures their thumbnails;
        3 -> 4: the date taken, NULL until the next ``sync`` reads it: the file's mtime meanwhile; 4 -> 5: segments;
        5 -> 6: a NULL vector for a file without a picture, whose zero rows are dropped; 6 -> 7: the vector files,
        float32 HNSW before, are rebuilt from SQLite as product-quantised codes at the next open that can write;
        7 -> 8: the segments' table written again as a rowid table)."""
        has_meta = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        version = self._meta("schema_version") if has_meta else None
        if version is not None and int(version) > SCHEMA_VERSION:
            raise CatalogError(f"{self.dir / SQLITE_NAME}: written by a newer reelsearch (schema {version})")
        for table, column, kind, since in (("videos", "bias", "REAL NOT NULL DEFAULT 0", 2),
                                           ("frame_vectors", "detail", "BLOB", 3), ("videos", "taken_at", "REAL", 4),
                                           ("videos", "taken_from", "TEXT", 4)):
            if version is not None and int(version) < since:
                if column not in {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        if version is not None and int(version) < 6:
            self._nullable_vector()
        self._db.executescript(SCHEMA_SQL + SEGMENTS_SQL)
        if version is not None and int(version) < 5:
            with self._transaction():
                self._db.execute(ONE_SEGMENT_EACH)
        if version is not None and int(version) < 6:
            self._drop_zero_rows()
        if version is not None and int(version) < 8:
            self._segments_with_rowid()
        if version is not None and int(version) < 7 and any((self.dir / n).is_file() for n in (FAISS_NAME,
                                                                                              SEGMENTS_FAISS_NAME)):
            logger.warning("%s: an index of an earlier reelsearch; its vector files (float32, held in memory) are "
                           "rebuilt from %s as product-quantised codes: about a minute per 100,000 videos, once",
                           self.dir, SQLITE_NAME)
            self._set_meta(VECTOR_KEY, 0)  # the files are replaced at the rebuild's save
        if version is None or int(version) < SCHEMA_VERSION:
            self._set_meta("schema_version", SCHEMA_VERSION)

    def _nullable_vector(self) -> None:
        """Schema 6: ``videos.vector`` may be NULL (no picture). SQLite cannot drop a NOT NULL, so the table is made
        again with its rows, ids and id counter, foreign keys off meanwhile (the frames and segments that reference it
        stay); its indexes are made again by the schema script."""
        columns = [r[1] for r in self._db.execute("PRAGMA table_info(videos)")]
        if not columns:
            return
        names = ", ".join(columns)
        self._db.execute("PRAGMA foreign_keys=OFF")
        try:
            with self._transaction():
                seq = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'videos'").fetchone()
                self._db.execute(VIDEOS_SQL.format(name="videos_nullable"))
                self._db.execute(f"INSERT INTO videos_nullable ({names}) SELECT {names} FROM videos")
                self._db.execute("DROP TABLE videos")
                self._db.execute("ALTER TABLE videos_nullable RENAME TO videos")
                if seq is not None:
                    self._db.execute("DELETE FROM sqlite_sequence WHERE name = 'videos'")
                    self._db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('videos', ?)", (seq[0],))
        finally:
            self._db.execute("PRAGMA foreign_keys=ON")

    def _segments_with_rowid(self) -> None:
        """Schema 8: ``video_segments`` made again as a rowid table (``SEGMENTS_TABLE``: a search's read of its hits'
        segments a third of the time) with its rows, in one transaction (3.5 s for 20,000 segments, 2 busy cores)."""
        row = self._db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'video_segments'"
                               ).fetchone()
        if row is None or "WITHOUT ROWID" not in row[0].upper():
            return
        count = self._db.execute("SELECT count(*) FROM video_segments").fetchone()[0]
        if count >= 100_000:
            logger.warning("%s: an index of an earlier reelsearch; its %d segments are written again as a rowid table "
                           "(faster reads), once: about 3.5 s per 20,000, and %s grows by the table's size until "
                           "later writes reuse the freed pages", self.dir, count, SQLITE_NAME)
        with self._transaction():
            self._db.execute(SEGMENTS_TABLE.format(name="video_segments_rowid"))
            self._db.execute("INSERT INTO video_segments_rowid SELECT * FROM video_segments ORDER BY video_id, ordinal")
            self._db.execute("DROP TABLE video_segments")
            self._db.execute("ALTER TABLE video_segments_rowid RENAME TO video_segments")
        logger.info("%s: the segments' table written again as a rowid table (schema 8)", self.dir)

    def _drop_zero_rows(self) -> None:
        """Schema 6: the files of sound alone that an earlier schema stored with zero rows (a zero video row and one
        placeholder frame) lose them: no vector, frame or segment (the vector files drop them as they catch up)."""
        zero = [r[0] for r in self._db.execute("SELECT id FROM videos WHERE n_frames = 1 AND vector IS NOT NULL AND "
                                               "vector = zeroblob(length(vector))")]
        if zero:
            with self._transaction():
                gen = self._next_generation()
                marks = ",".join("?" * len(zero))
                for table in ("frames", "frame_vectors", "video_segments"):
                    self._db.execute(f"DELETE FROM {table} WHERE video_id IN ({marks})", zero)
                self._db.execute(f"UPDATE videos SET vector = NULL, n_frames = 0, bias = 0, gen = ? WHERE id IN "
                                 f"({marks})", (gen, *zero))
            logger.info("%s: %d files of sound alone stored without their zero rows", self.dir, len(zero))

    @property
    def location(self) -> str:
        return str(self.dir)

    def close(self) -> None:
        """Close the vector index and the database."""
        for index in (self.vectors, self.segment_vectors):
            if index is not None:
                index.close()
        self.vectors = self.segment_vectors = None
        self._db.close()

    def settings(self) -> dict:
        """What the catalog remembers of how it was built (``{"model": ...}``; {} before the first index, or when the
        file is unreadable: these are only defaults)."""
        try:
            data = json.loads((self.dir / SETTINGS_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def remember(self, settings: dict) -> None:
        atomic_write_json(self.dir / SETTINGS_NAME, settings)

    def text_cues(self, encoder: Encoder | None, create: bool = False) -> EmbeddedTextCues | None:
        """The text cues beside the catalog (``DIR/textcues.sqlite``), once ``index`` has made them."""
        if not create and not (self.dir / TEXTCUES_NAME).is_file():
            return None
        return EmbeddedTextCues(self.dir, encoder=encoder)

    @contextlib.contextmanager
    def _writer_lock(self, wait: float | None) -> Iterator[None]:
        """The directory's writer lock: an flock of ``.writer.lock``, which holds the holder's pid."""
        try:
            fh = open(self.dir / LOCK_NAME, "a+")
        except OSError as exc:
            raise CatalogError(f"{self.dir}: cannot write here ({exc.strerror}); the index can be searched but not "
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
                        raise CatalogError(f"{self.dir}: another process (pid {holder}) is updating this index; "
                                           "try again when it is done") from None
                    if not told:
                        logger.warning("%s: waiting for another process (pid %s) that is updating this index", self.dir,
                                    holder)
                        told = True
                    time.sleep(0.2)
            with contextlib.suppress(OSError):  # who holds it, for the message above (best effort)
                fh.seek(0)
                fh.truncate()
                fh.write(str(os.getpid()))
                fh.flush()
            self._db.execute(f"PRAGMA cache_size=-{WRITE_CACHE_KIB}")
            try:
                yield
            finally:
                self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")  # the pages over it freed
        finally:
            fh.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[SqliteDb]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")  # inside: a COMMIT that fails (disk full) is rolled back too
        except BaseException:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # keep the original error
                    self._db.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _write_errors(self) -> Iterator[None]:
        """A failed write (full or read-only disk, I/O error) becomes one CatalogError; what was committed stays."""
        try:
            yield
        except sqlite3.Error as exc:
            raise CatalogError(f"{self.dir}: cannot write the index ({exc}); every batch committed before is kept "
                               "and the index stays usable: free some space (or fix the permissions) and run again") \
                from exc
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT,
                                 errno.EIO):
                raise
            raise CatalogError(f"{self.dir}: cannot write the index ({exc.strerror}); every batch committed before "
                               "is kept and the index stays usable: free some space (or fix the permissions) and run "
                               "again") from exc

    # -- the vector column and the FAISS index ---------------------------------------------------------------
    def _vector_param(self, vector: np.ndarray) -> bytes:
        return np.asarray(vector, np.float32).tobytes()

    def _vector(self, value) -> np.ndarray:
        return np.frombuffer(value, np.float32)

    def _insert_video(self, values: tuple) -> int:
        return self._db.execute(f"INSERT INTO videos ({self._INSERT}) VALUES ({', '.join('?' * len(values))})",
                                values).lastrowid

    def _forget(self, ids: Sequence[int], gen: int) -> None:
        self._db.executemany("INSERT OR REPLACE INTO tombstones (id, gen) VALUES (?, ?)", [(i, gen) for i in ids])

    def _first_vector(self, dim: int) -> None:
        """Nothing to prepare: the vector index is opened after the commit (``_synced``)."""

    def _vectors_dropped(self) -> None:
        for index in (self.vectors, self.segment_vectors):
            if index is not None:
                index.close()
        self.vectors = self.segment_vectors = None
        self._loaded_gen = 0
        self._set_meta(VECTOR_KEY, 0)
        for name in (FAISS_NAME, SEGMENTS_FAISS_NAME):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()

    def _synced(self) -> None:
        if self.dim is not None:
            if self.vectors is None:
                self._open_both(self.dim, fresh=True)
            self._catch_up(save=True)

    def _open_both(self, dim: int, fresh: bool) -> None:
        """Open the videos' and the segments' vector files (fresh: empty, replacing the files at their first save);
        a damaged or missing one is rebuilt from SQLite (both then are)."""
        if fresh or not all((self.dir / name).is_file() for name in (FAISS_NAME, SEGMENTS_FAISS_NAME)):
            self._loaded_gen, fresh = 0, True
        self.vectors = self._open_vectors(dim, FAISS_NAME, fresh)
        self.segment_vectors = self._open_vectors(dim, SEGMENTS_FAISS_NAME, fresh)

    def _open_vectors(self, dim: int, name: str, fresh: bool) -> VectorIndex:
        """The FAISS index of a vector file, rows of ``dim`` + their bias (a fresh one replaces the file at its
        first save)."""
        path = self.dir / name
        options = {"rows_of": self._video_rows if name == FAISS_NAME else self._segment_rows, "bias_column": True,
                   **self._vector_options}
        try:
            index = FaissIndex(dim + 1, None if fresh else path, **options)
        except ReelsearchError as exc:  # derived data: whatever its damage, it is rebuilt from SQLite
            logger.warning("%s; rebuilding it from %s", exc, self.dir / SQLITE_NAME)
            index = FaissIndex(dim + 1, None, **options)
            self._loaded_gen = 0
        index.path = path
        return index

    def refresh(self) -> None:
        """Load the vector index and bring it up to the last committed change (also one made by another process).

        Only the process holding the writer lock saves the caught-up vector index; others catch up in memory.
        """
        dim = self.dim
        if dim is None:
            return
        stored = int(self._meta(VECTOR_KEY) or 0)
        if self.vectors is None or self.vectors.dim != dim + 1 or stored > self._loaded_gen:
            for index in (self.vectors, self.segment_vectors):
                if index is not None:
                    index.close()
            self._loaded_gen = stored
            self._open_both(dim, fresh=stored == 0)
        if self._loaded_gen == self.generation and len(self.vectors) == self.row_count():
            return
        try:
            with self.writing():
                self._catch_up(save=True)
        except (CatalogError, OSError, sqlite3.Error):  # a writer at work, or a read-only or full disk: in memory
            self._catch_up(save=False)

    def _catch_up(self, save: bool) -> None:
        """Bring the vector index up to the committed generation (replays are idempotent)."""
        assert self.vectors is not None
        gen = self.generation
        synced = self._loaded_gen
        rows = self.row_count()
        if synced == gen and len(self.vectors) == rows:
            return
        if len(self.vectors) != rows and synced == gen:
            synced = 0  # the vector store lost or gained rows behind our back: full reconciliation
        if synced == 0:
            known = {str(r[0]) for r in self._db.execute("SELECT id FROM videos WHERE vector IS NOT NULL")}
            stale = [i for i in self.vectors.ids() if i not in known]
            self.vectors.remove(stale)
            self.segment_vectors.remove(self.segment_vectors.ids())
        else:  # deleted, or written again without a picture: out of the vector files
            dead = [str(r[0]) for r in self._db.execute("SELECT id FROM tombstones WHERE gen > ? UNION SELECT id "
                                                        "FROM videos WHERE gen > ? AND vector IS NULL",
                                                        (synced, synced))]
            self.vectors.remove(dead)
            changed = set(dead) | {str(r[0]) for r in self._db.execute("SELECT id FROM videos WHERE gen > ?",
                                                                       (synced,))}
            self.segment_vectors.remove([k for k in self.segment_vectors.ids() if k.split(":")[0] in changed])
        if synced == 0:  # a full build: the codes trained once, on a sample, before the rows are added
            train_for(self._db, self.vectors, "SELECT id FROM videos WHERE vector IS NOT NULL", self._video_rows)
            several = self._db.execute("SELECT (SELECT COUNT(*) FROM video_segments) > (SELECT COUNT(*) FROM videos "
                                       "WHERE vector IS NOT NULL)").fetchone()[0]
            if several or not self.segment_vectors.train_like(self.vectors):  # one segment each: the videos' rows
                train_for(self._db, self.segment_vectors, "SELECT video_id || ':' || ordinal FROM video_segments",
                          self._segment_rows)
        cur = self._db.execute("SELECT id, vector, bias FROM videos WHERE gen > ? AND vector IS NOT NULL ORDER BY id",
                               (synced,))
        while rows := cur.fetchmany(4096):
            self.vectors.add([str(r[0]) for r in rows], np.stack([np.append(np.frombuffer(r[1], np.float32), r[2])
                                                                  for r in rows]))
        cur = self._db.execute("SELECT s.video_id, s.ordinal, s.vector, s.bias FROM video_segments s JOIN videos v ON "
                               "v.id = s.video_id WHERE v.gen > ? ORDER BY s.video_id, s.ordinal", (synced,))
        while rows := cur.fetchmany(4096):
            self.segment_vectors.add([f"{r[0]}:{r[1]}" for r in rows],
                                     np.stack([np.append(np.frombuffer(r[2], np.float32), r[3]) for r in rows]))
        self._loaded_gen = gen
        if save:
            self.vectors.save()
            self.segment_vectors.save()
            with self._transaction():
                self._set_meta(VECTOR_KEY, gen)
                self._db.execute("DELETE FROM tombstones WHERE gen <= ?", (gen,))

    def _video_rows(self, ids):
        return video_rows(self._db, ids)  # the database at the time of the read (reelsearch.index.embedded.exact_rows)

    def _segment_rows(self, ids):
        return segment_rows(self._db, ids)

    # -- reading ---------------------------------------------------------------------------------------------
    def _nearest_inner(self, queries: np.ndarray, n: int, biased: bool) -> tuple[list[list[str]], list[np.ndarray]]:
        """The vector index's top ``n`` by [row, bias] . [q, 1] (``biased``) or [q, 0]: exact below its threshold,
        HNSW above."""
        if self.vectors is None or len(self.vectors) == 0:
            return [[] for _ in queries], [np.empty(0, np.float32) for _ in queries]
        folded = np.column_stack([queries, np.full(len(queries), 1.0 if biased else 0.0, np.float32)])
        found, scores = self.vectors.search(folded, n)
        ids = [list(f) for f in found]
        return ids, [s[: len(i)] for s, i in zip(scores, ids, strict=True)]

    def _nearest_segments_inner(self, queries: np.ndarray, n: int,
                                biased: bool) -> tuple[list[list[str]], list[np.ndarray]]:
        """``_nearest_inner`` of the segments' vector index (ids "VIDEO:ORDINAL")."""
        if self.segment_vectors is None or len(self.segment_vectors) == 0:
            return [[] for _ in queries], [np.empty(0, np.float32) for _ in queries]
        folded = np.column_stack([queries, np.full(len(queries), 1.0 if biased else 0.0, np.float32)])
        found, scores = self.segment_vectors.search(folded, n)
        ids = [list(f) for f in found]
        return ids, [s[: len(i)] for s, i in zip(scores, ids, strict=True)]

    def segment_count(self) -> int:
        """The number of segments in the vector index."""
        return 0 if self.segment_vectors is None else len(self.segment_vectors)

    def segment_chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (segment ids "VIDEO:ORDINAL", their vectors [m, D]), in the vector index's blocks."""
        if self.segment_vectors is not None:
            for ids, block in self.segment_vectors.iter_chunks():
                yield ids, block[:, :-1]

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """The video vectors [len(ids), D] of ``ids`` (KeyError for one not stored)."""
        if self.vectors is None:
            if ids:
                raise KeyError(ids[0])
            return np.empty((0, self.dim or 0), np.float32)
        return self.vectors.get(ids)[:, :-1]

    def chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (ids, video vectors [m, D]), in the vector index's blocks (views valid until it next changes)."""
        if self.vectors is not None:
            for ids, block in self.vectors.iter_chunks():
                yield ids, block[:, :-1]

    def known(self, ids: Sequence[str]) -> list[bool]:
        """Whether each of ``ids`` is in the vector index, or stored without a picture."""
        sound = self.sound_only()
        return [(self.vectors is not None and i in self.vectors) or i in sound for i in ids]
