"""The embedded catalog, in a folder: ``EmbeddedCatalog`` (SQLite, the source of truth, and a FAISS vector index
derived from it: ``vectors``), ``EmbeddedTextCues`` (speech and on-screen-text segments with FTS5), the SQLite files
that report damage as one clear error (``sqlite``), and their check and repair (``repair``)."""

from reelsearch.index.embedded.catalog import EmbeddedCatalog, default_index_dir
from reelsearch.index.embedded.repair import RepairReport, check_index, repair_index
from reelsearch.index.embedded.sqlite import DamagedIndexError
from reelsearch.index.embedded.textcues import EmbeddedTextCues
from reelsearch.index.embedded.vectors import FaissIndex

__all__ = ["DamagedIndexError", "EmbeddedCatalog", "EmbeddedTextCues", "FaissIndex", "RepairReport", "check_index",
           "default_index_dir", "repair_index"]
