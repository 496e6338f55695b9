"""TextCueIndex: the speech transcripts and on-screen text of a library's videos, stored and scored by keyword and
meaning.

Layout: ``DIR/textcues.sqlite`` (SQLite, WAL), beside the library index::

    segments(id, video_id, cue, start, end, text, confidence, extra JSON (box / words), embedding float16 [384])
    words    FTS5 over segments.text, Porter-stemmed unicode61 words       (every segment)
    chars    FTS5 over segments.text, trigrams: substring matches          (OCR segments: OCR often drops spaces)
    runs(video_id, cue, recipe, content, n_segments, error, updated_at)    what was extracted, with what, and how
    meta(key, value)                                                       schema, generation, embedding size

``scores`` gives, per video and cue, the **keyword score** (``reelsearch.index.keyword``: normalised BM25 over FTS5)
and the **semantic score** (``reelsearch.index.semantic``: the best cosine of the query's sentence embedding with the
video's segments), each with the segment behind it. The index runs no text encoder: it is given one (``encoder``,
a callable ``texts -> [N, D]``) to embed what it stores. How a cue's two scores become the cue's expert score and
how that is fused with the picture is search's business (``reelsearch.search.cues``, ``reelsearch.search.fusion``).

Writes are one transaction per video (all cues of that video, a generation bump), so a crash never leaves half a
video; ``pending`` tells which cues a video still needs, so an interrupted ``update`` resumes where it stopped.

``TextCues`` holds all of this once; ``TextCueIndex`` keeps it in SQLite, ``reelsearch.index.pg.PgTextCues`` in
PostgreSQL (the same tables, a ``tsvector`` for the words): each fills in how segments are written, found by a word,
and highlighted.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import sys
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.errors import ReelsearchError
from reelsearch.features.cues import CUES, CueResult, CueSegment
from reelsearch.index.keyword import WORDS_TOKENIZER, contains, fts_term_rows, keyword_scores, query_terms, word_moment
from reelsearch.index.keyword import highlights as segment_highlights
from reelsearch.index.segments import SegmentCache
from reelsearch.index.semantic import semantic_scores
from reelsearch.index.sqlite import SqliteDb

#: A sentence encoder: texts -> [N, D] embeddings (MiniLM for search; anything deterministic in tests).
Encoder = Callable[[Sequence[str]], np.ndarray]

SQLITE_NAME = "textcues.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY,
    video_id TEXT NOT NULL,
    cue TEXT NOT NULL,
    start REAL NOT NULL,
    "end" REAL NOT NULL,
    text TEXT NOT NULL,
    confidence REAL NOT NULL,
    extra TEXT,                    -- JSON: {{"box": [...]}} or {{"words": [[start, end, word], ...]}}
    embedding BLOB NOT NULL        -- float16 [dim], L2-normalised
);
CREATE INDEX IF NOT EXISTS segments_video ON segments (video_id, cue);
CREATE TABLE IF NOT EXISTS runs (
    video_id TEXT NOT NULL,
    cue TEXT NOT NULL,
    recipe TEXT NOT NULL,
    content TEXT,
    n_segments INTEGER NOT NULL,
    error TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (video_id, cue)
);
CREATE VIRTUAL TABLE IF NOT EXISTS words USING fts5(text, tokenize='{WORDS_TOKENIZER}');
CREATE VIRTUAL TABLE IF NOT EXISTS chars USING fts5(text, tokenize='trigram');
"""


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
    segment: int = field(default=-1, compare=False)  # the segment's row id (for ``TextCueIndex.highlights``)

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "segment"}


@dataclass
class CueScores:
    """One query's scores for the videos ``ids`` (arrays aligned with ``ids``; 0 = no evidence).

    ``keyword[cue]`` / ``semantic[cue]``: float32 [N] in [0, 1]; ``keyword_best[cue][i]`` / ``semantic_best[cue][i]``:
    the segment behind video i's score (None where the score is 0), read from the index when asked for, so scoring
    every video of a large index costs no row reads.
    """

    query: str
    ids: list[str]
    keyword: dict[str, np.ndarray]
    semantic: dict[str, np.ndarray]
    keyword_best: dict[str, Sequence[SegmentMatch | None]]
    semantic_best: dict[str, Sequence[SegmentMatch | None]]
    positions: Mapping[str, int] = field(default_factory=dict)  # video id -> its position in ids


class _Matches(Sequence):
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
    """Outcome of :meth:`TextCueIndex.update`: video ids extracted, copied from a video with the same content
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


class TextCues(ABC):
    """Transcript and on-screen-text segments of videos, with keyword and meaning (embedding) scores, in a SQL
    database (``?`` parameters; the tables of the module docstring, ``META`` the meta table's name).

    ``encoder``: ``texts -> [N, D]`` sentence embeddings of what is stored (search gives MiniLM's,
    ``reelsearch.search.cues.sentence_encoder``); only writing segments and scoring a query given as text need it.
    One object is used by one thread at a time (the Searcher's lock serialises it); several processes may read while
    one writes.
    """

    META = "meta"
    _db = None  # a connection with sqlite3's execute / executemany
    _encoder: Encoder | None = None
    _cache: SegmentCache | None = None
    _stored: tuple[int, list[str]] | None = None  # (generation, stored_cues())

    # ------------------------------------------------------------------- what each database implements
    @property
    @abstractmethod
    def location(self) -> str:
        """Where the segments are, as messages show it (a file, or a database URL without its password)."""

    @abstractmethod
    def _write(self) -> contextlib.AbstractContextManager:
        """One write transaction (rolled back on any exception; TextCueError when it cannot begin)."""

    @abstractmethod
    def _insert(self, video_id: str, cue: str, seg: CueSegment, vector: np.ndarray) -> None:
        """Store one segment (with what finds it by word) in the open transaction."""

    @abstractmethod
    def _delete_segments(self, where: str, args: tuple) -> None:
        """Delete the segments ``WHERE where`` (and what finds them by word), in the open transaction."""

    @abstractmethod
    def _term_rows(self, term: str) -> set[int]:
        """Ids of the segments a query word matches (``reelsearch.index.keyword``'s rules)."""

    @abstractmethod
    def highlights(self, segment: int, query: str) -> list[tuple[int, int]]:
        """Where ``query``'s words occur in the stored segment ``segment`` (``SegmentMatch.segment``), as [start, end)
        character offsets (code points), by the keyword rules (``reelsearch.index.keyword.highlights``)."""

    @abstractmethod
    def close(self) -> None: ...

    # ------------------------------------------------------------------------------------------ lifecycle
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``texts`` embedded by the encoder this index was given (TextCueError without one)."""
        if self._encoder is None:
            raise TextCueError(f"{self.location}: no sentence encoder given to embed text (TextCueIndex(..., "
                               "encoder=))")
        return np.asarray(self._encoder(list(texts)), dtype=np.float32)

    @property
    def generation(self) -> int:
        """Bumped by every committed write (readers reload their embedding cache when it moves)."""
        return int(self._meta("generation") or 0)

    def _meta(self, key: str) -> str | None:
        row = self._db.execute(f"SELECT value FROM {self.META} WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @contextlib.contextmanager
    def _transaction(self):
        """A write transaction that bumps the generation."""
        with self._write():
            yield
            self._db.execute(f"INSERT INTO {self.META} (key, value) VALUES ('generation', '1') ON CONFLICT (key) "
                             f"DO UPDATE SET value = CAST(CAST({self.META}.value AS INTEGER) + 1 AS TEXT)")

    # -------------------------------------------------------------------------------------------- writing
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
        """Forget every video not in ``video_ids`` (e.g. the library's current ids); returns how many."""
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
        """Keep the index in step with a library: ``contents`` maps every current video id to its content key.
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

    def stored_cues(self) -> list[str]:
        """The cues stored for at least one video (in CUES order)."""
        gen = self.generation
        if self._stored is None or self._stored[0] != gen:
            self._stored = (gen, [c for c in CUES if self._db.execute("SELECT 1 FROM runs WHERE cue = ? LIMIT 1",
                                                                        (c,)).fetchone()])
        return list(self._stored[1])

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
                    self._insert(video_id, cue, _segment(cue, start, end, text, conf, extra),
                                 np.frombuffer(blob, np.float16))
                self._db.execute("INSERT INTO runs (video_id, cue, recipe, content, n_segments, error, updated_at) "
                                 "SELECT ?, cue, recipe, content, n_segments, error, ? FROM runs WHERE video_id = ? "
                                 "AND cue = ?" + self._UPSERT_RUN, (video_id, now, donor, cue))

    def copy_from(self, source: TextCues, ids: Mapping[str, str]) -> int:
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
                    self._insert(new, cue, _segment(cue, start, end, text, conf, extra),
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

    # -------------------------------------------------------------------------------------------- reading
    def video_ids(self) -> list[str]:
        """Every video with a stored run of any cue."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT video_id FROM runs ORDER BY video_id")]

    def runs(self, video_id: str) -> dict[str, CueRun]:
        """cue -> what is stored for ``video_id``."""
        rows = self._db.execute("SELECT cue, recipe, content, n_segments, error FROM runs WHERE video_id = ?",
                                (str(video_id),))
        return {cue: CueRun(recipe, content, n, err) for cue, recipe, content, n, err in rows}

    def segments(self, video_id: str, cues: Sequence[str] = CUES) -> list[CueSegment]:
        """The stored segments of ``video_id`` (the cues asked for), in time order."""
        marks = ",".join("?" * len(cues))
        rows = self._db.execute(
            f'SELECT cue, start, "end", text, confidence, extra FROM segments WHERE video_id = ? AND cue IN ({marks}) '
            "ORDER BY start, id", (str(video_id), *cues))
        return [_segment(*row) for row in rows]

    def with_cue(self, cue: str) -> set[str]:
        """The videos with at least one segment of ``cue`` (something said, something written)."""
        return {r[0] for r in self._db.execute("SELECT DISTINCT video_id FROM segments WHERE cue = ?", (cue,))}

    def containing(self, phrase: str, cues: Sequence[str] = CUES) -> set[str]:
        """The videos one of whose segments of ``cues`` says ``phrase`` word for word: case-insensitive, whitespace
        between words as it comes, not inside a longer word (``oven`` is not found in ``ovens``)."""
        words = phrase.lower().split()
        if not words:
            return set()
        pattern = re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, words)) + r"(?!\w)")
        marks = ",".join("?" * len(cues))
        rows = self._db.execute(f"SELECT video_id, text FROM segments WHERE cue IN ({marks}) AND lower(text) LIKE ?",
                                (*cues, f"%{words[0]}%"))
        return {v for v, text in rows if pattern.search(text.lower())}

    def scores(self, query: str, video_ids: Sequence[str] | None = None, cues: Sequence[str] = CUES, *,
               query_vector: np.ndarray | None = None) -> CueScores:
        """Keyword and semantic scores of ``query`` for ``video_ids`` (default: every video with segments).

        ``query_vector``: the query's sentence embedding when the caller has it already (else the encoder makes it).
        Costs one word lookup per query word and one matrix-vector product over every stored segment embedding;
        the segments behind the scores are read only when asked for (``keyword_best`` / ``semantic_best``).
        """
        if not query or not query.strip():
            raise TextCueError("empty query")
        cues = list(cues)
        cache = self._segments()
        if video_ids is None:
            ids, positions = cache.video_ids, cache.video_index
            slot = np.arange(len(ids), dtype=np.int64)  # cache video index -> position in ids
        else:
            ids = [str(v) for v in video_ids]
            positions = {v: i for i, v in enumerate(ids)}
            slot = np.full(len(cache.video_ids), -1, np.int64)
            for v, i in positions.items():
                j = cache.video_index.get(v)
                if j is not None:
                    slot[j] = i
        terms = query_terms(query)
        kw, kw_pos, kw_score, matched = keyword_scores(self._term_rows, terms, cache, slot, len(ids), cues)
        q = self.encode([query])[0] if query_vector is None else np.asarray(query_vector, np.float32).reshape(-1)
        if len(cache.rows) and q.shape[0] != cache.vectors.shape[1]:
            raise TextCueError(f"{self.location}: a {q.shape[0]}-d query vector for {cache.vectors.shape[1]}-d "
                               "segments")
        sem, sem_pos, cos = semantic_scores(q, cache, slot, len(ids), cues)

        def keyword_match(p: int) -> SegmentMatch:
            found = {t for t, pos in matched.items() if contains(pos, p)}
            return self._match(cache, p, found, round(float(kw_score[p]), 6), "keyword")

        def semantic_match(p: int) -> SegmentMatch:
            return self._match(cache, p, set(terms), round(float(cos[p]), 6), "semantic")

        return CueScores(query, list(ids), kw, sem, {c: _Matches(kw_pos[c], keyword_match) for c in cues},
                         {c: _Matches(sem_pos[c], semantic_match) for c in cues}, positions)

    def _match(self, cache: SegmentCache, position: int, terms: set[str], score: float, how: str) -> SegmentMatch:
        rowid = int(cache.rows[position])
        row = self._db.execute('SELECT cue, start, "end", text, confidence, extra FROM segments WHERE id = ?',
                               (rowid,)).fetchone()
        if row is None:  # deleted since the cache was read
            cue = CUES[int(cache.cues[position])]
            return SegmentMatch(cue, float(cache.starts[position]), float(cache.starts[position]), "", score, how,
                                float(cache.starts[position]), rowid)
        seg = _segment(*row)
        return SegmentMatch(seg.cue, seg.start, seg.end, seg.text, score, how, word_moment(seg, terms), rowid)

    def _segments(self) -> SegmentCache:
        """Every segment in memory (reloaded when another write moved the generation)."""
        gen = self.generation
        if self._cache is None or self._cache.generation != gen:
            self._cache = SegmentCache.load(self._db, gen)
        return self._cache

    def segment_count(self) -> int:
        """How many segments the index holds (as last loaded for scoring)."""
        return len(self._segments().rows)


class TextCueIndex(TextCues):
    """The text cues of the embedded index: ``DIR/textcues.sqlite`` (WAL), words found by FTS5 (Porter-stemmed words
    in ``words``, trigrams of OCR text in ``chars``).

    ``directory``: the index folder (created). Several processes may read while one writes (WAL).
    """

    def __init__(self, directory: str | Path, *, encoder: Encoder | None = None):
        self.directory = Path(directory).expanduser()
        self.path = self.directory / SQLITE_NAME
        self._encoder = encoder
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = SqliteDb(self.path, self.directory, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise TextCueError(f"{self.path}: cannot open the text-cue index ({exc})") from None
        self._check_schema()

    @property
    def location(self) -> str:
        return str(self.path)

    def close(self) -> None:
        self._db.close()

    def _check_schema(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise TextCueError(f"{self.path}: schema version {row[0]}, this reelsearch reads {SCHEMA_VERSION}; "
                               "delete the file to rebuild it")

    @contextlib.contextmanager
    def _write(self):
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise TextCueError(f"{self.path}: cannot write ({exc})") from None
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _delete_segments(self, where: str, args: tuple) -> None:
        ids = [r[0] for r in self._db.execute(f"SELECT id FROM segments WHERE {where}", args)]
        for table in ("words", "chars", "segments"):
            key = "id" if table == "segments" else "rowid"
            self._db.executemany(f"DELETE FROM {table} WHERE {key} = ?", [(i,) for i in ids])

    def _insert(self, video_id: str, cue: str, seg: CueSegment, vector: np.ndarray) -> None:
        cur = self._db.execute(
            'INSERT INTO segments (video_id, cue, start, "end", text, confidence, extra, embedding) '
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (video_id, cue, float(seg.start), float(seg.end), seg.text, float(seg.confidence), self._extra(seg),
             vector.tobytes()))
        self._db.execute("INSERT INTO words (rowid, text) VALUES (?, ?)", (cur.lastrowid, seg.text))
        if cue == "ocr":
            self._db.execute("INSERT INTO chars (rowid, text) VALUES (?, ?)", (cur.lastrowid, seg.text))

    def _term_rows(self, term: str) -> set[int]:
        return fts_term_rows(self._db, term)

    def highlights(self, segment: int, query: str) -> list[tuple[int, int]]:
        return segment_highlights(self._db, segment, query)


def _segment(cue, start, end, text, confidence, extra) -> CueSegment:
    data = json.loads(extra) if extra else {}
    box = tuple(data["box"]) if "box" in data else None
    words = tuple((float(a), float(b), str(w)) for a, b, w in data["words"]) if "words" in data else None
    return CueSegment(cue, float(start), float(end), text, float(confidence), box, words)
