"""How a catalog is filled: ``sync`` with folders (plan, embed, commit) and ``copy_from`` another catalog, with the
per-file claims of cooperating writers; written once for both databases, mixed into
``reelsearch.index.tables.SqlCatalog``.

A sync plans (which files are new, changed or gone: ``SyncPlan``), embeds (``FileChange`` per file, or reuses the
embeddings of an identical file already stored), and commits in batches, each batch one transaction that bumps the
generation. What differs between the databases when writing — how a vector column is written, how a row's id comes
back, how the vector index learns of a change, how a failed write is reported, and the claims of writers that
cooperate (PostgreSQL) — is the hooks below, filled in by each catalog.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np
from tqdm import tqdm

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import CatalogError
from reelsearch.index.media import EmbeddedMedia, absolute, sha256_file, thumbnail_detail, walk_media
from reelsearch.index.sync_records import (
    FileChange,
    FileToSync,
    StoredFile,
    SyncPlan,
    SyncReport,
    media_rows,
)
from reelsearch.media.dates import taken_at

logger = logging.getLogger(__name__)

#: What sync calls to embed a new or changed file (the model's job: ``reelsearch.search.embed.MediaEmbedder``).
EmbedFn = Callable[[str], EmbeddedMedia]


def _under(path: bytes, roots: list[bytes]) -> bool:
    """Whether the stored ``path`` is one of ``roots`` or inside one."""
    sep = os.fsencode(os.sep)
    return any(path == r or path.startswith(r.rstrip(sep) + sep) for r in roots)


class CatalogSync(ABC):
    """The writing half of ``reelsearch.index.tables.SqlCatalog``: ``sync`` and ``copy_from`` over its tables, meta and
    writer lock, through the hooks below."""

    # -- what each database implements for writing -----------------------------------------------------------
    @abstractmethod
    def _write_errors(self) -> contextlib.AbstractContextManager:
        """A failed write (full disk, lost connection, ...) becomes one ReelsearchError; what was committed stays."""

    @abstractmethod
    def _vector_param(self, vector: np.ndarray):
        """The SQL parameter that writes ``vector`` [D] to ``videos.vector``."""

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

    # -- per-file claims (cooperating writers); the embedded catalog's writer lock makes every file its own -----
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
        """Make the catalog reflect the media files under ``paths`` (files, or folders searched recursively).

        New files are added, files whose content changed (SHA-256; files with unchanged size and mtime are not
        re-hashed) are re-embedded, and indexed files that vanished from under ``paths`` are dropped (a file indexed
        by name, whatever its extension, stays while it exists; other files of a folder that are not media are
        reported in ``skipped``); files under other roots are left alone, and so are files under a root that is
        absent (an unmounted disk does not empty the catalog). ``embed_fn(path)`` is called only for new or changed
        files whose content is not already indexed (a moved or copied file reuses its embeddings). A file that fails
        is recorded in ``failed`` and the rest go on. Work is committed every ``commit_every`` files or
        ``commit_seconds``: a crash keeps every committed file and a re-run continues from there.

        A different ``model_id`` than the stored one re-embeds everything under ``paths`` and drops every other
        video (embeddings of two models cannot be compared). ``exclusive``: the catalog is to hold exactly the files
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
            if plan.again:  # embedded afresh for the new model: files the index had, so updated
                report.updated.extend(p for p in report.added if p in plan.again)
                report.added = [p for p in report.added if p not in plan.again]
            report.removed.extend(self._local(s.path) for s in gone)
            self._fill_detail()
            self._fill_taken()
            self._synced()
        return report


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
        files = {os.fsencode(self.media_roots.stored(f)): f for f in walk.files}
        for path in stored.keys() - files.keys():  # indexed by name (another extension, hidden): still there, kept
            if _under(path, roots) and os.path.isfile(local := self._local(path)):
                files[path] = local
        kept = set(files.values())
        report.skipped.extend(s for s in walk.skipped if s[0] not in kept)
        found = set()
        todo = []
        for key, f in sorted(files.items(), key=lambda item: item[1]):
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
        again = frozenset(f for key, f in files.items() if key in stored) if model_changed else frozenset()
        return SyncPlan(todo, gone, list(stored.values()), model_changed, again)

    def _start_over(self, stored: list[StoredFile], model_id: str) -> None:
        """Another model's embeddings: drop every video (the vector index told) and the model's meta."""
        with self._transaction():
            self._exclusive()
            if self.model_id in (None, model_id):
                return  # another writer started over already
            logger.warning("%s: embedded by %s, not %s (the model, its feature recipe, the frames sampled a second "
                           "or the segmenting changed): re-embedding every file", self.location, self.model_id,
                           model_id)
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
                        if media.warning:
                            report.warnings.append((item.path, media.warning))
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

    def copy_from(self, source: CatalogSync, *, progress: bool = True, commit_every: int = 256) -> SyncReport:
        """Copy every video of ``source`` (another catalog, e.g. an embedded one into PostgreSQL) with everything
        stored for it — paths, sizes, hashes, vectors, frames, thumbnails, biases, the model id, the text cues, the
        settings — without reading a media file or running a model; a file already stored here is left as it is
        (``unchanged``). CatalogError when this catalog holds another model's embeddings."""
        report = SyncReport()
        model = source.model_id
        with self.writing(self.writer_wait), self._write_errors():
            if model is None:
                return report
            if self.model_id not in (None, model):
                raise CatalogError(f"{self.location} holds embeddings of another model ({self.model_id}) than "
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
        """Write a batch of sync results and removals in one transaction (one new generation): the new videos'
        rows and every written video's frames, frame vectors and segments as batches (``_insert_videos``,
        ``_write_media``)."""
        if not changes and not gone:
            return
        now = time.time()
        with self._transaction() as db:
            gen = self._next_generation()
            new, written, dim = [], [], self.dim
            for change in self._owned(changes):
                file, st, media = change.file, change.file.stat, change.media
                taken = change.taken or taken_at(file.path, st.st_mtime_ns / 1e9)
                if media is None:  # same content: only its size and mtime (and a date from the mtime) changed
                    db.execute("UPDATE videos SET size = ?, mtime_ns = ?, taken_at = ?, taken_from = ? WHERE id = ?",
                               (st.st_size, st.st_mtime_ns, *taken, file.stored.id))
                    continue
                if dim is None and media.pictured:
                    dim = media.video_vector.shape[0]
                    self._set_meta("dim", dim)
                    self._first_vector(dim)
                vector = np.asarray(media.video_vector, np.float32) if media.pictured else None  # NULL: no picture
                values = (st.st_size, st.st_mtime_ns, change.sha256, media.duration, len(media.timestamps), model_id,
                          now, gen, vector, float(media.bias), *taken)
                if file.stored is not None:
                    vid = file.stored.id
                    db.execute("UPDATE videos SET size=?, mtime_ns=?, sha256=?, duration=?, n_frames=?, model_id=?, "
                               "updated_at=?, gen=?, vector=?, bias=?, taken_at=?, taken_from=? WHERE id=?",
                               (*self._with_param(values), vid))
                    db.execute("DELETE FROM frames WHERE video_id = ?", (vid,))
                    written.append((vid, media, file.path))
                else:
                    new.append(((*values, os.fsencode(self.media_roots.stored(file.path)), now), media, file.path))
            ids = self._insert_videos([(values, path) for values, _, path in new])
            written.extend((vid, media, path) for vid, (_, media, path) in zip(ids, new, strict=True))
            self._write_media(written)
            for s in gone:
                db.execute("DELETE FROM videos WHERE id = ?", (s.id,))
            self._forget([s.id for s in gone], gen)
            self._set_meta("model_id", model_id)

    #: Where ``_INSERT``'s values hold the video's vector.
    _VECTOR_AT = 8

    def _with_param(self, values: tuple) -> tuple:
        """``values`` (of ``_INSERT``'s columns) with the vector (float32 [D] or None) as ``_vector_param``'s."""
        vector = values[self._VECTOR_AT]
        return (*values[:self._VECTOR_AT], None if vector is None else self._vector_param(vector),
                *values[self._VECTOR_AT + 1:])

    def _insert_videos(self, rows: list[tuple[tuple, str]]) -> list[int]:
        """INSERT new video rows ((values of ``_INSERT``'s columns, the vector as float32 [D] or None; the file's
        path)) in the open transaction, one statement each; their ids."""
        return [self._insert_video(self._with_param(values)) for values, _ in rows]

    def _write_media(self, written: list[tuple[int, EmbeddedMedia, str]]) -> None:
        """Each (video id, media, file path)'s frames, frame vectors and segments (``media_rows``), inside the
        commit's transaction, one statement per table and video."""
        for vid, media, _ in written:
            self._write_frames(vid, media)

    def _write_frames(self, vid: int, media: EmbeddedMedia) -> None:
        """A video's frames (times, thumbnails), frame vectors and segments (``media_rows``; none at all without a
        picture), inside the commit's transaction."""
        self._db.execute("DELETE FROM video_segments WHERE video_id = ?", (vid,))
        rows = media_rows(vid, media)
        if rows is None:
            self._db.execute("DELETE FROM frame_vectors WHERE video_id = ?", (vid,))
            return
        self._db.executemany("INSERT INTO frames (video_id, idx, t, thumbnail) VALUES (?, ?, ?, ?)", rows.frames)
        self._db.execute("INSERT INTO frame_vectors (video_id, vectors, times, detail) VALUES (?, ?, ?, ?) ON CONFLICT "
                         "(video_id) DO UPDATE SET vectors = excluded.vectors, times = excluded.times, "
                         "detail = excluded.detail", rows.frame_vectors)
        self._db.executemany(
            "INSERT INTO video_segments (video_id, ordinal, start, stop, first_frame, n_frames, vector, bias) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [(*r[:6], self._vector_param(r[6]), r[7]) for r in rows.segments])

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


class _Stat(NamedTuple):
    """The size and mtime of a file as stored (what a commit writes of its ``os.stat_result``)."""

    st_size: int
    st_mtime_ns: int


def _first_dim(changes: list[FileChange]) -> int | None:
    """The width of the first embedding in ``changes`` (the catalog's, before its first commit sets it)."""
    return next((int(c.media.video_vector.shape[0]) for c in changes if c.media is not None and c.media.pictured),
                None)


def _describe(exc: Exception) -> str:
    """A one-line problem description for the sync report."""
    if isinstance(exc, ReelsearchError):
        return getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"
