"""How hard PostgreSQL's HNSW graph is searched and how it is built, chosen from the rows (docs/benchmarks.md,
"PostgreSQL's recall at a million"): pgvector's ``hnsw.ef_search`` (the candidates a search keeps) and the graph's M and
ef_construction. A graph of more rows hides a query's best rows deeper, so the same setting finds fewer of them:
recall@10 0.985 at 100,000 rows but 0.843 at 1,000,000 with ef_search 128 (M 16, ef_construction 64). And whether the
server's ``shared_buffers`` hold the graphs (``check_buffers``): a search reads a few hundred of their pages."""

from __future__ import annotations

import logging
import math

from reelsearch.index.pg.database import Database

logger = logging.getLogger(__name__)

#: The most candidates one HNSW search returns (pgvector's limit of hnsw.ef_search); more are found by a scan.
MAX_EF_SEARCH = 1000
#: ``rows_ef``: hnsw.ef_search EF_SEARCH up to EF_ROWS rows, then growing as (rows / EF_ROWS) ** EF_POWER, to
#: MAX_EF_SEARCH at about 1,000,000 rows.
EF_SEARCH, EF_ROWS, EF_POWER = 128, 100_000, 0.9
#: pgvector's own default of hnsw.ef_search: another value in a session (the role's, the database's, the URL's
#: ``options=-c hnsw.ef_search=N``) is the user's, and taken instead of ``rows_ef``.
PGVECTOR_EF_SEARCH = "40"
#: ``rows_graph``: (M, ef_construction) of a graph built over fewer than GRAPH_ROWS rows, and from GRAPH_ROWS on.
SMALL_GRAPH, GRAPH_ROWS, LARGE_GRAPH = (16, 64), 500_000, (24, 128)


def rows_ef(rows: int, n: int) -> int:
    """pgvector's ``hnsw.ef_search`` for the ``n`` best of ``rows`` rows: EF_SEARCH up to EF_ROWS rows, then
    EF_SEARCH * (rows / EF_ROWS) ** EF_POWER; at least ``n``, at most MAX_EF_SEARCH."""
    grown = EF_SEARCH * (max(int(rows), EF_ROWS) / EF_ROWS) ** EF_POWER
    return min(MAX_EF_SEARCH, max(int(n), math.ceil(grown)))


def search_ef(given: int | None, rows: int, n: int) -> int:
    """``hnsw.ef_search`` for ``n`` candidates: ``given`` (a user's), else ``rows_ef`` of ``rows``; at least ``n``,
    at most MAX_EF_SEARCH."""
    if given is None:
        return rows_ef(rows, n)
    return min(MAX_EF_SEARCH, max(int(given), int(n)))


def users_ef(db: Database) -> int | None:
    """The session's ``hnsw.ef_search`` as the server set it up (read before the catalog sets its own), if not
    pgvector's default (PGVECTOR_EF_SEARCH): the user's; None otherwise (a value that is no number is logged)."""
    said = db.execute("SELECT current_setting('hnsw.ef_search', true)").fetchone()[0]
    if not said or said == PGVECTOR_EF_SEARCH:
        return None
    if not said.strip().isdigit():
        logger.warning("%s: hnsw.ef_search %r is no number: ignored", db.location, said)
        return None
    return int(said)


def rows_graph(rows: int) -> tuple[int, int]:
    """(M, ef_construction) of a graph built over ``rows`` rows: pgvector's defaults, SMALL_GRAPH, below GRAPH_ROWS;
    LARGE_GRAPH from there: at 100,000 rows it finds at ef_search 32 what pgvector's defaults find at 64, at
    1,000,000 0.953 of the exact top 10 at 256 and 0.987 at 1,000 (the defaults: 0.893, 0.954), for 2.0-2.2x the
    build time."""
    return LARGE_GRAPH if rows >= GRAPH_ROWS else SMALL_GRAPH


def buffers_advice(graphs: int, buffers: int) -> str | None:
    """What to tell when HNSW graphs of ``graphs`` bytes do not fit in ``buffers`` bytes of ``shared_buffers`` (None
    when they fit): a search then copies most of the pages it reads (some hundreds at 100,000 videos) from the
    operating system's cache into PostgreSQL's, evicting others: 1.7x the server's CPU a search at
    100,000 videos (docs/benchmarks.md, "PostgreSQL's search with its graph in shared_buffers")."""
    if graphs <= buffers:
        return None
    gib = max(1, math.ceil(1.5 * graphs / (1 << 30)))
    return (f"the HNSW indexes ({graphs / (1 << 20):,.0f} MiB) do not fit in the server's shared_buffers "
            f"({buffers / (1 << 20):,.0f} MiB), so searches are slower: give the server more (ALTER SYSTEM SET "
            f"shared_buffers = '{gib}GB'; then restart it) if it has the memory")


def check_buffers(db: Database) -> None:
    """Log ``buffers_advice`` of the catalog's HNSW indexes and the server's ``shared_buffers``."""
    graphs, buffers = db.execute(
        "SELECT COALESCE(pg_relation_size(to_regclass('videos_hnsw')), 0) "
        "+ COALESCE(pg_relation_size(to_regclass('video_segments_hnsw')), 0), "
        "pg_size_bytes(current_setting('shared_buffers'))").fetchone()
    advice = buffers_advice(int(graphs), int(buffers))
    if advice is not None:
        logger.warning("%s: %s", db.location, advice)
