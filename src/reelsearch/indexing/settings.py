"""Whether a library exists where a command looks (``reelsearch.location``), and the model it remembers having been
built with (``SqlCatalog.settings``), so later commands need no flags."""

from __future__ import annotations

from pathlib import Path

from reelsearch.errors import ReelsearchError
from reelsearch.index import is_database_url, open_catalog
from reelsearch.index.embedded.catalog import SQLITE_NAME
from reelsearch.location import model_location


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
    rate = {} if frames_per_second is None else {"frames_per_second": frames_per_second}
    return {"model": model_location(model)} | rate
