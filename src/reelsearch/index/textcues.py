"""TextCueIndex: the speech transcripts and on-screen text of a library's videos, searchable by keyword and meaning.

Layout: ``DIR/textcues.sqlite`` (SQLite, WAL), beside the library index::

    segments(id, video_id, cue, start, end, text, confidence, extra JSON (box / words), embedding float16 [384])
    words    FTS5 over segments.text, Porter-stemmed unicode61 words       (every segment)
    chars    FTS5 over segments.text, trigrams: substring matches          (OCR segments: OCR often drops spaces)
    runs(video_id, cue, recipe, content, n_segments, error, updated_at)    what was extracted, with what, and how
    meta(key, value)                                                       schema, generation, embedding size

**Keyword score** (per video and cue, in [0, 1]): the best segment's BM25 with k1 = 0, divided by the query's
maximum: ``sum(idf(t) for query terms t in the segment) / sum(idf(t) for all query terms)``, with BM25's
``idf(t) = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))`` over the N segments. Segments are sentences and text lines, so
term frequency and length normalisation (what k1 and b control) hardly matter; k1 = 0 makes the score bounded and
comparable across queries: 1 = every query word is in one segment, rare words weigh more than common ones. English
stop words are left out of the query unless it has nothing else. A word matches a stemmed word of a segment, or, in
OCR text and for words of 4+ characters, any substring (``forecast`` in ``WEATHERFORECAST``).

**Semantic score** (per video and cue, in [0, 1]): the highest cosine between the query's MiniLM sentence
embedding and the video's segments' embeddings, clamped at 0.

Writes are one transaction per video (all cues of that video, a generation bump), so a crash never leaves half a
video; ``pending`` tells which cues a video still needs, so an interrupted ``update`` resumes where it stopped.
The scores are fused with the visual experts by ``reelsearch.evaluation.fusion.score_fusion`` / ``rank_fusion``
(``CueScores.rows`` gives them as 1 x N score matrices, one per cue and kind).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.evaluation.fusion import score_fusion
from reelsearch.features.cues import CUES, CueResult, CueSegment

SQLITE_NAME = "textcues.sqlite"
SCHEMA_VERSION = 1
#: (keyword, semantic) weights of a cue's two scores when they are summed into the cue's expert score: the best
#: mean R@1 over paraphrase and exact-words queries on Flickr8k dev captions (benchmarks/bench_cues.py --weights).
DEFAULT_WEIGHTS = (1.0, 2.0)
SUBSTRING_MIN = 4  # query words at least this long also match inside OCR text (missing spaces)
STOP_WORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her his i in into is it its me my no "
    "not of on or our she so than that the their them then there these they this those to us was we were what when "
    "where which while who will with you your".split())

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY,
    video_id TEXT NOT NULL,
    cue TEXT NOT NULL,
    start REAL NOT NULL,
    end REAL NOT NULL,
    text TEXT NOT NULL,
    confidence REAL NOT NULL,
    extra TEXT,                    -- JSON: {"box": [...]} or {"words": [[start, end, word], ...]}
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
CREATE VIRTUAL TABLE IF NOT EXISTS words USING fts5(text, tokenize='porter unicode61 remove_diacritics 2');
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

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class CueScores:
    """One query's scores for the videos ``ids`` (arrays aligned with ``ids``; 0 = no evidence).

    ``keyword[cue]`` / ``semantic[cue]``: float32 [N] in [0, 1]; ``keyword_best`` / ``semantic_best``: the segment
    behind each score (None where the score is 0).
    """

    query: str
    ids: list[str]
    keyword: dict[str, np.ndarray]
    semantic: dict[str, np.ndarray]
    keyword_best: dict[str, list[SegmentMatch | None]]
    semantic_best: dict[str, list[SegmentMatch | None]]

    def rows(self) -> dict[str, np.ndarray]:
        """``"speech.keyword"``, ``"speech.semantic"``, ... -> [1, N] score matrices (one query), for
        ``score_fusion`` / ``rank_fusion`` with the visual experts' [1, N] rows."""
        out = {}
        for cue in self.keyword:
            out[f"{cue}.keyword"] = self.keyword[cue][None, :]
            out[f"{cue}.semantic"] = self.semantic[cue][None, :]
        return out

    def expert(self, cue: str, weights: Sequence[float] = DEFAULT_WEIGHTS) -> np.ndarray:
        """The cue's expert score [N]: its keyword and semantic scores fused by ``score_fusion`` with ``weights``."""
        if not self.ids:
            return np.zeros(0, np.float32)
        rows = [self.keyword[cue][None, :], self.semantic[cue][None, :]]
        return np.asarray(score_fusion(rows, weights))[0]

    def match(self, i: int, cue: str, weights: Sequence[float] = DEFAULT_WEIGHTS) -> SegmentMatch | None:
        """The segment behind video ``i``'s expert score for ``cue``: the keyword one when it is also the closest in
        meaning (its words are the evidence), else whichever contributes more under ``weights``."""
        key, sem = self.keyword_best[cue][i], self.semantic_best[cue][i]
        if key is None or sem is None:
            return key or sem
        if (key.start, key.text) == (sem.start, sem.text):
            return key
        return key if weights[0] * key.score >= weights[1] * sem.score else sem


@dataclass(frozen=True)
class CueHit:
    """A video found by :meth:`TextCueIndex.search`: fused ``score``, per-cue expert scores, the best segment."""

    video_id: str
    score: float
    experts: dict[str, float]
    match: SegmentMatch | None


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
    """Outcome of :meth:`TextCueIndex.update`."""

    extracted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (video_id, cue, error)
    seconds: dict[str, float] = field(default_factory=dict)  # cue -> extraction wall time

    def summary(self) -> str:
        return f"{len(self.extracted)} extracted, {len(self.unchanged)} unchanged, {len(self.failed)} cue failures"


class TextCueIndex:
    """Transcript and on-screen-text segments of videos, with keyword (FTS5) and meaning (MiniLM) search.

    ``directory``: the index folder (created). ``encoder``: anything with ``sentence_features(texts) -> [N, D]``
    unit vectors and ``dim`` (default: ``reelsearch.text.minilm.MiniLMEncoder``, created on first use). One object
    is used by one thread at a time (as the library index: the Searcher's lock serialises it); several processes
    may read while one writes (WAL).
    """

    def __init__(self, directory: str | Path, *, encoder=None):
        self.directory = Path(directory).expanduser()
        self.path = self.directory / SQLITE_NAME
        self._encoder = encoder
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise TextCueError(f"{self.path}: cannot open the text-cue index ({exc})") from None
        self._check_schema()
        self._cache: _EmbeddingCache | None = None

    # ------------------------------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TextCueIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def encoder(self):
        if self._encoder is None:
            from reelsearch.text.minilm import MiniLMEncoder

            self._encoder = MiniLMEncoder()
        return self._encoder

    @property
    def generation(self) -> int:
        """Bumped by every committed write (readers reload their embedding cache when it moves)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def _check_schema(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise TextCueError(f"{self.path}: schema version {row[0]}, this reelsearch reads {SCHEMA_VERSION}; "
                               "delete the file to rebuild it")

    # -------------------------------------------------------------------------------------------- writing
    def pending(self, video_id: str, recipes: Mapping[str, str], content: str | None = None) -> list[str]:
        """The cues of ``recipes`` that ``video_id`` still needs: never stored, stored with another recipe or for
        other ``content`` (e.g. the file's SHA-256), or failed last time (failures are retried)."""
        runs = self.runs(video_id)
        return [cue for cue, recipe in recipes.items()
                if cue not in runs or runs[cue].recipe != recipe or runs[cue].content != content
                or runs[cue].error is not None]

    def put(self, video_id: str, results: Mapping[str, CueResult], content: str | None = None) -> None:
        """Store ``results`` (cue -> CueResult) for ``video_id`` in one transaction, replacing those cues' previous
        segments; a failed result stores its error (and no segments), other cues are untouched."""
        video_id = str(video_id)
        texts = [s.text for r in results.values() if r.ok for s in r.segments]
        vectors = self._embed(texts)
        rows, i = [], 0
        for cue, result in results.items():
            if cue not in CUES:
                raise TextCueError(f"{self.path}: unknown cue {cue!r}; known: {', '.join(CUES)}")
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
                self._db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
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
               cues: Sequence[str] = CUES, progress: bool = True) -> CueReport:
        """Extract and store the pending cues of each ``(video_id, path, content)``, one transaction per video.

        ``extractor`` is a ``reelsearch.features.cues.CueExtractor``. Interrupting it loses at most the video in
        progress; running it again skips every video already done (``pending``)."""
        from tqdm import tqdm

        report = CueReport()
        recipes = extractor.recipes(cues)
        items = list(items)
        for video_id, path, content in tqdm(items, desc="speech/text", unit="video", disable=not progress,
                                            file=sys.stderr):
            todo = self.pending(str(video_id), recipes, content)
            if not todo:
                report.unchanged.append(str(video_id))
                continue
            results = extractor.extract(path, todo)
            self.put(str(video_id), results, content)
            report.extracted.append(str(video_id))
            for cue, res in results.items():
                report.seconds[cue] = report.seconds.get(cue, 0.0) + res.seconds
                if not res.ok:
                    report.failed.append((str(video_id), cue, res.error or ""))
        return report

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 1), np.float16)
        vectors = np.asarray(self.encoder.sentence_features(texts), dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise TextCueError(f"{self.path}: the encoder returned {vectors.shape} for {len(texts)} texts")
        stored = self._meta("dim")
        if stored is None:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('dim', ?)", (str(vectors.shape[1]),))
        elif int(stored) != vectors.shape[1]:
            raise TextCueError(f"{self.path}: the index holds {stored}-d embeddings, the encoder gives "
                               f"{vectors.shape[1]}-d; use the same encoder or delete the file to rebuild")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float16)

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _transaction(self):
        return _Transaction(self)

    def _delete(self, video_id: str, cue: str | None) -> None:
        where, args = ("video_id = ?", (video_id,)) if cue is None else ("video_id = ? AND cue = ?", (video_id, cue))
        ids = [r[0] for r in self._db.execute(f"SELECT id FROM segments WHERE {where}", args)]
        for table in ("words", "chars", "segments"):
            key = "id" if table == "segments" else "rowid"
            self._db.executemany(f"DELETE FROM {table} WHERE {key} = ?", [(i,) for i in ids])
        if cue is not None:
            self._db.execute("DELETE FROM runs WHERE video_id = ? AND cue = ?", (video_id, cue))

    def _insert(self, video_id: str, cue: str, seg: CueSegment, vector: np.ndarray) -> None:
        extra = {}
        if seg.box is not None:
            extra["box"] = list(seg.box)
        if seg.words:
            extra["words"] = [list(w) for w in seg.words]
        cur = self._db.execute(
            "INSERT INTO segments (video_id, cue, start, end, text, confidence, extra, embedding) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (video_id, cue, float(seg.start), float(seg.end), seg.text, float(seg.confidence),
             json.dumps(extra) if extra else None, vector.tobytes()))
        self._db.execute("INSERT INTO words (rowid, text) VALUES (?, ?)", (cur.lastrowid, seg.text))
        if cue == "ocr":
            self._db.execute("INSERT INTO chars (rowid, text) VALUES (?, ?)", (cur.lastrowid, seg.text))

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
            f"SELECT cue, start, end, text, confidence, extra FROM segments WHERE video_id = ? AND cue IN ({marks}) "
            "ORDER BY start, id", (str(video_id), *cues))
        return [_segment(*row) for row in rows]

    def scores(self, query: str, video_ids: Sequence[str] | None = None,
               cues: Sequence[str] = CUES) -> CueScores:
        """Keyword and semantic scores of ``query`` for ``video_ids`` (default: every video with segments)."""
        if not query or not query.strip():
            raise TextCueError("empty query")
        cues = list(cues)
        cache = self._embeddings()
        ids = cache.video_ids if video_ids is None else [str(v) for v in video_ids]
        position = {v: i for i, v in enumerate(ids)}
        out = CueScores(query, ids, {}, {}, {}, {})
        for cue in cues:
            out.keyword[cue] = np.zeros(len(ids), np.float32)
            out.semantic[cue] = np.zeros(len(ids), np.float32)
            out.keyword_best[cue] = [None] * len(ids)
            out.semantic_best[cue] = [None] * len(ids)
        terms = query_terms(query)
        self._keyword(terms, position, out)
        self._semantic(query, terms, cache, position, out)
        return out

    def search(self, query: str, k: int = 10, *, cues: Sequence[str] = CUES,
               weights: Mapping[str, Sequence[float]] | None = None) -> list[CueHit]:
        """The ``k`` videos whose speech / on-screen text best match ``query``, by the sum over ``cues`` of each
        cue's expert score (``CueScores.expert`` with ``weights[cue]``, default ``DEFAULT_WEIGHTS``). Videos with
        no evidence at all (every score 0) are not returned."""
        sc = self.scores(query, cues=cues)
        if not sc.ids:
            return []
        w = {cue: (weights or {}).get(cue, DEFAULT_WEIGHTS) for cue in cues}
        experts = {cue: sc.expert(cue, w[cue]) for cue in cues}
        total = np.asarray(score_fusion([experts[c][None, :] for c in cues]))[0]
        order = [i for i in np.argsort(-total, kind="stable") if total[i] > 0][:k]
        hits = []
        for i in order:
            best_cue = max(cues, key=lambda c: experts[c][i])
            hits.append(CueHit(sc.ids[i], float(total[i]), {c: float(experts[c][i]) for c in cues},
                               sc.match(i, best_cue, w[best_cue])))
        return hits

    # ---------------------------------------------------------------------------------------- scoring
    def _keyword(self, terms: list[str], position: dict[str, int], out: CueScores) -> None:
        if not terms:
            return
        n_total = self._db.execute("SELECT count(*) FROM segments").fetchone()[0]
        hits = {t: self._term_rows(t) for t in terms}
        idf = {t: math.log(1.0 + (n_total - len(r) + 0.5) / (len(r) + 0.5)) for t, r in hits.items()}
        denominator = sum(idf.values())
        matched: dict[int, set[str]] = {}
        for t, rows in hits.items():
            for rowid in rows:
                matched.setdefault(rowid, set()).add(t)
        for rowid, video_id, cue, start, end, text, conf, extra in self._rows(matched):
            i = position.get(video_id)
            if i is None or cue not in out.keyword:
                continue
            score = sum(idf[t] for t in matched[rowid]) / denominator
            best = out.keyword_best[cue][i]
            if score > out.keyword[cue][i] + 1e-9 or (abs(score - out.keyword[cue][i]) <= 1e-9 and best is not None
                                                      and start < best.start):
                out.keyword[cue][i] = score
                seg = _segment(cue, start, end, text, conf, extra)
                out.keyword_best[cue][i] = SegmentMatch(cue, start, end, text, round(score, 6), "keyword",
                                                        _moment(seg, matched[rowid]))

    def _term_rows(self, term: str) -> set[int]:
        phrase = f'"{term}"'
        rows = {r[0] for r in self._db.execute("SELECT rowid FROM words WHERE words MATCH ?", (phrase,))}
        if len(term) >= SUBSTRING_MIN:
            rows |= {r[0] for r in self._db.execute("SELECT rowid FROM chars WHERE chars MATCH ?", (phrase,))}
        return rows

    def _rows(self, matched: Mapping[int, set]) -> Iterable[tuple]:
        ids = list(matched)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            yield from self._db.execute(
                f"SELECT id, video_id, cue, start, end, text, confidence, extra FROM segments WHERE id IN ({marks})",
                chunk)

    def _semantic(self, query: str, terms: list[str], cache: _EmbeddingCache, position: dict[str, int],
                  out: CueScores) -> None:
        if not len(cache.rows):
            return
        q = np.asarray(self.encoder.sentence_features([query]), dtype=np.float32)[0]
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        cos = np.clip(cache.vectors.astype(np.float32) @ q, 0.0, 1.0)
        slot = np.full(len(cache.video_ids), -1, np.int64)  # cache video index -> position in out.ids
        for v, i in position.items():
            j = cache.video_index.get(v)
            if j is not None:
                slot[j] = i
        for cue in out.semantic:
            sel = np.flatnonzero((cache.cues == cue) & (slot[cache.videos] >= 0) & (cos > 0))
            order = sel[np.lexsort((-cos[sel], cache.videos[sel]))]  # by video, best segment first
            first = order[np.r_[True, cache.videos[order][1:] != cache.videos[order][:-1]]] if len(order) else order
            rows = {int(cache.rows[j]): int(j) for j in first}
            for rowid, _, _, start, end, text, conf, extra in self._rows(rows):
                j = rows[rowid]
                i = int(slot[cache.videos[j]])
                out.semantic[cue][i] = cos[j]
                seg = _segment(cue, start, end, text, conf, extra)
                out.semantic_best[cue][i] = SegmentMatch(cue, start, end, text, round(float(cos[j]), 6), "semantic",
                                                         _moment(seg, set(terms)))

    def _embeddings(self) -> _EmbeddingCache:
        gen = self.generation
        if self._cache is None or self._cache.generation != gen:
            self._cache = _EmbeddingCache.load(self._db, gen)
        return self._cache


@dataclass
class _EmbeddingCache:
    """Every segment's embedding in memory (float16), with its row id, video (index into ``video_ids``) and cue."""

    generation: int
    rows: np.ndarray
    videos: np.ndarray
    cues: np.ndarray
    vectors: np.ndarray
    video_ids: list[str]
    video_index: dict[str, int]

    @classmethod
    def load(cls, db: sqlite3.Connection, generation: int) -> _EmbeddingCache:
        data = db.execute("SELECT id, video_id, cue, embedding FROM segments ORDER BY id").fetchall()
        video_ids = sorted({r[1] for r in data})
        index = {v: i for i, v in enumerate(video_ids)}
        dim = len(data[0][3]) // 2 if data else 1
        vectors = np.frombuffer(b"".join(r[3] for r in data), np.float16).reshape(len(data), dim) if data else \
            np.zeros((0, 1), np.float16)
        return cls(generation, np.asarray([r[0] for r in data], np.int64),
                   np.asarray([index[r[1]] for r in data], np.int64), np.asarray([r[2] for r in data], dtype=str),
                   vectors, video_ids, index)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT with a generation bump; ROLLBACK on any exception."""

    def __init__(self, index: TextCueIndex):
        self.db, self.path = index._db, index.path

    def __enter__(self):
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise TextCueError(f"{self.path}: cannot write ({exc})") from None
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.db.execute("ROLLBACK")
            return False
        self.db.execute("INSERT INTO meta VALUES ('generation', '1') "
                        "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")
        self.db.execute("COMMIT")
        return False


def query_terms(query: str) -> list[str]:
    """The query's distinct lower-case words, stop words left out (unless nothing else is left)."""
    words = list(dict.fromkeys(re.findall(r"\w+", query.lower())))
    content = [w for w in words if w not in STOP_WORDS]
    return content or words


def _segment(cue, start, end, text, confidence, extra) -> CueSegment:
    data = json.loads(extra) if extra else {}
    box = tuple(data["box"]) if "box" in data else None
    words = tuple((float(a), float(b), str(w)) for a, b, w in data["words"]) if "words" in data else None
    return CueSegment(cue, float(start), float(end), text, float(confidence), box, words)


def _moment(seg: CueSegment, terms: set[str]) -> float:
    """Start of the first word of ``seg`` that matches a query term (same word or a shared 5-letter stem)."""
    for start, _, word in seg.words or ():
        w = re.sub(r"\W+", "", word.lower())
        if any(w == t or (len(t) >= 5 and len(w) >= 5 and w[:5] == t[:5]) for t in terms):
            return float(start)
    return float(seg.start)
