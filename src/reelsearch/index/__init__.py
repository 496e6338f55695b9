"""The catalog of a library: media, frames, vectors and text cues, embedded (SQLite + FAISS in a folder) or shared
(PostgreSQL + pgvector), chosen once by ``open_library``.

``LibraryIndex`` keeps a folder's videos and images searchable: SQLite metadata and per-frame embeddings plus one
vector per video in a FAISS ``VectorIndex``; ``reelsearch.index.pg.PostgresLibrary`` keeps the same in one
PostgreSQL database. Both are ``LibraryTables`` (``reelsearch.index.tables``): the same sync and the same reads.
"""

from reelsearch.index.catalog import Catalog, StoredVideo
from reelsearch.index.library import LibraryIndex, default_index_dir
from reelsearch.index.media import EmbeddedMedia, make_thumbnail, sha256_file, walk_media
from reelsearch.index.open import is_database_url, open_library
from reelsearch.index.paths import MediaRoots
from reelsearch.index.sqlite import DamagedIndexError
from reelsearch.index.tables import LibraryError, LibraryTables, SyncReport, VideoRecord
from reelsearch.index.vectors import FaissIndex, ScoreFn, VectorIndex, VectorIndexError, top_k

__all__ = [
    "Catalog",
    "DamagedIndexError",
    "EmbeddedMedia",
    "FaissIndex",
    "VectorIndexError",
    "LibraryError",
    "LibraryIndex",
    "LibraryTables",
    "MediaRoots",
    "ScoreFn",
    "StoredVideo",
    "SyncReport",
    "VectorIndex",
    "VideoRecord",
    "default_index_dir",
    "is_database_url",
    "make_thumbnail",
    "open_library",
    "sha256_file",
    "top_k",
    "walk_media",
]
