"""How the text cues are written: stored per video and cue (one transaction per video, a generation bump), copied
from a video with the same content or from another catalog's text cues, extracted where pending, pruned to the
catalog's videos. Mixed into ``reelsearch.index.textcues.TextCues``, whose hooks it writes through."""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.features.cues import CUES, CueResult, CueSegment
from reelsearch.index.textcue_records import CueReport, TextCueError, stored_segment


class TextCueWrites:
    """The writing half of ``TextCues``: ``pending``, ``put``, ``remove``, ``retain``, ``update``, ``prune``,
    ``copy_from`` (through its ``_transaction``, ``_insert``, ``_delete_segments``, ``_meta`` and ``encode``)."""

    def pending(self, video_id: str, recipes: Mapping[str, str], content: str | None = None) -> list[str]:
        """The cues of ``recipes`` that ``video_id`` still needs: never stored, stored with another recipe or for
        other ``content`` (e.g. the file's SHA-256), or failed last time (failures are retried)."""
        runs = self.runs(video_id)
        return [cue for cue, recipe in recipes.items()
                if cue not in runs or runs[cue].recipe != recipe or runs[cue].content != content
                or runs[cue].error is not None]

    _UPSERT_RUN = (" ON CONFLICT (video_id, cue) DO UPDATE SET recipe = excluded.recipe, content = excluded.content, "
                   "n_segments = excluded.n_segments, error = excluded.error, updated_at = excluded.updated_at")

    def put(self, video_id: str, results: Mapping[str, CueResult], content: str | None = None) -> None:
        """Store ``results`` (cue -> CueResult) for ``video_id`` in one transaction, replacing those cues' previous
        segments; a failed result stores its error (and no segments), other cues are untouched."""
        video_id = str(video_id)
        texts = [s.text for r in results.values() if r.ok for s in r.segments]
        vectors = self._embed(texts)
        rows, i = [], 0
        for cue, result in results.items():
            if cue not in CUES:
                raise TextCueError(f"{self.location}: unknown cue {cue!r}; known: {', '.join(CUES)}")
            for seg in result.segments if result.ok else []:
                rows.append((cue, seg, vectors[i]))
                i += 1
        now = time.time()
        with self._transaction():
            for cue in results:
                self._delete(video_id, cue)
            for cue, seg, vec in rows:
                self._insert(video_id, cue, seg, vec)
            for cue, result in results.items():
                self._db.execute("INSERT INTO runs (video_id, cue, recipe, content, n_segments, error, updated_at) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)" + self._UPSERT_RUN,
                                 (video_id, cue, result.recipe, content, len(result.segments) if result.ok else 0,
                                  result.error, now))

    def remove(self, video_ids: Iterable[str]) -> int:
        """Forget these videos (all cues), in one transaction; returns how many were stored."""
        ids = [str(v) for v in video_ids]
        found = 0
        with self._transaction():
            for vid in ids:
                found += self._db.execute("DELETE FROM runs WHERE video_id = ?", (vid,)).rowcount > 0
                self._delete(vid, None)
        return found

    def retain(self, video_ids: Iterable[str]) -> int:
        """Forget every video not in ``video_ids`` (e.g. the catalog's current ids); returns how many."""
        keep = {str(v) for v in video_ids}
        return self.remove([v for v in self.video_ids() if v not in keep])

    def update(self, items: Iterable[tuple[str, str | Path, str | None]], extractor, *,
               cues: Sequence[str] = CUES, progress: bool = True, workers: int = 2) -> CueReport:
        """Extract and store the pending cues of each ``(video_id, path, content)``, one transaction per video.

        ``extractor`` is a ``reelsearch.features.cues.CueExtractor``. Each (video, cue) is one task for ``workers``
        threads, a few videos ahead, so that on 2 cores one video's speech runs beside another's OCR (one model
        call at a time per model); videos are stored in order as their cues finish. Interrupting it loses at most
        the videos in progress; running it again skips every video already done (``pending``)."""
        report = CueReport()
        recipes = extractor.recipes(cues)
        items = list(items)
        bar = tqdm(total=len(items), desc="speech/text", unit="video", disable=not progress, file=sys.stderr)
        window: deque = deque()  # (video id, content, {cue: future}) in order
        pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="cue")
        try:
            for video_id, path, content in items:
                video_id = str(video_id)
                todo = self.pending(video_id, recipes, content)
                donors = {cue: d for cue in todo if (d := self._donor(video_id, cue, recipes[cue], content))}
                if donors:  # the same content stored under another id (a moved or copied file, a new model's ids)
                    self._copy(video_id, donors)
                    report.reused.append(video_id)
                    todo = [cue for cue in todo if cue not in donors]
                if not todo:
                    if not donors:
                        report.unchanged.append(video_id)
                    bar.update(1)
                    continue
                window.append((video_id, content, {cue: pool.submit(extractor.extract, path, [cue]) for cue in todo}))
                while len(window) > max(1, workers):
                    self._store(window.popleft(), report)
                    bar.update(1)
            while window:
                self._store(window.popleft(), report)
                bar.update(1)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        return report

    def _store(self, entry, report: CueReport) -> None:
        video_id, content, futures = entry
        results = {cue: f.result()[cue] for cue, f in futures.items()}
        self.put(video_id, results, content)
        report.extracted.append(video_id)
        for cue, res in results.items():
            report.seconds[cue] = report.seconds.get(cue, 0.0) + res.seconds
            if not res.ok:
                report.failed.append((video_id, cue, res.error or ""))

    def prune(self, contents: Mapping[str, str]) -> int:
        """Keep the text cues in step with a catalog: ``contents`` maps every current video id to its content key.
        Videos not in it are forgotten, and so are cues stored for other content (a changed file whose cue was not
        extracted again); returns how many videos were touched."""
        stale = {vid for vid, content in self._db.execute("SELECT video_id, content FROM runs")
                 if vid not in contents or content != contents[vid]}
        if not stale:
            return 0
        with self._transaction():
            for vid in stale:
                if vid not in contents:
                    self._db.execute("DELETE FROM runs WHERE video_id = ?", (vid,))
                    self._delete(vid, None)
                    continue
                for (cue,) in self._db.execute("SELECT cue FROM runs WHERE video_id = ? AND (content IS NULL OR "
                                               "content <> ?)", (vid, contents[vid])).fetchall():
                    self._delete(vid, cue)
        return len(stale)

    def _donor(self, video_id: str, cue: str, recipe: str, content: str | None) -> str | None:
        """Another video whose ``cue`` was stored without error, by ``recipe``, for the same ``content``."""
        if content is None:
            return None
        row = self._db.execute("SELECT video_id FROM runs WHERE cue = ? AND recipe = ? AND content = ? AND "
                               "error IS NULL AND video_id <> ? LIMIT 1", (cue, recipe, content, video_id)).fetchone()
        return row[0] if row else None

    def _copy(self, video_id: str, donors: Mapping[str, str]) -> None:
        """Copy each cue's segments and run from ``donors[cue]`` to ``video_id``, in one transaction."""
        now = time.time()
        with self._transaction():
            for cue, donor in donors.items():
                self._delete(video_id, cue)
                rows = self._db.execute('SELECT start, "end", text, confidence, extra, embedding FROM segments '
                                        "WHERE video_id = ? AND cue = ? ORDER BY id", (donor, cue)).fetchall()
                for start, end, text, conf, extra, blob in rows:
                    self._insert(video_id, cue, stored_segment(cue, start, end, text, conf, extra),
                                 np.frombuffer(blob, np.float16))
                self._db.execute("INSERT INTO runs (video_id, cue, recipe, content, n_segments, error, updated_at) "
                                 "SELECT ?, cue, recipe, content, n_segments, error, ? FROM runs WHERE video_id = ? "
                                 "AND cue = ?" + self._UPSERT_RUN, (video_id, now, donor, cue))

    def copy_from(self, source: TextCueWrites, ids: Mapping[str, str]) -> int:
        """Copy the runs and segments (with their stored embeddings: nothing is extracted or embedded again) of each
        video ``old`` of ``source`` to video ``ids[old]`` here, one transaction per video; how many were copied."""
        dim = source._meta("dim")
        if dim is not None:
            stored = self._meta("dim")
            if stored is not None and stored != dim:
                raise TextCueError(f"{self.location}: holds {stored}-d embeddings, {source.location} {dim}-d")
        copied = 0
        for old in source.video_ids():
            if old not in ids:
                continue
            new = str(ids[old])
            rows = source._db.execute('SELECT cue, start, "end", text, confidence, extra, embedding FROM segments '
                                      "WHERE video_id = ? ORDER BY id", (old,)).fetchall()
            runs = source._db.execute("SELECT cue, recipe, content, n_segments, error, updated_at FROM runs "
                                      "WHERE video_id = ?", (old,)).fetchall()
            with self._transaction():
                if dim is not None:
                    self._db.execute(f"INSERT INTO {self.META} (key, value) VALUES ('dim', ?) ON CONFLICT (key) "
                                     "DO NOTHING", (dim,))
                self._delete(new, None)
                self._db.execute("DELETE FROM runs WHERE video_id = ?", (new,))
                for cue, start, end, text, conf, extra, blob in rows:
                    self._insert(new, cue, stored_segment(cue, start, end, text, conf, extra),
                                 np.frombuffer(bytes(blob), np.float16))
                self._db.executemany("INSERT INTO runs (video_id, cue, recipe, content, n_segments, error, "
                                     "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)", [(new, *r) for r in runs])
            copied += 1
        return copied

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 1), np.float16)
        vectors = self.encode(texts)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise TextCueError(f"{self.location}: the encoder returned {vectors.shape} for {len(texts)} texts")
        stored = self._meta("dim")
        if stored is None:
            self._db.execute(f"INSERT INTO {self.META} (key, value) VALUES ('dim', ?) ON CONFLICT (key) DO NOTHING",
                             (str(vectors.shape[1]),))
        elif int(stored) != vectors.shape[1]:
            raise TextCueError(f"{self.location}: the index holds {stored}-d embeddings, the encoder gives "
                               f"{vectors.shape[1]}-d; use the same encoder or delete the segments to rebuild")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float16)

    def _delete(self, video_id: str, cue: str | None) -> None:
        where, args = ("video_id = ?", (video_id,)) if cue is None else ("video_id = ? AND cue = ?", (video_id, cue))
        self._delete_segments(where, args)
        if cue is not None:
            self._db.execute("DELETE FROM runs WHERE video_id = ? AND cue = ?", (video_id, cue))

    @staticmethod
    def _extra(seg: CueSegment) -> str | None:
        """A segment's box or word times as the ``extra`` column's JSON."""
        extra = {}
        if seg.box is not None:
            extra["box"] = list(seg.box)
        if seg.words:
            extra["words"] = [list(w) for w in seg.words]
        return json.dumps(extra) if extra else None
