"""Where a command's library is (``--db URL`` / ``REELSEARCH_DB``, else ``--index DIR`` or the default folder), and
the model it remembers having been built with (``SqlCatalog.settings``), so later commands need no flags."""

from __future__ import annotations

import os
from pathlib import Path

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.index import default_index_dir, is_database_url, open_catalog
from reelsearch.index.embedded.catalog import SQLITE_NAME
from reelsearch.index.pg import masked

#: The environment variable naming the PostgreSQL catalog when neither ``--db`` nor ``--index`` is given.
DB_ENV = "REELSEARCH_DB"


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


def index_exists(where: str | Path) -> bool:
    """Whether ``where`` holds a library (a database URL always may: its catalog is made when first opened)."""
    return is_database_url(where) or (Path(where) / SQLITE_NAME).is_file()


def require_index(where: str | Path) -> None:
    """ReelsearchError unless ``where`` holds a library index (saying how to build one)."""
    if not index_exists(where):
        raise ReelsearchError(f"{where}: no index here; build one with `reelsearch index PATH --index {where}`")


def remembered_model(where: str | Path, model: str | None) -> str:
    """``model``, else the one the library at ``where`` was built with, else "default"."""
    if model:
        return model
    if not index_exists(where):
        return "default"
    with open_catalog(where) as catalog:
        return catalog.settings().get("model") or "default"


def model_setting(model: str, frames_per_second: float | None = None) -> dict:
    """What a library remembers of how it was built: the model (an absolute path, or a name such as "default") and
    the frames sampled a second (``Searcher.frames_per_second``, when given)."""
    if model != "default" and Path(model).exists():
        model = str(Path(model).resolve())
    return {"model": model} | ({} if frames_per_second is None else {"frames_per_second": frames_per_second})
