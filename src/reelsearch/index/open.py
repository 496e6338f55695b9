"""The one place a library's backend is chosen: a PostgreSQL URL opens the shared catalog, anything else a folder
with the embedded one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reelsearch.index.library import LibraryIndex
from reelsearch.index.paths import MediaRoots
from reelsearch.index.pg import PostgresLibrary, is_database_url
from reelsearch.index.tables import LibraryTables


def open_library(where: str | Path | LibraryTables | None = None, *,
                 media_roots: MediaRoots | Sequence[str] | None = None, **options) -> LibraryTables:
    """The library at ``where``: a ``postgresql://`` URL (PostgreSQL + pgvector), a folder (SQLite + FAISS; None:
    the user's default folder), or a library already open (returned as it is). ``media_roots``: ``OLD=NEW`` path
    mappings (``MediaRoots``); ``options`` go to the library (vector index settings)."""
    if isinstance(where, LibraryTables):
        return where
    roots = media_roots if isinstance(media_roots, MediaRoots) else MediaRoots(media_roots)
    if is_database_url(where):
        return PostgresLibrary(str(where), media_roots=roots, **options)
    return LibraryIndex(where, media_roots=roots, **options)
