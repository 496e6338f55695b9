"""The embedded index's SQLite files: opened with their settings, and a damaged file reported as one error that names
the file, what is wrong and what to do, never a ``sqlite3.DatabaseError`` traceback; the integrity check behind
``reelsearch index --check``."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from reelsearch.errors import ReelsearchError

#: SQLite's primary result codes of a damaged file: SQLITE_CORRUPT, SQLITE_NOTADB.
_DAMAGED = {11: "its pages are damaged", 26: "it is not a SQLite database"}


class DamagedIndexError(ReelsearchError):
    """An index file is damaged (truncated, overwritten, not a database): names it and says how to check and
    repair it."""

    def __init__(self, path: str | Path, problem: str, index_dir: str | Path | None = None):
        self.path, self.problem = str(path), problem
        where = f" --index {index_dir}" if index_dir is not None else ""
        super().__init__(f"{path}: the index is damaged ({problem}); `reelsearch index --check{where}` lists what "
                         f"is readable, `reelsearch index PATH... --repair{where}` keeps every video still readable "
                         "and indexes the rest of PATH again")


def damage(exc: sqlite3.Error) -> str | None:
    """What is wrong when ``exc`` says the file is damaged (None for any other error: locked, full disk, ...)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return f"{_DAMAGED[code & 0xFF]}: {exc}" if code & 0xFF in _DAMAGED else None
    text = str(exc)  # Python < 3.11: no error code
    if "malformed" in text:
        return f"{_DAMAGED[11]}: {text}"
    return f"{_DAMAGED[26]}: {text}" if "not a database" in text else None


class SqliteDb:
    """A SQLite connection (autocommit; transactions are explicit) whose errors of a damaged file become
    DamagedIndexError; execute / executemany / executescript as sqlite3's, cursors wrapped alike."""

    def __init__(self, path: str | Path, index_dir: str | Path | None = None, **connect):
        self.path, self.index_dir = Path(path), index_dir
        with self.errors():
            self.conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, **connect)

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Inside: an error of a damaged file raises DamagedIndexError."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            problem = damage(exc)
            if problem is None:
                raise
            raise DamagedIndexError(self.path, problem, self.index_dir) from None

    def execute(self, sql: str, params=()) -> _Cursor:
        with self.errors():
            return _Cursor(self, self.conn.execute(sql, params))

    def executemany(self, sql: str, rows) -> _Cursor:
        with self.errors():
            return _Cursor(self, self.conn.executemany(sql, rows))

    def executescript(self, script: str) -> None:
        with self.errors():
            self.conn.executescript(script)

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def close(self) -> None:
        self.conn.close()


class _Cursor:
    """A sqlite3 cursor whose reads raise DamagedIndexError for a damaged file."""

    def __init__(self, db: SqliteDb, cursor: sqlite3.Cursor):
        self.db, self.cursor = db, cursor

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self.cursor.lastrowid

    def fetchone(self):
        with self.db.errors():
            return self.cursor.fetchone()

    def fetchmany(self, size: int):
        with self.db.errors():
            return self.cursor.fetchmany(size)

    def fetchall(self):
        with self.db.errors():
            return self.cursor.fetchall()

    def __iter__(self):
        while rows := self.fetchmany(1024):
            yield from rows


def integrity_problems(path: str | Path) -> list[str]:
    """What SQLite's integrity check finds wrong with the database file at ``path`` ([] when it is sound)."""
    try:
        db = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [str(exc)]
    try:
        rows = db.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return [damage(exc) or str(exc)]
    finally:
        db.close()
    return [] if [r[0] for r in rows] == ["ok"] else [r[0] for r in rows]
