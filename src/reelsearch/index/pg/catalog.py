"""PostgresCatalog: the shared catalog, one PostgreSQL database with pgvector holding everything an index folder holds.

The tables, the reads and the sync are ``reelsearch.index.tables``'s and ``reelsearch.index.sync``'s, as for the
embedded catalog; what is PostgreSQL's own:

* ``videos.vector`` is ``vector(D)`` (float32) with an HNSW index (inner product) over [vector, bias] cast to
  ``halfvec(D + 1)`` (float16: a third of the size, no recall lost; ``schema.hnsw_index``), made after the sync
  in which the first video of a model set D (one build over the first load, not an insert per row). ``nearest`` is
  ``ORDER BY vector <#> q [- bias] LIMIT n``, exact (a sequential scan), below ``threshold`` videos, as FAISS's
  flat index; above, the index's n candidates (``ORDER BY [vector, bias]::halfvec <#> [q, 1 or 0]``,
  ``hnsw.ef_search`` at least n, raised with the rows: ``hnsw``). Either way the scores are the exact float32
  inner products (+ bias), best first. ``score_fn`` (order similarity) is an exact scan of ``chunks`` in this process.
* Nothing to catch up: every read sees what any writer committed, so replicas need no restart and no refresh; the
  caches (biases, text-cue segments) are keyed by the generation, which every commit bumps.
* Any number of writers index at once (``reelsearch index PATH --db URL`` on several machines): each file is claimed
  with a lease (a ``claims`` row taken with ``FOR UPDATE SKIP LOCKED``, expiring ``lease`` seconds after its last
  renewal; a thread renews this writer's while it lives), a few at a time (one transaction claims them), and
  committed in batches, as by the embedded catalog, each one transaction that releases the batch's claims and logs
  its files (``index_log``); a dead writer's claims (its batch in flight) expire and are taken over, a file indexed
  meanwhile by another writer is skipped. There is no writer lock: only a change of model is done alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import StoredSegments, StoredVideo
from reelsearch.index.media import EmbeddedMedia
from reelsearch.index.paths import MediaRoots
from reelsearch.index.pg.copy import copy_media, copy_videos, vector_recv, vector_text, vectors_from_send
from reelsearch.index.pg.database import Database
from reelsearch.index.pg.hnsw import MAX_EF_SEARCH, check_buffers, rows_graph, search_ef, users_ef
from reelsearch.index.pg.schema import (
    FOLDED,
    HNSW_MAX_DIM,
    hnsw_indexes,
    migrate,
    schema_version,
)
from reelsearch.index.pg.textcues import PostgresTextCues
from reelsearch.index.sync_records import FileChange, FileToSync, StoredFile
from reelsearch.index.tables import TAKEN, SqlCatalog
from reelsearch.index.textcue_records import Encoder
from reelsearch.index.vectors import SCAN_CHUNK_ROWS

#: Seconds a writer's claim of a file lasts unless renewed (renewed every third of it while the writer lives).
LEASE = 60.0
#: Advisory lock key of what a writer must do alone: a change of model ("reelsearch-w" in ASCII, 63 bits).
WRITER_LOCK = 0x72656C7365617277
#: What fits in a row of an 8 KiB page (a vector longer than this stays TOASTed).
INLINE_BYTES = 8000

logger = logging.getLogger(__name__)

#: ``nearest_sql``'s hits (k, d, video) with, on one hit of each video, what a search reads next of it: its path,
#: duration, frame vectors, times, detail and when taken (``stored``) and its segments as arrays in ordinal order
#: (``segments``).
WITH_ROWS = """WITH hits AS MATERIALIZED ({hits}),
firsts AS (SELECT k, d, video, row_number() OVER (PARTITION BY video ORDER BY d) = 1 AS first FROM hits)
SELECT h.k, h.d, h.video, v.path, v.duration, f.vectors, f.times, f.detail, {taken},
       s.starts, s.stops, s.firsts, s.counts, s.vectors, s.biases
FROM firsts h
LEFT JOIN videos v ON h.first AND v.id = h.video
LEFT JOIN frame_vectors f ON f.video_id = v.id
LEFT JOIN LATERAL (SELECT array_agg(start ORDER BY ordinal) AS starts, array_agg(stop ORDER BY ordinal) AS stops,
                          array_agg(first_frame ORDER BY ordinal) AS firsts,
                          array_agg(n_frames ORDER BY ordinal) AS counts,
                          array_agg(vector_send(vector) ORDER BY ordinal) AS vectors,
                          array_agg(bias ORDER BY ordinal) AS biases
                   FROM video_segments WHERE video_id = v.id) s ON v.id IS NOT NULL"""


class PostgresCatalog(SqlCatalog):
    """The catalog in the PostgreSQL database at ``url`` (migrated to this reelsearch's schema on open).

    HNSW settings (None: chosen from the rows, ``reelsearch.index.pg.hnsw``): ``hnsw_m`` and ``ef_construction``
    (when the index is made), ``ef_search`` (per query, at least the candidates asked for; None: the user's session
    setting, or from the rows: :meth:`videos_ef`); ``segment_ef_search``: the segments' query's (None: the videos'
    times the segments per video, :meth:`segments_ef`); ``threshold``: below it ``nearest`` is exact.
    """

    VECTOR_SQL = "vector_send(v.vector)"

    def __init__(self, url: str, *, media_roots: MediaRoots | None = None, threshold: int = 20_000,
                 hnsw_m: int | None = None, ef_construction: int | None = None, ef_search: int | None = None,
                 segment_ef_search: int | None = None, lease: float = LEASE):
        self.media_roots = media_roots or MediaRoots()
        self.lease = float(lease)
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._renewer: threading.Thread | None = None
        self._claimed: set[bytes] = set()  # the files this writer claimed, until their commit
        self.threshold, self.hnsw_m, self.ef_construction = int(threshold), hnsw_m, ef_construction
        self.ef_search = None if ef_search is None else int(ef_search)
        self._users_ef: tuple[int | None] | None = None  # (hnsw.users_ef,) of the session, read once
        self.segment_ef_search = None if segment_ef_search is None else int(segment_ef_search)
        self._read: dict[str, tuple[object, object]] = {}  # name -> (generation, what was read: _per_generation)
        self._db = Database(url)
        try:
            migrate(self._db)
        except BaseException:
            self._db.close()
            raise

    @property
    def url(self) -> str:
        return self._db.url

    @property
    def location(self) -> str:
        return self._db.location

    @property
    def schema(self) -> int:
        """The database's schema version."""
        return schema_version(self._db)

    def close(self) -> None:
        if self._renewer is not None:
            self._renewing.set()
            self._renewer.join()
            self._renewer = None
        with contextlib.suppress(ReelsearchError):  # this writer's claims (of files it failed on) go with it
            self._db.execute("DELETE FROM claims WHERE worker = ? AND error IS NULL", (self.worker,))
        self._db.close()

    def refresh(self) -> None:
        """Nothing to do: every read sees the last commit."""

    def _per_generation(self, name: str, read: Callable[[], object], gen: object = None):
        """``read()``, read again only when the generation (``gen``: the text cues' for what is theirs) has moved."""
        gen = self.generation if gen is None else gen
        if self._read.get(name, (None,))[0] != gen:
            self._read[name] = (gen, read())
        return self._read[name][1]

    def __len__(self) -> int:
        """The number of videos, counted once per generation (a count is a scan of the table)."""
        return self._per_generation("videos", super().__len__)

    def text_cues(self, encoder: Encoder | None, create: bool = False) -> PostgresTextCues | None:
        """The text cues in this database, once ``index`` has stored any (always when ``create``): asked once per
        text-cue generation, which a ``snapshot`` reads with the meta (no statement of its own in a search)."""
        if not create and not self._per_generation("cues", lambda: self._db.execute(
                "SELECT 1 FROM runs LIMIT 1").fetchone() is not None, (self._meta("generation", "cue_meta"),)):
            return None
        return PostgresTextCues(self._db, encoder=encoder, meta=lambda key: self._meta(key, "cue_meta"))

    # -- what the index folder's searcher.json holds, here in meta ------------------------------------------
    def settings(self) -> dict:
        """What the catalog remembers of how it was built (``{"model": ...}``; {} before the first index)."""
        value = self._meta("settings")
        return json.loads(value) if value else {}

    def _meta(self, key: str, table: str = "meta") -> str | None:
        """A value of ``table`` (``meta``, or the text cues' ``cue_meta``); inside a ``snapshot`` every one of both is
        read at the first (one statement, not one per key)."""
        held = self._holding()
        if held is None:
            row = self._db.execute(f"SELECT value FROM {table} WHERE key = ?", (key,)).fetchone()
            return None if row is None else row[0]
        if " meta" not in held:
            held[" meta"] = {(t, k): v for t, k, v in self._db.execute(
                "SELECT 'meta', key, value FROM meta UNION ALL SELECT 'cue_meta', key, value FROM cue_meta")}
        return held[" meta"].get((table, key))

    def remember(self, settings: dict) -> None:
        with self._transaction():
            self._set_meta("settings", json.dumps(settings))

    # -- writing ---------------------------------------------------------------------------------------------
    def _writer_lock(self, wait: float | None):
        """No lock: writers cooperate file by file (``_claim``), so any number index at once."""
        return contextlib.nullcontext()

    # -- cooperating writers: a claim (lease) per file ---------------------------------------------------------
    def _claim(self, items: list[FileToSync], model_id: str) -> list[FileToSync | None | bool]:
        """Take ``items`` with a lease each (a ``claims`` row, ``lease`` seconds, renewed while this writer lives), in
        one transaction: each item with its stored row as it is now; None when it is indexed already (by another
        writer since the plan) or another writer failed on it; False while another live writer holds it. A claim
        whose lease expired (its writer died) is taken over. Claims are inserted in path order (two writers never
        wait on each other's)."""
        keys = [os.fsencode(self.media_roots.stored(item.path)) for item in items]
        with self._db.transaction():
            mine = {bytes(r[0]) for r in self._db.execute(
                "INSERT INTO claims (path, worker, expires_at) SELECT p, ?, now() + ? * interval '1 second' FROM "
                "unnest(?::bytea[]) AS p ORDER BY p ON CONFLICT (path) DO NOTHING RETURNING path",
                (self.worker, self.lease, keys))}
            state: dict[bytes, bool | None] = {}  # a key claimed by another: False (held) or None (it failed on it)
            others = [k for k in keys if k not in mine]
            if others:
                found = {bytes(r[0]): r[1:] for r in self._db.execute(
                    "SELECT path, worker, expires_at < now(), error FROM claims WHERE path = ANY(?) ORDER BY path "
                    "FOR UPDATE SKIP LOCKED", (others,))}
                taken = []
                for key in others:
                    worker, expired, error = found.get(key, (None, False, None))  # not found: being claimed now
                    if worker == self.worker or expired:
                        taken.append(key)
                    else:
                        state[key] = None if error is not None else False
                if taken:
                    self._db.execute("UPDATE claims SET worker = ?, expires_at = now() + ? * interval '1 second', "
                                     "error = NULL WHERE path = ANY(?)", (self.worker, self.lease, taken))
                    mine.update(taken)
            rows = {bytes(r[0]): r for r in self._db.execute(
                "SELECT path, id, size, mtime_ns, sha256, model_id FROM videos WHERE path = ANY(?)",
                ([k for k in keys if k in mine],))} if mine else {}
            stats = {k: (item.stat.st_size, item.stat.st_mtime_ns) for k, item in zip(keys, items, strict=True)}
            done = [k for k, r in rows.items() if r[5] == model_id and (r[2], r[3]) == stats[k]]
            if done:
                self._db.execute("DELETE FROM claims WHERE path = ANY(?)", (done,))
                state.update(dict.fromkeys(done))  # indexed meanwhile
                mine.difference_update(done)
        if mine:
            self._heartbeat()
            self._claimed.update(mine)
        out: list[FileToSync | None | bool] = []
        for item, key in zip(items, keys, strict=True):
            if key not in mine:
                out.append(state[key])
                continue
            row = rows.get(key)
            stored = None if row is None or row[5] != model_id else StoredFile(bytes(row[0]), *row[1:5])
            out.append(item._replace(stored=stored))
        return out

    def _claim_failed(self, item: FileToSync, problem: str) -> None:
        """The claim stays with the problem until its lease expires: the other writers of this run leave it."""
        self._db.execute("UPDATE claims SET error = ? WHERE path = ? AND worker = ?",
                         (problem, os.fsencode(self.media_roots.stored(item.path)), self.worker))

    def _owned(self, changes: list[FileChange]) -> list[FileChange]:
        """The changes whose claims this writer still holds (or never claimed: ``copy_from``), their claims released
        and each logged in ``index_log`` (one row per file committed: the proof that no file is indexed twice); two
        statements a batch."""
        keys = [os.fsencode(self.media_roots.stored(change.file.path)) for change in changes]
        claimed = [k for k in keys if k in self._claimed]
        released = {bytes(r[0]) for r in self._db.execute(
            "DELETE FROM claims WHERE path = ANY(?) AND worker = ? RETURNING path", (claimed, self.worker))} \
            if claimed else set()
        kept, logged = [], []
        for change, key in zip(changes, keys, strict=True):
            if key in self._claimed and key not in released:
                logger.warning("%s: lost the claim of %s (its lease expired); another writer indexes it", self.location,
                               change.file.path)
                continue
            self._claimed.discard(key)
            if change.media is not None:
                logged.append(key)
            kept.append(change)
        if logged:
            self._db.execute("INSERT INTO index_log (path, worker) SELECT unnest(?::bytea[]), ?", (logged, self.worker))
        return kept

    def committed(self) -> int:
        """How many files the writers have committed so far (``index_log`` rows): what a launcher of workers counts."""
        return self._db.execute("SELECT count(*) FROM index_log").fetchone()[0]

    def _exclusive(self) -> None:
        self._db.execute("SELECT pg_advisory_xact_lock(?)", (WRITER_LOCK,))

    def _heartbeat(self) -> None:
        """Renew this writer's leases every third of ``lease`` seconds, from a thread with its own connection, for
        as long as this catalog is open (a writer that dies stops renewing: its claims expire)."""
        if self._renewer is not None:
            return
        stop = self._renewing = threading.Event()

        def renew() -> None:
            db = None
            while not stop.wait(self.lease / 3):
                try:
                    db = db or Database(self.url)
                    db.execute("UPDATE claims SET expires_at = now() + ? * interval '1 second' WHERE worker = ? "
                               "AND error IS NULL", (self.lease, self.worker))
                except ReelsearchError as exc:  # the database away for a while: the next round tries again
                    logger.warning("%s", exc)
            if db is not None:
                db.close()

        self._renewer = threading.Thread(target=renew, name="reelsearch-lease", daemon=True)
        self._renewer.start()

    def _transaction(self):
        return self._db.transaction()

    def _write_errors(self):
        return contextlib.nullcontext()  # the connection's errors are ReelsearchErrors already

    def _vector_param(self, vector: np.ndarray) -> str:
        return vector_text(vector)

    def _vector(self, value) -> np.ndarray:
        return vectors_from_send([bytes(value)], (len(value) - 4) // 4)[0]

    def _insert_video(self, values: tuple) -> int:
        marks = ", ".join("?" * len(values))
        return self._db.execute(f"INSERT INTO videos ({self._INSERT}) VALUES ({marks}) RETURNING id",
                                values).fetchone()[0]

    def _insert_videos(self, rows: list[tuple[tuple, str]]) -> list[int]:
        """The new videos' rows by one binary COPY (``copy.copy_videos``)."""
        return copy_videos(self._db, rows)

    def _write_media(self, written: list[tuple[int, EmbeddedMedia, str]]) -> None:
        """The written videos' frames, frame vectors and segments by one binary COPY per table (``copy.copy_media``)."""
        copy_media(self._db, written)

    def _forget(self, ids: Sequence[int], gen: int) -> None:
        """Nothing to tell: the HNSW index is the table's."""

    def _first_vector(self, dim: int) -> None:
        """The vector columns become ``vector(dim)``; their HNSW indexes are made after the sync's rows (``_synced``):
        one ``CREATE INDEX`` over a first load instead of an insert into the graph per row."""
        self._db.execute(f"ALTER TABLE videos ALTER COLUMN vector TYPE vector({int(dim)})")
        if 4 * dim + 512 < INLINE_BYTES:  # kept in the row, not compressed out of line: a scan reads it directly
            self._db.execute("ALTER TABLE videos ALTER COLUMN vector SET STORAGE PLAIN")
        self._db.execute(f"ALTER TABLE video_segments ALTER COLUMN vector TYPE vector({int(dim)})")

    def _vectors_dropped(self) -> None:
        with self._transaction():  # one round trip
            self._db.execute("DROP INDEX IF EXISTS videos_hnsw; DROP INDEX IF EXISTS video_segments_hnsw; ALTER TABLE "
                             "videos ALTER COLUMN vector TYPE vector, ALTER COLUMN vector SET STORAGE EXTENDED; "
                             "ALTER TABLE video_segments ALTER COLUMN vector TYPE vector")

    def _synced(self) -> None:
        """The HNSW indexes a first load or a dead writer left missing, made by one writer (the others' commits wait);
        the segments' only once a video has several segments (till then searches rank the videos' index: a library
        of clips builds one graph, not two alike). Once made, rows join them as committed."""
        dim = self.dim
        if dim is None or dim + 1 > HNSW_MAX_DIM:
            return
        videos, segments = self._db.execute("SELECT to_regclass('videos_hnsw') IS NOT NULL, "
                                            "to_regclass('video_segments_hnsw') IS NOT NULL").fetchone()
        segments = segments or not self.several_segments()
        if not (videos and segments):
            with self._transaction():  # the graph's rows: a segment a video at least
                self._exclusive()
                rows = self.segment_count()
                m, ef_construction = rows_graph(rows)
                hnsw_indexes(self._db, dim, self.hnsw_m or m, self.ef_construction or ef_construction, rows,
                             not segments)

    # -- reading ---------------------------------------------------------------------------------------------
    def _nearest_inner(self, queries: np.ndarray, n: int, biased: bool, *,
                       segments: bool = False) -> tuple[list[list[str]], list[np.ndarray]]:
        """The ``n`` best of each query by inner product (+ bias when ``biased``): HNSW above ``threshold`` videos
        (segments), exact below or when more than MAX_EF_SEARCH are asked for; one statement each. Inside a search's
        ``snapshot``, that statement also reads what the search reads next of the videos found (``stored``,
        ``segments``: ``WITH_ROWS``), so a search is one round trip."""
        dim = self.dim
        rows = self.segment_count() if segments else self.row_count()
        exact = n > MAX_EF_SEARCH or rows < self.threshold or dim + 1 > HNSW_MAX_DIM
        if not exact:
            self._db.setting("hnsw.ef_search", self.segments_ef(n) if segments else self.videos_ef(n))
            if not self._buffers_checked:  # once: do the graphs fit in the server's shared_buffers?
                check_buffers(self._db)
                self._buffers_checked = True
        held = self._holding()
        sql = self.nearest_sql(dim, exact, biased, n=n, segments=segments)
        if held is not None:
            sql = WITH_ROWS.format(hits=sql, taken=TAKEN)
        ids, dists = [], []
        for row in queries:
            query = vector_recv(row)
            params = (query,) if exact else (query, vector_recv(np.append(row, 1.0 if biased else 0.0)))
            found = self._db.execute(sql, params, binary=True).fetchall()
            found.sort(key=lambda r: r[1])  # the index's candidates by their float32 distance
            if held is not None:
                self._keep(held, found, dim)
            ids.append([str(r[0]) for r in found])
            dists.append(-np.array([r[1] for r in found], np.float32))
        return ids, dists

    def _keep(self, held: dict, found: list[tuple], dim: int) -> None:
        """Hold the videos' rows that ``WITH_ROWS`` read (one row per video carries them) for ``stored`` and
        ``segments`` until the snapshot ends."""
        stored, segments = held.setdefault(" rows", ({}, {}))
        for r in found:
            if r[3] is None:  # not the video's first hit, or gone meanwhile
                continue
            vid = str(r[2])
            stored[vid] = self._stored_video((vid, *r[3:10]), dim)
            segments[vid] = None if r[10] is None else self._stored_segments(list(zip(*r[10:16], strict=True)))

    def stored(self, ids: Sequence[str]) -> dict[str, StoredVideo]:
        """``SqlCatalog.stored``: those the search's nearest statement read already from it (``_keep``)."""
        return self._held_rows(0, ids, super().stored)

    def segments(self, ids: Sequence[str]) -> dict[str, StoredSegments]:
        """``SqlCatalog.segments``: those the search's nearest statement read already from it (``_keep``)."""
        return self._held_rows(1, ids, super().segments)

    def _held_rows(self, which: int, ids: Sequence[str], read) -> dict:
        """``read(ids)``'s answer, from what ``_keep`` holds (``which``: 0 stored, 1 segments; None: a video without
        segments) and ``read`` of the rest."""
        held = (self._holding() or {}).get(" rows")
        if held is None:
            return read(ids)
        have, keys = held[which], [str(int(i)) for i in ids]
        out = read([k for k in keys if k not in have])
        return {k: have[k] if k in have else out[k] for k in keys if have.get(k) is not None or k in out}

    def _nearest_segments_inner(self, queries: np.ndarray, n: int,
                                biased: bool) -> tuple[list[list[str]], list[np.ndarray]]:
        """``_nearest_inner`` over ``video_segments`` (ids ``"VIDEO:ORDINAL"``)."""
        return self._nearest_inner(queries, n, biased, segments=True)

    def videos_ef(self, n: int = 10) -> int:
        """The videos' query's ``hnsw.ef_search`` for ``n`` candidates (``hnsw.search_ef``): ``ef_search``, else the
        session's when the user set it (``hnsw.users_ef``, read once, before this catalog sets its own), else
        ``hnsw.rows_ef`` of the videos."""
        if self._users_ef is None:
            self._users_ef = (users_ef(self._db),)
        return search_ef(self.ef_search if self.ef_search is not None else self._users_ef[0], self.row_count(), n)

    def segments_ef(self, n: int = 10) -> int:
        """The segments' query's ``hnsw.ef_search`` for ``n`` candidates: ``segment_ef_search``, or the videos' query's
        (``videos_ef``) times the segments per video (rounded up; at most MAX_EF_SEARCH): a video's segments lie near
        each other and crowd the candidates (docs/benchmarks.md, "PostgreSQL's segments query")."""
        if self.segment_ef_search is not None:
            return search_ef(self.segment_ef_search, 0, n)
        per_video = -(-self.segment_count() // max(1, self.row_count()))
        return min(MAX_EF_SEARCH, max(self.videos_ef() * max(1, per_video), int(n)))

    _buffers_checked = False  # whether ``check_buffers`` ran (at the first search by HNSW)

    def segment_count(self) -> int:
        """The number of segments, counted once per generation."""
        return self._per_generation("segments", lambda: self._db.execute(
            "SELECT COUNT(*) FROM video_segments").fetchone()[0])

    def segment_chunks(self, rows: int = SCAN_CHUNK_ROWS) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (segment ids, vectors [m, D]), by video and ordinal, ``rows`` at a time (each block one query)."""
        dim, last = self.dim, (0, -1)
        if dim is None:
            return
        while block := self._db.execute(
                "SELECT video_id, ordinal, vector_send(vector) FROM video_segments WHERE (video_id, ordinal) > (?, ?) "
                "ORDER BY video_id, ordinal LIMIT ?", (*last, rows)).fetchall():
            last = (block[-1][0], block[-1][1])
            yield [f"{r[0]}:{r[1]}" for r in block], vectors_from_send([r[2] for r in block], dim)

    @staticmethod
    def nearest_sql(dim: int, exact: bool, biased: bool = False, *, n: int, segments: bool = False) -> str:
        """The query of one vector's nearest (parameters: the vector[, the vector and its bias weight], as
        ``copy.vector_recv``'s, binary): (id, float32 inner-product distance, less the bias when ``biased``) of the n
        best by a scan, or of the HNSW index's n candidates (by their halfvec distance over [row, bias], the index's
        expression: ``schema.FOLDED``); ``n`` in the text: the server plans it once (generic plan), not each search."""
        distance = f"(vector <#> ?::vector({dim}))" + (" - bias" if biased else "")
        key, table = ("video_id || ':' || ordinal", "video_segments") if segments else ("id", "videos")
        video = "video_id" if segments else "id"
        if exact:  # a video without a picture has no vector (NULL), no segment
            return (f"SELECT {key} AS k, {distance} AS d, {video} AS video FROM {table} WHERE vector IS NOT NULL "
                    f"ORDER BY d LIMIT {int(n)}")
        return (f"SELECT {key} AS k, {distance} AS d, {video} AS video FROM {table} ORDER BY "
                f"{FOLDED.format(dim=dim + 1)} <#> ?::halfvec({dim + 1}) LIMIT {int(n)}")

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """The video vectors [len(ids), D] of ``ids`` (KeyError for one not stored)."""
        dim = self.dim or 0
        if not ids:
            return np.empty((0, dim), np.float32)
        keys = [int(i) for i in ids]
        found = dict(self._db.execute("SELECT id, vector_send(vector) FROM videos WHERE id = ANY(?) AND vector IS NOT "
                                      "NULL", (keys,)).fetchall())
        missing = [i for i, k in zip(ids, keys, strict=True) if k not in found]
        if missing:
            raise KeyError(missing[0])
        return vectors_from_send([found[k] for k in keys], dim)

    def chunks(self, rows: int = SCAN_CHUNK_ROWS) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (ids, video vectors [m, D]), by id, ``rows`` at a time (each block one query)."""
        dim, last = self.dim, 0
        if dim is None:
            return
        while block := self._db.execute("SELECT id, vector_send(vector) FROM videos WHERE id > ? AND vector IS NOT "
                                        "NULL ORDER BY id LIMIT ?", (last, rows)).fetchall():
            last = block[-1][0]
            yield [str(r[0]) for r in block], vectors_from_send([r[1] for r in block], dim)

    def ids(self) -> list[str]:
        """Every id of a video with a picture, in the order of ``chunks``."""
        return [str(r[0]) for r in self._db.execute("SELECT id FROM videos WHERE vector IS NOT NULL ORDER BY id")]

    def known(self, ids: Sequence[str]) -> list[bool]:
        """Whether each of ``ids`` is stored (with a picture or without)."""
        keys = [int(i) for i in ids]
        found = {r[0] for r in self._db.execute("SELECT id FROM videos WHERE id = ANY(?)", (keys,))} if keys else set()
        return [k in found for k in keys]
