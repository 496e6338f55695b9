"""TextCues: the speech transcripts and on-screen text of a catalog's videos, stored and scored by keyword and
meaning.

Tables (the same in both databases)::

    segments(id, video_id, cue, start, end, text, confidence, extra JSON (box / words), embedding float16 [384])
    runs(video_id, cue, recipe, content, n_segments, error, updated_at)    what was extracted, with what, and how
    meta(key, value)                                                       schema, generation, embedding size

plus what finds a segment by a word: FTS5 tables in the embedded catalog (``reelsearch.index.embedded.textcues``), a
``tsvector`` in PostgreSQL (``reelsearch.index.pg.textcues``).

``scores`` gives, per video and cue, the **keyword score** (``reelsearch.index.keyword``: normalised BM25 over the
words' matches) and the **semantic score** (``reelsearch.index.semantic``: the best cosine of the query's sentence
embedding with the video's segments), each with the segment behind it, and every segment's own two scores with its
time (``CueScores.spans``: what a video's score per stretch of time is made of). The text cues run no text encoder:
they are given one (``encoder``, a callable ``texts -> [N, D]``) to embed what they store. How a cue's two scores
become the cue's expert score and how that is fused with the picture is search's business (``reelsearch.search.cues``,
``reelsearch.search.fusion``).

Writes (``reelsearch.index.textcue_writes``) are one transaction per video (all cues of that video, a generation
bump), so a crash never leaves half a video; ``pending`` tells which cues a video still needs, so an interrupted
``update`` resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from reelsearch.features.cues import CUES, CueSegment
from reelsearch.index.keyword import contains, keyword_scores, query_terms, word_moment
from reelsearch.index.segments import SegmentCache
from reelsearch.index.semantic import semantic_scores
from reelsearch.index.textcue_records import (
    CueRun,
    CueScores,
    Encoder,
    SegmentMatch,
    SegmentMatches,
    TextCueError,
    TextSpans,
    stored_segment,
)
from reelsearch.index.textcue_writes import TextCueWrites


class TextCues(TextCueWrites, ABC):
    """Transcript and on-screen-text segments of videos, with keyword and meaning (embedding) scores, in a SQL
    database (``?`` parameters; the tables of the module docstring, ``META`` the meta table's name).

    ``encoder``: ``texts -> [N, D]`` sentence embeddings of what is stored (search gives MiniLM's,
    ``reelsearch.text.sentences.sentence_encoder``); only writing segments and scoring a query given as text need it.
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
        """``texts`` embedded by the encoder these text cues were given (TextCueError without one)."""
        if self._encoder is None:
            raise TextCueError(f"{self.location}: no sentence encoder given to embed text (opened without "
                               "encoder=)")
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
        return [stored_segment(*row) for row in rows]

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

        def spans(video_id: str, cue: str) -> TextSpans:
            p = cache.positions(video_id, cue)
            return TextSpans(cache.starts[p], cache.ends[p], kw_score[p].astype(np.float32), cos[p])

        return CueScores(query, list(ids), kw, sem, {c: SegmentMatches(kw_pos[c], keyword_match) for c in cues},
                         {c: SegmentMatches(sem_pos[c], semantic_match) for c in cues}, positions, spans)

    def _match(self, cache: SegmentCache, position: int, terms: set[str], score: float, how: str) -> SegmentMatch:
        rowid = int(cache.rows[position])
        row = self._db.execute('SELECT cue, start, "end", text, confidence, extra FROM segments WHERE id = ?',
                               (rowid,)).fetchone()
        if row is None:  # deleted since the cache was read
            cue = CUES[int(cache.cues[position])]
            return SegmentMatch(cue, float(cache.starts[position]), float(cache.starts[position]), "", score, how,
                                float(cache.starts[position]), rowid)
        seg = stored_segment(*row)
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


    def stored_cues(self) -> list[str]:
        """The cues stored for at least one video (in CUES order)."""
        gen = self.generation
        if self._stored is None or self._stored[0] != gen:
            self._stored = (gen, [c for c in CUES if self._db.execute("SELECT 1 FROM runs WHERE cue = ? LIMIT 1",
                                                                        (c,)).fetchone()])
        return list(self._stored[1])

