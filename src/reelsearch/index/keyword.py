"""Keyword scores of the text cues: SQLite FTS5 over the segments' words, BM25 with k1 = 0, normalised.

Per video and cue, in [0, 1]: the best segment's BM25 with k1 = 0, divided by the query's maximum:
``sum(idf(t) for query terms t in the segment) / sum(idf(t) for all query terms)``, with BM25's
``idf(t) = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))`` over the N segments. Segments are sentences and text lines, so
term frequency and length normalisation (what k1 and b control) hardly matter; k1 = 0 makes the score bounded and
comparable across queries: 1 = every query word is in one segment, rare words weigh more than common ones. English
stop words are left out of the query unless it has nothing else. A word matches a stemmed word of a segment (table
``words``: Porter-stemmed unicode61), or, in OCR text and for words of 4+ characters, any substring (table ``chars``:
trigrams; ``forecast`` in ``WEATHERFORECAST``).

The PostgreSQL catalog matches by the same rules: its ``tsvector`` holds the words as this module's ``Lexer`` cuts and
stems them (SQLite's own FTS5 tokenizer, run in memory), so both databases find the same segments for a word and the
scores, computed here from those matches, are the same.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Callable

import numpy as np

from reelsearch.features.cues import CUES, CueSegment
from reelsearch.index.segments import SegmentCache

#: How the ``words`` table cuts and stems text (SQLite FTS5).
WORDS_TOKENIZER = "porter unicode61 remove_diacritics 2"
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


def query_terms(query: str) -> list[str]:
    """The query's distinct lower-case words, stop words left out (unless nothing else is left)."""
    words = list(dict.fromkeys(re.findall(r"\w+", query.lower())))
    content = [w for w in words if w not in STOP_WORDS]
    return content or words


def keyword_scores(term_rows: Callable[[str], set[int]], terms: list[str], cache: SegmentCache, slot: np.ndarray,
                   n: int, cues: list[str]):
    """({cue: [n] scores}, {cue: [n] best segment position or -1}, every segment's score [S],
    {term: sorted positions of the segments it matches}); ``slot[v]``: the output position of the cache's video v
    (-1: not asked for); ``term_rows(term)``: the ids of the segments a query word matches (``fts_term_rows``: one
    FTS5 lookup, two for OCR substrings)."""
    size = len(cache.rows)
    scores = {c: np.zeros(n, np.float32) for c in cues}
    best = {c: np.full(n, -1, np.int64) for c in cues}
    segment_scores = np.zeros(size, np.float64)
    matched: dict[str, np.ndarray] = {}
    if not terms or not size:
        return scores, best, segment_scores, matched
    for t in terms:
        rows = np.fromiter(term_rows(t), np.int64)
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
    return scores, best, segment_scores, matched


def highlights(db, segment: int, query: str) -> list[tuple[int, int]]:
    """Where ``query``'s words occur in a stored segment's text, as [start, end) character offsets (code points),
    by the keyword rules: stemmed words, and for OCR text substrings of words of 4+ characters."""
    terms = query_terms(query)
    if not terms or segment < 0:
        return []
    spans = _spans(db, "words", segment, " OR ".join(f'"{t}"' for t in terms))
    long_terms = [t for t in terms if len(t) >= SUBSTRING_MIN]
    if long_terms:
        spans += _spans(db, "chars", segment, " OR ".join(f'"{t}"' for t in long_terms))
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def word_moment(seg: CueSegment, terms: set[str]) -> float:
    """Start of the first word of ``seg`` that matches a query term (same word or a shared 5-letter stem); the
    segment's start without word times or a match."""
    for start, _, word in seg.words or ():
        w = re.sub(r"\W+", "", word.lower())
        if any(w == t or (len(t) >= 5 and len(w) >= 5 and w[:5] == t[:5]) for t in terms):
            return float(start)
    return float(seg.start)


def contains(sorted_positions: np.ndarray, p: int) -> bool:
    """Whether ``p`` is among ``sorted_positions``."""
    i = int(np.searchsorted(sorted_positions, p))
    return i < len(sorted_positions) and int(sorted_positions[i]) == p


def _spans(db, table: str, segment: int, expression: str) -> list[tuple[int, int]]:
    row = db.execute(f"SELECT highlight({table}, 0, char(1), char(2)) FROM {table} "
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


def fts_term_rows(db, term: str) -> set[int]:
    """Ids of the segments ``term`` matches in the FTS5 tables ``words`` (and ``chars`` for a long word)."""
    phrase = f'"{term}"'
    rows = {r[0] for r in db.execute("SELECT rowid FROM words WHERE words MATCH ?", (phrase,))}
    if len(term) >= SUBSTRING_MIN:
        rows |= {r[0] for r in db.execute("SELECT rowid FROM chars WHERE chars MATCH ?", (phrase,))}
    return rows


class Lexer:
    """The keyword rules as text goes in and out of another database: the words of a text as the ``words`` table
    cuts and stems them, and the highlights of a query in a text, by SQLite's own FTS5 tokenizers in memory."""

    def __init__(self):
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(f"CREATE VIRTUAL TABLE words USING fts5(text, tokenize='{WORDS_TOKENIZER}')")
        self._db.execute("CREATE VIRTUAL TABLE chars USING fts5(text, tokenize='trigram')")
        self._db.execute("CREATE VIRTUAL TABLE terms USING fts5vocab(words, 'instance')")

    def words(self, text: str) -> list[tuple[str, int]]:
        """(stemmed word, position) of every word of ``text``, in order."""
        with self._db:
            self._db.execute("DELETE FROM words")
            self._db.execute("INSERT INTO words (rowid, text) VALUES (1, ?)", (text,))
            return [(t, int(o)) for t, o in self._db.execute("SELECT term, offset FROM terms ORDER BY offset")]

    def highlights(self, text: str, query: str, ocr: bool) -> list[tuple[int, int]]:
        """``highlights`` of ``query`` in ``text`` (substrings too when ``ocr``)."""
        with self._db:
            self._db.execute("DELETE FROM words")
            self._db.execute("DELETE FROM chars")
            self._db.execute("INSERT INTO words (rowid, text) VALUES (1, ?)", (text,))
            if ocr:
                self._db.execute("INSERT INTO chars (rowid, text) VALUES (1, ?)", (text,))
            return highlights(self._db, 1, query)

    def close(self) -> None:
        self._db.close()
