"""Where a command's library is: a PostgreSQL URL (``--db URL`` / ``REELSEARCH_DB``) or an index folder (``--index
DIR``, else the user's); and a model setting in one form. The standard library alone, so that ``reelsearch search``
can find a running ``reelsearch serve`` (``reelsearch.served``) before it imports the catalog."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import platformdirs

from reelsearch.errors import ConfigError

#: The environment variable naming the PostgreSQL catalog when neither ``--db`` nor ``--index`` is given.
DB_ENV = "REELSEARCH_DB"
#: URL schemes that name a PostgreSQL database.
SCHEMES = ("postgresql", "postgres")


def is_database_url(value) -> bool:
    """Whether ``value`` is a PostgreSQL URL (``postgresql://...`` or ``postgres://...``)."""
    return isinstance(value, str) and value.split("://", 1)[0].lower() in SCHEMES and "://" in value


def masked(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    parts = urlsplit(url)
    if not parts.password:
        return re.sub(r"(password=)[^&\s]*", r"\1***", url)
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    query = re.sub(r"(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, f"{user}:***@{netloc[1]}", parts.path, query, parts.fragment))


def default_index_dir() -> Path:
    """Where the embedded catalog lives by default: ``<user data dir>/reelsearch/index``."""
    return Path(platformdirs.user_data_dir("reelsearch")) / "index"


def index_dir_or_default(index_dir: str | Path | None) -> Path:
    """``index_dir``, or the default location in the user's data directory."""
    if index_dir is not None:
        return Path(index_dir).expanduser()
    return default_index_dir()


def library_location(index: str | Path | None = None, db: str | None = None) -> str | Path:
    """The library a command works on: the database URL ``db`` (else ``REELSEARCH_DB`` when no ``index`` is given),
    or the folder ``index`` (default: the user's)."""
    if db is None and is_database_url(index):
        db, index = str(index), None
    if db is None and index is None:
        db = os.environ.get(DB_ENV) or None
    if db is not None and index is not None:
        raise ConfigError("give either --index DIR (an embedded index) or --db URL (a PostgreSQL catalog), not both")
    if db is not None:
        if not is_database_url(db):
            raise ConfigError(f"--db {masked(db)}: expected a PostgreSQL URL, postgresql://USER@HOST/DATABASE")
        return db
    return index_dir_or_default(index)


def model_location(model: str | None) -> str | None:
    """A model setting in one form: an existing path made absolute (its real path), also after ``hf:`` (a checkpoint
    folder); a name such as "default" or ``hf:`` and a hub id, or None (the library's own), as it is."""
    if model and model.startswith("hf:") and Path(model[3:]).expanduser().is_dir():
        return "hf:" + os.path.realpath(Path(model[3:]).expanduser())
    if model and model != "default" and Path(model).exists():
        return os.path.realpath(model)
    return model
