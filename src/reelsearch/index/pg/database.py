"""A connection to the PostgreSQL catalog: the one module that imports psycopg (the ``postgres`` extra).

Credentials come from the URL or, as libpq reads them, from the environment (``PGPASSWORD``, ``PGUSER``, ``PGHOST``,
``PGPASSFILE``, ...); a password is never shown: every message names the database by ``masked(url)``. SQL is
written with ``?`` parameters, as for SQLite, and translated here. A lost connection (a server restart, a network
cut) fails the statement with CatalogUnavailable and the next statement connects again, so a long-running ``serve``
recovers by itself when the database comes back.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from urllib.parse import urlsplit

from reelsearch.errors import ReelsearchError
from reelsearch.extras import require
from reelsearch.index.catalog import CatalogUnavailable
from reelsearch.location import masked

logger = logging.getLogger(__name__)

#: Seconds to wait for a connection before reporting the database unreachable.
CONNECT_TIMEOUT = 10


class DatabaseError(ReelsearchError):
    """The database refused a statement (permissions, a constraint, a damaged table): names the database."""


class Vector(bytes):
    """A pgvector ``vector`` as a binary statement parameter: its ``vector_recv`` form (dimensions int16, 0 int16,
    big-endian float4 values)."""


class CopyError(DatabaseError):
    """The server refused a row of a COPY: ``line`` (1-based; None when the server did not say) and its ``problem``."""

    def __init__(self, message: str, line: int | None, problem: str):
        super().__init__(message)
        self.line, self.problem = line, problem


#: Bytes of encoded rows a COPY sends at once.
COPY_BLOCK = 1 << 20
#: The binary COPY format's header (signature, flags, no extension) and trailer.
COPY_HEADER, COPY_TRAILER = b"PGCOPY\n\xff\r\n\x00" + bytes(8), b"\xff\xff"


def _secrets(url: str) -> list[str]:
    """The password strings of ``url`` (to scrub from the server's and libpq's messages)."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else []
    found += re.findall(r"password=([^&\s]+)", url)
    return [s for s in found if s]


def _qmark(sql: str) -> str:
    """``?`` parameters as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class Database:
    """One connection (autocommit; ``transaction()`` for writes) that reconnects after it is lost.

    ``on_connect(db)`` runs after every (re)connection (session settings). Not for concurrent use by several
    threads: its users serialise their calls (the Searcher's lock).
    """

    def __init__(self, url: str, on_connect=None):
        self.psycopg = require("psycopg", "postgres", "a PostgreSQL catalog")
        self.url = url
        self.location = masked(url)
        self._secrets = _secrets(url)
        self._on_connect = on_connect
        self._conn = None
        self._depth = 0  # nesting of transaction()
        self._settings: dict[str, str] = {}  # the session settings made by ``setting`` on this connection
        self._vectors = False  # whether ``Vector`` parameters are dumped on this connection
        self.connection()  # fail now, with a clear message, when the database cannot be reached

    def describe(self, exc: Exception) -> str:
        """The error's message, one line, without a password."""
        text = " ".join(str(exc).split())
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def connection(self):
        """The open connection (connecting, or connecting again after a lost one)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self.close()
        try:
            self._conn = self.psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                              application_name="reelsearch")
        except self.psycopg.Error as exc:
            raise CatalogUnavailable(f"{self.location}: cannot connect to the database ({self.describe(exc)}); "
                                     "check that it is running and reachable, and the user, password and database "
                                     "name (in the URL or PGUSER / PGPASSWORD / PGDATABASE)") from None
        self._settings, self._vectors = {}, False
        if self._on_connect is not None:
            try:
                self._on_connect(self)
            except BaseException:
                self.close()
                raise
        return self._conn

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Inside: psycopg's errors become CatalogUnavailable (connection lost) or DatabaseError."""
        try:
            yield
        except self.psycopg.OperationalError as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self.close()
                raise CatalogUnavailable(f"{self.location}: lost the connection to the database "
                                         f"({self.describe(exc)}); the next request connects again") from None
            raise DatabaseError(f"{self.location}: {self.describe(exc)}") from None
        except self.psycopg.Error as exc:
            raise DatabaseError(f"{self.location}: {self.describe(exc)}") from None

    def execute(self, sql: str, params: Sequence = (), *, binary: bool = False):
        """Run one statement (``?`` parameters; without any, several statements may be given); its cursor, results
        fetched. ``binary``: parameters and results in PostgreSQL's binary form (no text to format and parse: a
        ``Vector`` parameter as it is, ``bytea`` results as they are)."""
        with self.errors():
            if not params:
                return self.connection().execute(sql)
            if binary and not self._vectors:
                self._dump_vectors()
            return self.connection().execute(_qmark(sql), tuple(params), binary=binary)

    def _dump_vectors(self) -> None:
        """Send ``Vector`` parameters as pgvector's ``vector`` type, in binary, on this connection (once the
        extension exists)."""
        conn = self.connection()
        info = self.psycopg.types.TypeInfo.fetch(conn, "vector")
        if info is None:
            return

        class VectorDumper(self.psycopg.adapt.Dumper):
            oid, format = info.oid, self.psycopg.pq.Format.BINARY

            def dump(self, obj: Vector) -> bytes:
                return bytes(obj)

        conn.adapters.register_dumper(Vector, VectorDumper)
        self._vectors = True

    def setting(self, name: str, value) -> None:
        """``SET name = value`` for this session, unless it is set so already (no round trip then)."""
        if self._settings.get(name) != str(value):
            self.execute("SELECT set_config(?, ?, false)", (name, str(value)))
            self._settings[name] = str(value)

    def executemany(self, sql: str, rows) -> None:
        with self.errors(), self.connection().cursor() as cur:
            cur.executemany(_qmark(sql), list(rows))

    def copy(self, sql: str, rows: Iterable[bytes]) -> None:
        """Run ``COPY ... FROM STDIN (FORMAT BINARY)`` with ``rows`` (each one encoded tuple); CopyError names the
        line the server refused."""
        with self.errors():
            try:
                with self.connection().cursor() as cur, cur.copy(sql) as copy:
                    block, size = [COPY_HEADER], 0
                    for row in rows:  # written in blocks of about COPY_BLOCK bytes: one call per row is slow
                        if len(row) >= COPY_BLOCK:  # a block already: written as it is, not copied into one
                            if block:
                                copy.write(b"".join(block))
                            copy.write(row)
                            block, size = [], 0
                            continue
                        block.append(row)
                        size += len(row)
                        if size >= COPY_BLOCK:
                            copy.write(b"".join(block))
                            block, size = [], 0
                    copy.write(b"".join([*block, COPY_TRAILER]))
            except self.psycopg.Error as exc:
                if isinstance(exc, self.psycopg.OperationalError) and self._conn is not None and (
                        self._conn.closed or self._conn.broken):
                    raise
                found = re.search(r"\bline (\d+)", exc.diag.context or "")
                problem = self.describe(exc)
                raise CopyError(f"{self.location}: {problem}", int(found[1]) if found else None, problem) from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """A transaction (nested ones are savepoints); rolled back on any exception."""
        with self.errors():
            conn = self.connection()
            with conn.transaction():
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
