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
from reelsearch.evaluation.fusion import fuse_experts, score_fusion
from reelsearch.features.cues import CUES, CueResult, CueSegment

SQLITE_NAME = "textcues.sqlite"
SCHEMA_VERSION = 1
#: (keyword, semantic) weights of a cue's two scores when they are summed into the cue's expert score: the best
#: mean R@1 over paraphrase and exact-words queries on Flickr8k dev captions (benchmarks/bench_cues.py --weights).
DEFAULT_WEIGHTS = (1.0, 2.0)
#: MiniLM cosine that unrelated texts reach (a query and a transcript about other things): meaning counts above it.
#: Measured by benchmarks/bench_fusion.py: the 99th percentile of a caption's cosine to an unrelated video's speech
#: or on-screen text is 0.21 / 0.22; 0.25 is the grid's lowest floor above it, and as good as 0.2 for the rest.
SEMANTIC_FLOOR = 0.25
SUBSTRING_MIN = 4  # query words at least this long also match inside OCR text (missing spaces)
#: English function words and their inflected forms (mostly NLTK's list), left out of a keyword query: a form left
#: out of the list matches through its stem ("doing" matched every "do" of a transcript while only "do" was listed).
STOP_WORDS = frozenset(
    "a about above after again against all am an and any are as at be because been before being below between both "
    "but by can could did do does doing done down during each few for from further had has have having he her here "
    "hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of "
    "off on once only or other our ours ourselves out over own same shall she should so some such than that the "
    "their theirs them themselves then there these they this those through to too under until up us very was we "
    "were what when where which while who whom why will with would you your yours yourself yourselves".split())

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

    def rows(self) -> dict[str, np.ndarray]:
        """``"speech.keyword"``, ``"speech.semantic"``, ... -> [1, N] score matrices (one query), for
        ``score_fusion`` / ``rank_fusion`` with the visual experts' [1, N] rows."""
        out = {}
        for cue in self.keyword:
            out[f"{cue}.keyword"] = self.keyword[cue][None, :]
            out[f"{cue}.semantic"] = self.semantic[cue][None, :]
        return out

    def meaning(self, cue: str, floor: float = 0.0) -> np.ndarray:
        """The semantic scores of ``cue`` above ``floor`` (the closeness of unrelated texts), rescaled to [0, 1]:
        ``max(0, (s - floor) / (1 - floor))``."""
        return floored(self.semantic[cue], floor)

    def expert(self, cue: str, weights: Sequence[float] = DEFAULT_WEIGHTS, floor: float = 0.0) -> np.ndarray:
        """The cue's expert score [N]: its keyword and (floored, see ``meaning``) semantic scores fused by
        ``score_fusion`` with ``weights``."""
        if not self.ids:
            return np.zeros(0, np.float32)
        rows = [self.keyword[cue][None, :], self.meaning(cue, floor)[None, :]]
        return np.asarray(score_fusion(rows, weights))[0]

    def match(self, i: int, cue: str, weights: Sequence[float] = DEFAULT_WEIGHTS,
              floor: float = 0.0) -> SegmentMatch | None:
        """The segment behind video ``i``'s expert score for ``cue``: the keyword one when it is also the closest in
        meaning (its words are the evidence), else whichever contributes more under ``weights`` (and ``floor``)."""
        key = self.keyword_best[cue][i]
        sem = self.semantic_best[cue][i] if self.meaning(cue, floor)[i] > 0 else None
        if key is None or sem is None:
            return key or sem
        if key.segment == sem.segment:
            return key
        return key if weights[0] * key.score >= weights[1] * float(floored(np.float32(sem.score), floor)) else sem


def floored(scores: np.ndarray, floor: float) -> np.ndarray:
    """``max(0, (scores - floor) / (1 - floor))`` (``scores`` unchanged when ``floor`` is 0)."""
    if not floor:
        return scores
    if not 0 <= floor < 1:
        raise TextCueError(f"the semantic floor must be in [0, 1), got {floor}")
    return np.maximum(0.0, (scores - floor) / (1.0 - floor)).astype(np.float32)


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
        self._stored: tuple[int, list[str]] | None = None  # (generation, stored_cues())

    # ------------------------------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TextCueIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def encoder(self):
        """The sentence encoder (default: the process's shared MiniLM, loaded on first use)."""
        if self._encoder is None:
            from reelsearch.text.minilm import shared_encoder

            self._encoder = shared_encoder()
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
               cues: Sequence[str] = CUES, progress: bool = True, workers: int = 2) -> CueReport:
        """Extract and store the pending cues of each ``(video_id, path, content)``, one transaction per video.

        ``extractor`` is a ``reelsearch.features.cues.CueExtractor``. Each (video, cue) is one task for ``workers``
        threads, a few videos ahead, so that on 2 cores one video's speech runs beside another's OCR (one model
        call at a time per model); videos are stored in order as their cues finish. Interrupting it loses at most
        the videos in progress; running it again skips every video already done (``pending``)."""
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        from tqdm import tqdm

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
                for (cue,) in self._db.execute("SELECT cue FROM runs WHERE video_id = ? AND content IS NOT ?",
                                               (vid, contents[vid])).fetchall():
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
                               "error IS NULL AND video_id != ? LIMIT 1", (cue, recipe, content, video_id)).fetchone()
        return row[0] if row else None

    def _copy(self, video_id: str, donors: Mapping[str, str]) -> None:
        """Copy each cue's segments and run from ``donors[cue]`` to ``video_id``, in one transaction."""
        now = time.time()
        with self._transaction():
            for cue, donor in donors.items():
                self._delete(video_id, cue)
                rows = self._db.execute("SELECT start, end, text, confidence, extra, embedding FROM segments "
                                        "WHERE video_id = ? AND cue = ? ORDER BY id", (donor, cue)).fetchall()
                for start, end, text, conf, extra, blob in rows:
                    self._insert(video_id, cue, _segment(cue, start, end, text, conf, extra),
                                 np.frombuffer(blob, np.float16))
                self._db.execute("INSERT OR REPLACE INTO runs SELECT ?, cue, recipe, content, n_segments, error, ? "
                                 "FROM runs WHERE video_id = ? AND cue = ?", (video_id, now, donor, cue))

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

    def scores(self, query: str, video_ids: Sequence[str] | None = None, cues: Sequence[str] = CUES, *,
               query_vector: np.ndarray | None = None) -> CueScores:
        """Keyword and semantic scores of ``query`` for ``video_ids`` (default: every video with segments).

        ``query_vector``: the query's sentence embedding when the caller has it already (else it is encoded here).
        Costs one FTS5 lookup per query word and one matrix-vector product over every stored segment embedding;
        the segments behind the scores are read only when asked for (``keyword_best`` / ``semantic_best``).
        """
        if not query or not query.strip():
            raise TextCueError("empty query")
        cues = list(cues)
        cache = self._embeddings()
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
        kw, kw_pos, matched = self._keyword(terms, cache, slot, len(ids), cues)
        sem, sem_pos = self._semantic(query, query_vector, cache, slot, len(ids), cues)

        def keyword_match(p: int) -> SegmentMatch:
            found = {t for t, pos in matched.items() if _contains(pos, p)}
            return self._match(cache, p, found, round(float(kw_score[p]), 6), "keyword")

        def semantic_match(p: int) -> SegmentMatch:
            return self._match(cache, p, set(terms), round(float(cos[p]), 6), "semantic")

        kw_score, cos = kw.pop("_segments"), sem.pop("_segments")
        return CueScores(query, list(ids), kw, sem, {c: _Matches(kw_pos[c], keyword_match) for c in cues},
                         {c: _Matches(sem_pos[c], semantic_match) for c in cues}, positions)

    def highlights(self, segment: int, query: str) -> list[tuple[int, int]]:
        """Where ``query``'s words occur in a stored segment's text, as [start, end) character offsets (code points),
        by the keyword rules: stemmed words, and for OCR text substrings of words of 4+ characters."""
        terms = query_terms(query)
        if not terms or segment < 0:
            return []
        spans = self._spans("words", segment, " OR ".join(f'"{t}"' for t in terms))
        long_terms = [t for t in terms if len(t) >= SUBSTRING_MIN]
        if long_terms:
            spans += self._spans("chars", segment, " OR ".join(f'"{t}"' for t in long_terms))
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [(a, b) for a, b in merged]

    def _spans(self, table: str, segment: int, expression: str) -> list[tuple[int, int]]:
        row = self._db.execute(f"SELECT highlight({table}, 0, char(1), char(2)) FROM {table} "
                               f"WHERE {table} MATCH ? AND rowid = ?", (expression, int(segment))).fetchone()
        if row is None:
            return []
        spans, offset, opened = [], 0, 0
        for ch in row[0]:
            if ch == "\x01":
                opened = offset
            elif ch == "\x02":
                spans.append((opened, offset))
            else:
                offset += 1
        return spans

    def search(self, query: str, k: int = 10, *, cues: Sequence[str] = CUES,
               weights: Mapping[str, Sequence[float]] | None = None, floor: float = SEMANTIC_FLOOR) -> list[CueHit]:
        """The ``k`` videos whose speech / on-screen text best match ``query``, with no library or model: the sum
        over ``cues`` of each cue's expert score (``CueScores.expert`` with ``weights[cue]``, default
        ``DEFAULT_WEIGHTS``, and ``floor``), by the project's fusion, as a search's text-only experts score. Videos
        with no evidence at all (every score 0) are not returned."""
        sc = self.scores(query, cues=cues)
        if not sc.ids:
            return []
        w = {cue: (weights or {}).get(cue, DEFAULT_WEIGHTS) for cue in cues}
        experts = {cue: sc.expert(cue, w[cue], floor)[None, :] for cue in cues}
        total = fuse_experts(experts, dict.fromkeys(cues, 1.0))[0]
        order = [i for i in np.argsort(-total, kind="stable") if total[i] > 0][:k]
        hits = []
        for i in order:
            best_cue = max(cues, key=lambda c: experts[c][0, i])
            hits.append(CueHit(sc.ids[i], float(total[i]), {c: float(experts[c][0, i]) for c in cues},
                               sc.match(i, best_cue, w[best_cue], floor)))
        return hits

    # ---------------------------------------------------------------------------------------- scoring
    def _keyword(self, terms: list[str], cache: _EmbeddingCache, slot: np.ndarray, n: int, cues: list[str]):
        """({cue: [n] scores, "_segments": every segment's score}, {cue: [n] best segment position or -1},
        {term: sorted positions of the segments it matches})."""
        size = len(cache.rows)
        scores = {c: np.zeros(n, np.float32) for c in cues}
        best = {c: np.full(n, -1, np.int64) for c in cues}
        segment_scores = np.zeros(size, np.float64)
        matched: dict[str, np.ndarray] = {}
        if terms and size:
            for t in terms:
                rows = np.fromiter(self._term_rows(t), np.int64)
                pos = np.searchsorted(cache.rows, rows)
                ok = pos < size
                ok[ok] = cache.rows[pos[ok]] == rows[ok]  # rows written after the cache was read are left out
                matched[t] = np.unique(pos[ok])
            idf = {t: math.log(1.0 + (size - len(p) + 0.5) / (len(p) + 0.5)) for t, p in matched.items()}
            denominator = sum(idf.values())
            for t, pos in matched.items():
                segment_scores[pos] += idf[t] / denominator
            hit = np.flatnonzero(segment_scores > 0)
            for c in cues:
                sel = hit[(cache.cues[hit] == CUES.index(c)) & (slot[cache.videos[hit]] >= 0)]
                if not len(sel):
                    continue
                # per video: the best score, the earliest segment among equals
                order = sel[np.lexsort((cache.starts[sel], -np.round(segment_scores[sel], 9), cache.videos[sel]))]
                first = order[np.r_[True, cache.videos[order][1:] != cache.videos[order][:-1]]]
                where = slot[cache.videos[first]]
                scores[c][where] = segment_scores[first]
                best[c][where] = first
        scores["_segments"] = segment_scores
        return scores, best, matched

    def _semantic(self, query: str, query_vector, cache: _EmbeddingCache, slot: np.ndarray, n: int,
                  cues: list[str]):
        """({cue: [n] scores, "_segments": every segment's cosine}, {cue: [n] best segment position or -1})."""
        scores = {c: np.zeros(n, np.float32) for c in cues}
        best = {c: np.full(n, -1, np.int64) for c in cues}
        size = len(cache.rows)
        if not size:
            scores["_segments"] = np.zeros(0, np.float32)
            return scores, best
        q = self.encoder.sentence_features([query])[0] if query_vector is None else query_vector
        q = np.asarray(q, np.float32).reshape(-1)
        if q.shape[0] != cache.vectors.shape[1]:
            raise TextCueError(f"{self.path}: a {q.shape[0]}-d query vector for {cache.vectors.shape[1]}-d segments")
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        cos = cache.vectors @ q
        np.clip(cos, 0.0, 1.0, out=cos)
        ordered = cos[cache.order]
        top = np.maximum.reduceat(ordered, cache.group_starts)
        lengths = np.diff(np.r_[cache.group_starts, size])
        first = np.minimum.reduceat(np.where(ordered == np.repeat(top, lengths), np.arange(size), size),
                                    cache.group_starts)
        for c in cues:
            g = np.flatnonzero((cache.group_cue == CUES.index(c)) & (slot[cache.group_video] >= 0) & (top > 0))
            where = slot[cache.group_video[g]]
            scores[c][where] = top[g]
            best[c][where] = cache.order[first[g]]
        scores["_segments"] = cos
        return scores, best

    def _match(self, cache: _EmbeddingCache, position: int, terms: set[str], score: float, how: str) -> SegmentMatch:
        rowid = int(cache.rows[position])
        row = self._db.execute("SELECT cue, start, end, text, confidence, extra FROM segments WHERE id = ?",
                               (rowid,)).fetchone()
        if row is None:  # deleted since the cache was read
            cue = CUES[int(cache.cues[position])]
            return SegmentMatch(cue, float(cache.starts[position]), float(cache.starts[position]), "", score, how,
                                float(cache.starts[position]), rowid)
        seg = _segment(*row)
        return SegmentMatch(seg.cue, seg.start, seg.end, seg.text, score, how, _moment(seg, terms), rowid)

    def _term_rows(self, term: str) -> set[int]:
        phrase = f'"{term}"'
        rows = {r[0] for r in self._db.execute("SELECT rowid FROM words WHERE words MATCH ?", (phrase,))}
        if len(term) >= SUBSTRING_MIN:
            rows |= {r[0] for r in self._db.execute("SELECT rowid FROM chars WHERE chars MATCH ?", (phrase,))}
        return rows

    def _embeddings(self) -> _EmbeddingCache:
        gen = self.generation
        if self._cache is None or self._cache.generation != gen:
            self._cache = _EmbeddingCache.load(self._db, gen)
        return self._cache


@dataclass
class _EmbeddingCache:
    """Every segment in memory, by row id: its video (index into ``video_ids``), cue (index into CUES), start and
    embedding (float16); ``order`` sorts the segments by (cue, video), ``group_starts`` opens each (cue, video)
    group in it (with ``group_cue`` and ``group_video``), so per-video maxima are one ``reduceat``."""

    generation: int
    rows: np.ndarray
    videos: np.ndarray
    cues: np.ndarray
    starts: np.ndarray
    vectors: np.ndarray
    video_ids: list[str]
    video_index: dict[str, int]
    order: np.ndarray
    group_starts: np.ndarray
    group_cue: np.ndarray
    group_video: np.ndarray

    @classmethod
    def load(cls, db: sqlite3.Connection, generation: int) -> _EmbeddingCache:
        data = db.execute("SELECT id, video_id, cue, start, embedding FROM segments ORDER BY id").fetchall()
        video_ids = sorted({r[1] for r in data})
        index = {v: i for i, v in enumerate(video_ids)}
        dim = len(data[0][4]) // 2 if data else 1
        # float16 on disk, float32 in memory: a float16 matrix-vector product has no fast path in numpy (converting
        # 150,000 segments per query cost 130 ms; the product itself 10 ms)
        vectors = np.frombuffer(b"".join(r[4] for r in data), np.float16).reshape(len(data), dim).astype(np.float32) \
            if data else np.zeros((0, 1), np.float32)
        videos = np.asarray([index[r[1]] for r in data], np.int64)
        cues = np.asarray([CUES.index(r[2]) if r[2] in CUES else len(CUES) for r in data], np.int64)
        order = np.lexsort((videos, cues)) if data else np.zeros(0, np.int64)
        key = cues[order] * max(len(video_ids), 1) + videos[order]
        group_starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if data else np.zeros(0, np.int64)
        return cls(generation, np.asarray([r[0] for r in data], np.int64), videos, cues,
                   np.asarray([r[3] for r in data], np.float64), vectors, video_ids, index, order, group_starts,
                   cues[order][group_starts], videos[order][group_starts])


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


def _contains(sorted_positions: np.ndarray, p: int) -> bool:
    i = int(np.searchsorted(sorted_positions, p))
    return i < len(sorted_positions) and int(sorted_positions[i]) == p


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
