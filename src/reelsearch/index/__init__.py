"""Storage and search of video embeddings: vector indexes (FAISS embedded, Milvus) and the library index.

``LibraryIndex`` keeps a folder's videos and images searchable: SQLite metadata and per-frame embeddings plus one
vector per video in a ``VectorIndex`` (``FaissIndex`` or ``MilvusIndex``, same interface).
"""

from reelsearch.index.catalog import Catalog, StoredVideo
from reelsearch.index.library import LibraryError, LibraryIndex, SyncReport, VideoRecord, default_index_dir
from reelsearch.index.media import EmbeddedMedia, make_thumbnail, sha256_file, walk_media
from reelsearch.index.milvus import MilvusIndex  # imports pymilvus only when one is made
from reelsearch.index.scoring import inner_product_score
from reelsearch.index.vectors import FaissIndex, ScoreFn, VectorIndex, VectorIndexError, top_k

__all__ = [
    "Catalog",
    "EmbeddedMedia",
    "FaissIndex",
    "VectorIndexError",
    "LibraryError",
    "LibraryIndex",
    "MilvusIndex",
    "ScoreFn",
    "StoredVideo",
    "SyncReport",
    "VectorIndex",
    "VideoRecord",
    "default_index_dir",
    "inner_product_score",
    "make_thumbnail",
    "sha256_file",
    "top_k",
    "walk_media",
]
