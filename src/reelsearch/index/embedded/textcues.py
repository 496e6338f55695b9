"""The text cues of the embedded catalog: ``DIR/textcues.sqlite`` (SQLite, WAL), beside the catalog's
``library.sqlite``; the tables of ``reelsearch.index.textcues`` plus the FTS5 tables that find a segment by a word::

    words    FTS5 over segments.text, Porter-stemmed unicode61 words       (every segment)
    chars    FTS5 over segments.text, trigrams: substring matches          (OCR segments: OCR often drops spaces)
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import numpy as np

from reelsearch.features.cues import CueSegment
from reelsearch.index.embedded.sqlite import SqliteDb
from reelsearch.index.keyword import WORDS_TOKENIZER, fts_term_rows
from reelsearch.index.keyword import highlights as segment_highlights
from reelsearch.index.textcue_records import Encoder, TextCueError
from reelsearch.index.textcues import TextCues

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


class EmbeddedTextCues(TextCues):
    """The text cues of the embedded catalog: ``DIR/textcues.sqlite`` (WAL), words found by FTS5 (Porter-stemmed words
    in ``words``, trigrams of OCR text in ``chars``).

    ``directory``: the catalog's folder (created). Several processes may read while one writes (WAL).
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

