"""The shared catalog on PostgreSQL + pgvector: ``PostgresCatalog`` (videos, frames, vectors, biases, the model id)
and ``PostgresTextCues`` (speech and on-screen-text segments with full-text search) in one database, versioned schema
migrations (``schema``), and the connection that keeps credentials out of every message (``database``)."""

from reelsearch.index.pg.catalog import PostgresCatalog
from reelsearch.index.pg.database import DatabaseError
from reelsearch.index.pg.schema import LATEST, SchemaError
from reelsearch.index.pg.textcues import PostgresTextCues
from reelsearch.location import is_database_url, masked

__all__ = ["LATEST", "DatabaseError", "PostgresCatalog", "PostgresTextCues", "SchemaError", "is_database_url",
           "masked"]
