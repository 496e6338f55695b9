"""The catalog of a library: media, frames, vectors and text cues, embedded (SQLite + FAISS in a folder) or shared
(PostgreSQL + pgvector), chosen once by ``open_catalog``.

``SqlCatalog`` (``reelsearch.index.tables``: the tables and their reads; ``reelsearch.index.sync``: how they are
filled) is written once for both: ``EmbeddedCatalog`` (``reelsearch.index.embedded``) keeps a folder's videos and
images in SQLite with one vector per video in a FAISS index, ``PostgresCatalog`` (``reelsearch.index.pg``) the same in
one PostgreSQL database. Search reads either through the ``Catalog`` interface (``reelsearch.index.catalog``).
"""

from reelsearch.index.catalog import Catalog, CatalogError, CatalogUnavailable, StoredVideo
from reelsearch.index.embedded import DamagedIndexError, EmbeddedCatalog, FaissIndex, default_index_dir
from reelsearch.index.media import EmbeddedMedia, make_thumbnail, sha256_file, walk_media
from reelsearch.index.open import open_catalog
from reelsearch.index.paths import MediaRoots
from reelsearch.index.pg import PostgresCatalog, is_database_url
from reelsearch.index.sync_records import SyncReport
from reelsearch.index.tables import SqlCatalog, VideoRecord
from reelsearch.index.vectors import ScoreFn, VectorIndex, VectorIndexError, top_k

__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogUnavailable",
    "DamagedIndexError",
    "EmbeddedCatalog",
    "EmbeddedMedia",
    "FaissIndex",
    "MediaRoots",
    "PostgresCatalog",
    "ScoreFn",
    "SqlCatalog",
    "StoredVideo",
    "SyncReport",
    "VectorIndex",
    "VectorIndexError",
    "VideoRecord",
    "default_index_dir",
    "is_database_url",
    "make_thumbnail",
    "open_catalog",
    "sha256_file",
    "top_k",
    "walk_media",
]
