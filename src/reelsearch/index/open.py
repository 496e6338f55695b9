"""The one place a catalog's backend is chosen: a PostgreSQL URL opens the shared catalog, anything else a folder
with the embedded one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reelsearch.index.embedded import EmbeddedCatalog
from reelsearch.index.paths import MediaRoots
from reelsearch.index.pg import PostgresCatalog, is_database_url
from reelsearch.index.tables import SqlCatalog


def open_catalog(where: str | Path | SqlCatalog | None = None, *,
                 media_roots: MediaRoots | Sequence[str] | None = None, **options) -> SqlCatalog:
    """The catalog at ``where``: a ``postgresql://`` URL (PostgreSQL + pgvector), a folder (SQLite + FAISS; None:
    the user's default folder), or a catalog already open (returned as it is). ``media_roots``: ``OLD=NEW`` path
    mappings (``MediaRoots``); ``options`` go to the catalog (vector index settings)."""
    if isinstance(where, SqlCatalog):
        return where
    roots = media_roots if isinstance(media_roots, MediaRoots) else MediaRoots(media_roots)
    if is_database_url(where):
        return PostgresCatalog(str(where), media_roots=roots, **options)
    return EmbeddedCatalog(where, media_roots=roots, **options)
