"""The shared catalog on PostgreSQL + pgvector: ``PostgresLibrary`` (videos, frames, vectors, biases, the model id)
and ``PgTextCues`` (speech and on-screen-text segments with full-text search) in one database, versioned schema
migrations (``schema``), and the connection that keeps credentials out of every message (``database``)."""

from reelsearch.index.pg.database import DatabaseError, is_database_url, masked
from reelsearch.index.pg.library import PostgresLibrary
from reelsearch.index.pg.schema import LATEST, SchemaError
from reelsearch.index.pg.textcues import PgTextCues

__all__ = ["LATEST", "DatabaseError", "PgTextCues", "PostgresLibrary", "SchemaError", "is_database_url", "masked"]
