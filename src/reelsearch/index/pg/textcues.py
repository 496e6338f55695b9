"""The text cues of the PostgreSQL catalog: ``segments`` and ``runs`` in the catalog's database (``TextCues`` holds
everything else).

A segment's words are stored as a ``tsvector`` (GIN-indexed) of the words the embedded index's FTS5 tokenizer finds
(``reelsearch.index.keyword.Lexer``: Porter-stemmed unicode61, with their positions), so a query word matches exactly
the segments it matches there: one word is ``words @@ 'stem'``, a word that the tokenizer cuts in two a phrase
(``'a' <-> 'b'``). OCR text is also kept lower-cased (``folded``, trigram-indexed) for substring matches, as the
``chars`` table. The keyword score (BM25 with k1 = 0 from the matches) and the meaning score are computed from those
matches and the stored MiniLM vectors by the same code as for the embedded index, so both give the same scores.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

from reelsearch.features.cues import CueSegment
from reelsearch.index.keyword import SUBSTRING_MIN, Lexer
from reelsearch.index.pg.database import Database
from reelsearch.index.textcue_records import Encoder
from reelsearch.index.textcues import TextCues

#: Advisory lock key of text-cue writes ("reelcues" in ASCII): cooperating writers store and prune one at a time.
CUE_LOCK = 0x7265656C63756573


def tsvector(words: list[tuple[str, int]]) -> str:
    """The ``tsvector`` text of (word, position) pairs (positions from 1)."""
    merged: dict[str, list[int]] = {}
    for word, position in words:
        merged.setdefault(word, []).append(min(position + 1, 16383))
    return " ".join(f"'{_quote(w)}':{','.join(map(str, p))}" for w, p in merged.items())


def tsquery(words: list[tuple[str, int]]) -> str:
    """The ``tsquery`` text that matches the words in this order, next to each other."""
    return " <-> ".join(f"'{_quote(w)}'" for w, _ in words)


def _quote(word: str) -> str:
    return word.replace("\\", "\\\\").replace("'", "''")


class PostgresTextCues(TextCues):
    """The text cues in the PostgreSQL catalog reached through ``db`` (the catalog's connection); ``meta``: their
    meta values as the catalog reads them (``cue_meta``: inside a search's snapshot, with the catalog's meta)."""

    META = "cue_meta"

    def __init__(self, db: Database, *, meta: Callable[[str], str | None], encoder: Encoder | None = None):
        self._db = db
        self._read_meta = meta
        self._encoder = encoder
        self._lexer = Lexer()

    def _meta(self, key: str) -> str | None:
        return self._read_meta(key)

    @property
    def location(self) -> str:
        return self._db.location

    def close(self) -> None:
        """The connection is the catalog's: it closes it."""
        self._lexer.close()

    @contextlib.contextmanager
    def _write(self):
        """A transaction that holds the cue-write lock: a video's segments are replaced by one writer at a time."""
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(?)", (CUE_LOCK,))
            yield

    def prune(self, contents) -> int:
        """``TextCues.prune`` against the catalog's videos as they are now, under the cue-write lock (``contents``,
        read earlier by the caller, may miss a video another writer committed since: its cues are kept)."""
        with self._write():
            return super().prune({str(r[0]): r[1] for r in self._db.execute("SELECT id, sha256 FROM videos")})

    def _insert(self, video_id: str, cue: str, seg: CueSegment, vector: np.ndarray) -> None:
        self._db.execute(
            'INSERT INTO segments (video_id, cue, start, "end", text, confidence, extra, embedding, words, folded) '
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS tsvector), ?)",
            (video_id, cue, float(seg.start), float(seg.end), seg.text, float(seg.confidence), self._extra(seg),
             np.asarray(vector, np.float16).tobytes(), tsvector(self._lexer.words(seg.text)),
             seg.text.lower() if cue == "ocr" else None))

    def _delete_segments(self, where: str, args: tuple) -> None:
        self._db.execute(f"DELETE FROM segments WHERE {where}", args)

    def _term_rows(self, term: str) -> set[int]:
        words = self._lexer.words(term)
        rows = set()
        if words:
            rows = {r[0] for r in self._db.execute("SELECT id FROM segments WHERE words @@ CAST(? AS tsquery)",
                                                   (tsquery(words),))}
        if len(term) >= SUBSTRING_MIN:
            pattern = "%" + term.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows |= {r[0] for r in self._db.execute("SELECT id FROM segments WHERE folded LIKE ?", (pattern,))}
        return rows

    def highlights(self, segment: int, query: str) -> list[tuple[int, int]]:
        row = self._db.execute("SELECT text, cue FROM segments WHERE id = ?", (int(segment),)).fetchone()
        if row is None or segment < 0:
            return []
        return self._lexer.highlights(row[0], query, row[1] == "ocr")
