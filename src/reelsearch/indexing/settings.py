"""Whether a library exists where a command looks (``reelsearch.location``), and the model it records having been
built with (``reelsearch.search.library_model``), so later commands need no flags."""

from __future__ import annotations

from pathlib import Path

from reelsearch.errors import ReelsearchError
from reelsearch.index import is_database_url, open_catalog
from reelsearch.index.embedded.catalog import SQLITE_NAME
from reelsearch.models.query_model import DEFAULT_MODEL
from reelsearch.search.library_model import index_model


def index_exists(where: str | Path) -> bool:
    """Whether ``where`` holds a library (a database URL always may: its catalog is made when first opened)."""
    return is_database_url(where) or (Path(where) / SQLITE_NAME).is_file()


def require_index(where: str | Path) -> None:
    """ReelsearchError unless ``where`` holds a library index (saying how to build one)."""
    if not index_exists(where):
        raise ReelsearchError(f"{where}: no index here; build one with `reelsearch index PATH --index {where}`")


def remembered_model(where: str | Path, model: str | None) -> str:
    """``model``, else the one the library at ``where`` records (``reelsearch.search.library_model.index_model``),
    else the bundled one."""
    if model or not index_exists(where):
        return model or DEFAULT_MODEL
    with open_catalog(where) as catalog:
        return index_model(catalog, None)
