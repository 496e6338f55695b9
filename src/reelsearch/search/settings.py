"""What an index directory remembers about how it was built (model, backend), so later commands need no flags."""

from __future__ import annotations

import json
from pathlib import Path

from reelsearch.errors import ReelsearchError
from reelsearch.index import default_index_dir
from reelsearch.index.library import SQLITE_NAME
from reelsearch.io import atomic_write_json

SETTINGS_NAME = "searcher.json"


def index_dir_or_default(index_dir: str | Path | None) -> Path:
    """``index_dir``, or the default location in the user's data directory."""
    if index_dir is not None:
        return Path(index_dir).expanduser()

    return default_index_dir()


def index_exists(index_dir: Path) -> bool:
    """Whether ``index_dir`` holds a library index."""
    return (index_dir / SQLITE_NAME).is_file()


def require_index(index_dir: Path) -> None:
    """ReelsearchError unless ``index_dir`` holds a library index (saying how to build one)."""
    if not index_exists(index_dir):
        raise ReelsearchError(f"{index_dir}: no index here; build one with `reelsearch index PATH --index "
                              f"{index_dir}`")


def read_settings(index_dir: Path) -> dict:
    """The stored settings ({} when none, or unreadable: they are only defaults)."""
    try:
        data = json.loads((index_dir / SETTINGS_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_settings(index_dir: Path, model: str, backend: str, uri: str | None) -> None:
    """Remember the model (absolute path, or "default"), backend and URI used to build ``index_dir``."""
    if model != "default" and Path(model).exists():
        model = str(Path(model).resolve())
    atomic_write_json(index_dir / SETTINGS_NAME, {"model": model, "backend": backend, "uri": uri})


def resolve(index_dir: str | Path | None, model: str | None, backend: str | None, uri: str | None):
    """(index dir, model, backend, uri): explicit values win, then the index's stored ones, then defaults."""
    directory = index_dir_or_default(index_dir)
    stored = read_settings(directory)
    return (directory, model or stored.get("model") or "default", backend or stored.get("backend") or "faiss",
            uri if uri is not None else stored.get("uri"))
