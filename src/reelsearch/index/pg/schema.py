"""The PostgreSQL catalog's schema, in versioned migrations.

``schema_version`` holds one row per migration applied. ``migrate`` applies the missing ones in order, each in one
transaction, under an advisory lock (several processes starting at once migrate once); a database whose schema is
newer than this reelsearch knows is refused with a clear error, and so is one where the ``vector`` extension
(pgvector) is missing and cannot be created. A new migration is a function appended to ``MIGRATIONS``; a released
one is never changed.

The tables mirror the embedded catalog's (``reelsearch.index.tables``, ``reelsearch.index.textcues``): ``videos``
(``vector`` becomes ``vector(D)``, with an HNSW index over it and ``bias`` as ``halfvec``, when the first video of a
model sets D: ``PostgresCatalog``),
``frames``, ``frame_vectors``, ``meta``; ``video_segments`` (a video's segments, each with its vector: what a
text query ranks; an HNSW index over [vector, bias] as the videos'); ``segments`` (``words``: the segment's words
as ``tsvector``, GIN-indexed; ``folded``: lower-cased OCR text, trigram-indexed), ``runs``, ``cue_meta``; and
``claims``, one row per file a worker is indexing, with the lease that expires when the worker dies (for
cooperating index workers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from reelsearch.errors import ReelsearchError
from reelsearch.index.pg.database import Database, DatabaseError

logger = logging.getLogger(__name__)

#: Advisory lock key of migrations (any constant; "reelsearch" in ASCII, folded to 63 bits).
MIGRATION_LOCK = 0x7265656C736561


class SchemaError(ReelsearchError):
    """The database cannot hold a reelsearch catalog (a newer schema, a missing extension)."""


def _v1(db: Database) -> None:
    """The catalog: videos, frames, frame vectors, meta; text-cue segments and runs; claims."""
    db.execute("""
        CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
        CREATE TABLE videos (
            id bigserial PRIMARY KEY,
            path bytea NOT NULL UNIQUE,             -- absolute path as stored, file-system bytes
            size bigint NOT NULL,
            mtime_ns bigint NOT NULL,
            sha256 text NOT NULL,
            duration double precision,
            n_frames integer NOT NULL,
            model_id text NOT NULL,
            added_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            gen bigint NOT NULL,                    -- generation of the commit that last wrote the vector
            vector vector NOT NULL,                 -- the video-level embedding; vector(D) once D is known
            bias double precision NOT NULL DEFAULT 0
        );
        CREATE INDEX videos_sha256 ON videos (sha256);
        CREATE INDEX videos_bias ON videos (bias);
        CREATE TABLE frames (
            video_id bigint NOT NULL REFERENCES videos (id) ON DELETE CASCADE,
            idx integer NOT NULL,
            t double precision NOT NULL,
            thumbnail bytea,
            PRIMARY KEY (video_id, idx)
        );
        CREATE TABLE frame_vectors (
            video_id bigint PRIMARY KEY REFERENCES videos (id) ON DELETE CASCADE,
            vectors bytea NOT NULL,                 -- float16 [T, D]
            times bytea NOT NULL                    -- float64 [T]
        );
        CREATE TABLE claims (
            path bytea PRIMARY KEY,                 -- a file being indexed (as stored)
            worker text NOT NULL,                   -- host:pid of the worker
            expires_at timestamptz NOT NULL         -- the lease: another worker takes the file over after it
        );
        CREATE TABLE cue_meta (key text PRIMARY KEY, value text NOT NULL);
        CREATE TABLE segments (
            id bigserial PRIMARY KEY,
            video_id text NOT NULL,
            cue text NOT NULL,
            start double precision NOT NULL,
            "end" double precision NOT NULL,
            text text NOT NULL,
            confidence double precision NOT NULL,
            extra text,
            embedding bytea NOT NULL,               -- float16 [384], L2-normalised (MiniLM)
            words tsvector NOT NULL,                -- the words, cut and stemmed as the embedded index's FTS5 does
            folded text                             -- OCR segments: lower-cased text, for substring matches
        );
        CREATE INDEX segments_video ON segments (video_id, cue);
        CREATE INDEX segments_words ON segments USING gin (words);
        CREATE INDEX segments_folded ON segments USING gin (folded gin_trgm_ops) WHERE folded IS NOT NULL;
        CREATE TABLE runs (
            video_id text NOT NULL,
            cue text NOT NULL,
            recipe text NOT NULL,
            content text,
            n_segments integer NOT NULL,
            error text,
            updated_at double precision NOT NULL,
            PRIMARY KEY (video_id, cue)
        );
    """)


def _v2(db: Database) -> None:
    """How much each frame shows (float32 [T]; empty: not measurable; NULL for the videos stored before, measured
    from their thumbnails by the next sync: ``CatalogSync._fill_detail``)."""
    db.execute("ALTER TABLE frame_vectors ADD COLUMN detail bytea")


def _v3(db: Database) -> None:
    """Cooperating writers: a claim records the problem of a file its writer failed on (the others leave it until the
    lease expires); ``index_log`` has one row per file whose embeddings a writer committed."""
    db.execute("""
        ALTER TABLE claims ADD COLUMN error text;
        CREATE TABLE index_log (
            path bytea NOT NULL,
            worker text NOT NULL,
            committed_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX index_log_path ON index_log (path);
    """)


#: The most dimensions pgvector's HNSW index takes for ``halfvec`` (2,000 for ``vector``).
HNSW_MAX_DIM = 4000


def _v4(db: Database) -> None:
    """The HNSW index over the vectors as ``halfvec`` in place of the one over ``vector``, with the same M and
    efConstruction (replaced by version 6's)."""
    _rebuild_hnsw(db, folded=False)


def _v6(db: Database) -> None:
    """The HNSW index over [vector, bias] (``hnsw_index``) in place of the one over the vectors alone: one search
    ranks by score + bias. Rebuilt with the same M and efConstruction (on a large catalog this takes minutes)."""
    _rebuild_hnsw(db, folded=True)


def _rebuild_hnsw(db: Database, folded: bool) -> None:
    """``videos_hnsw`` dropped and made again by ``hnsw_index`` with its M and efConstruction (nothing without
    vectors yet: the first video makes the index)."""
    old = db.execute("SELECT c.reloptions FROM pg_class c WHERE c.oid = to_regclass('videos_hnsw')").fetchone()
    if old is None:
        return
    options = dict(o.split("=", 1) for o in old[0] or [])
    db.execute("DROP INDEX videos_hnsw")
    dim = db.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'videos'::regclass AND attname = "
                     "'vector'").fetchone()[0]
    hnsw_index(db, dim, int(options.get("m", 16)), int(options.get("ef_construction", 64)), folded=folded)


#: The HNSW index's expression, of a width ``dim`` = D + 1: each video's row and its bias, as ``halfvec``. A query
#: [q, 1] ranks by q . row + bias, [q, 0] by q . row alone.
FOLDED = "((vector || ARRAY[bias]::vector)::halfvec({dim}))"
#: The expression of schema versions 4 and 5: the rows alone (width D).
ROWS_ONLY = "(vector::halfvec({dim}))"


def hnsw_index(db: Database, dim: int, m: int, ef_construction: int, *, folded: bool = True) -> None:
    """Make ``videos_hnsw``: HNSW, inner product, over [``vector(dim)``, bias] cast to ``halfvec`` (float16,
    ``FOLDED``; ``folded=False``: the rows alone, as schema 4 made it). It is a third of a float32 index's size and
    loses no recall@10 once its candidates are scored in float32, which ``PostgresCatalog.nearest`` does
    (docs/benchmarks.md, "halfvec"); the bias in the index makes one search rank by score + bias. None above
    HNSW_MAX_DIM: searches scan."""
    width = int(dim) + 1 if folded else int(dim)
    if width <= HNSW_MAX_DIM:
        expression = (FOLDED if folded else ROWS_ONLY).format(dim=width)
        db.execute(f"CREATE INDEX IF NOT EXISTS videos_hnsw ON videos USING hnsw ({expression} halfvec_ip_ops) "
                   f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})")


#: The most memory (KiB) ``hnsw_indexes`` lets one index build take unasked (``maintenance_work_mem``, this
#: transaction): a shared server's RAM is not the client's to spend; a higher setting of the server's or the role's
#: is used as it is.
GRAPH_MEMORY_MAX_KIB = 1 << 20


def graph_kib(rows: int, dim: int, m: int) -> int:
    """KiB that pgvector's HNSW graph of ``rows`` rows of width ``dim`` + 1 at ``m`` takes to build in memory: a row's
    halfvec value, its layer-0 neighbours (2M of 16 bytes), the element; a quarter to spare."""
    return rows * (2 * (int(dim) + 1) + 8 + 32 * int(m) + 128) * 5 // 4 // 1024


def build_memory(rows: int, dim: int, m: int, setting_kib: int) -> tuple[int, str | None]:
    """The ``maintenance_work_mem`` (KiB) to build the HNSW graph of ``rows`` rows in: its size (``graph_kib``), at
    most GRAPH_MEMORY_MAX_KIB, never below ``setting_kib`` (the session's); and, when the graph will not fit in it, a
    warning saying what it needs and how to give it."""
    need = graph_kib(rows, dim, m)
    memory = max(int(setting_kib), min(GRAPH_MEMORY_MAX_KIB, need))
    if need <= memory:
        return memory, None
    gib = -(-need // (1 << 20))
    return memory, (f"the HNSW graph of {rows:,} rows needs about {need / (1 << 20):.1f} GiB to build in memory; "
                    f"maintenance_work_mem allows {memory / (1 << 20):.1f} GiB (reelsearch raises it to at most "
                    f"{GRAPH_MEMORY_MAX_KIB >> 20} GiB itself), so pgvector builds it about 3x slower: give the "
                    f"indexing role more (ALTER ROLE name SET maintenance_work_mem = '{gib}GB') or the server "
                    f"(ALTER SYSTEM SET maintenance_work_mem = '{gib}GB'; SELECT pg_reload_conf())")


def hnsw_indexes(db: Database, dim: int, m: int, ef_construction: int, rows: int, segments: bool) -> None:
    """Make the videos' HNSW index and, when ``segments``, the segments' (those missing), with
    ``maintenance_work_mem`` raised for this transaction to hold the graph of ``rows`` rows (``build_memory``; a
    warning logged when it will not fit): pgvector builds in memory while the graph fits and about 3x slower once it
    does not (100,000 rows of 1,025: 169 s in 1 GB, 539 s in PostgreSQL's default 64 MB; docs/benchmarks.md)."""
    setting = db.execute("SELECT setting::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'").fetchone()[0]
    memory, warning = build_memory(rows, dim, m, setting)
    if warning:
        logger.warning("%s: %s", db.location, warning)
    if memory > setting:
        db.execute("SELECT set_config('maintenance_work_mem', ?, true)", (f"{memory}kB",))
    hnsw_index(db, dim, m, ef_construction)
    if segments:
        segments_hnsw_index(db, dim, m, ef_construction)


def _v5(db: Database) -> None:
    """When each video was taken (``reelsearch.media.dates``): seconds since the epoch and its source; NULL for the
    videos stored before, read by the next sync (``CatalogSync._fill_taken``; the file's mtime meanwhile)."""
    db.execute("""
        ALTER TABLE videos ADD COLUMN taken_at double precision;
        ALTER TABLE videos ADD COLUMN taken_from text;
    """)


#: The segments' HNSW index's expression, as ``FOLDED`` for the videos'.
SEGMENTS_FOLDED = FOLDED


def _v7(db: Database) -> None:
    """``video_segments``: one row per segment of a video (the unit of retrieval), its vector (of the videos' width,
    with an HNSW index over [vector, bias] as the videos'); each video stored before is one segment (its row and
    bias, all its frames) until the next sync re-embeds it."""
    db.execute("""
        CREATE TABLE video_segments (
            video_id bigint NOT NULL REFERENCES videos (id) ON DELETE CASCADE,
            ordinal integer NOT NULL,
            start double precision NOT NULL,
            stop double precision NOT NULL,
            first_frame integer NOT NULL,
            n_frames integer NOT NULL,
            vector vector NOT NULL,
            bias double precision NOT NULL DEFAULT 0,
            PRIMARY KEY (video_id, ordinal)
        );
        INSERT INTO video_segments (video_id, ordinal, start, stop, first_frame, n_frames, vector, bias)
        SELECT id, 0, 0, COALESCE(duration, 0), 0, n_frames, vector, bias FROM videos;
    """)
    dim = db.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'videos'::regclass AND attname = "
                     "'vector'").fetchone()[0]
    old = db.execute("SELECT c.reloptions FROM pg_class c WHERE c.oid = to_regclass('videos_hnsw')").fetchone()
    if dim and dim > 0:
        db.execute(f"ALTER TABLE video_segments ALTER COLUMN vector TYPE vector({int(dim)})")
        options = dict(o.split("=", 1) for o in (old[0] or [] if old else []))
        segments_hnsw_index(db, dim, int(options.get("m", 16)), int(options.get("ef_construction", 64)))


def segments_hnsw_index(db: Database, dim: int, m: int, ef_construction: int) -> None:
    """Make ``video_segments_hnsw``, as ``hnsw_index`` makes the videos' (None above HNSW_MAX_DIM)."""
    if int(dim) + 1 <= HNSW_MAX_DIM:
        db.execute(f"CREATE INDEX IF NOT EXISTS video_segments_hnsw ON video_segments USING hnsw "
                   f"({SEGMENTS_FOLDED.format(dim=int(dim) + 1)} halfvec_ip_ops) "
                   f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})")


def _v8(db: Database) -> None:
    """A file without a picture (sound alone) has no vector: ``videos.vector`` may be NULL (the HNSW index holds no
    NULL; a partial index lists them). Those an earlier version stored with zero rows (a zero vector, one placeholder
    frame) lose them, and the generation moves on (what readers hold of them is out of date)."""
    db.execute("""
        ALTER TABLE videos ALTER COLUMN vector DROP NOT NULL;
        CREATE INDEX IF NOT EXISTS videos_sound_only ON videos (id) WHERE vector IS NULL;
    """)
    zero = [r[0] for r in db.execute("SELECT id FROM videos WHERE n_frames = 1 AND vector_norm(vector) = 0")]
    if zero:
        db.execute("DELETE FROM frames WHERE video_id = ANY(?)", (zero,))
        db.execute("DELETE FROM frame_vectors WHERE video_id = ANY(?)", (zero,))
        db.execute("DELETE FROM video_segments WHERE video_id = ANY(?)", (zero,))
        db.execute("UPDATE videos SET vector = NULL, n_frames = 0, bias = 0 WHERE id = ANY(?)", (zero,))
        db.execute("INSERT INTO meta (key, value) VALUES ('gen', '1') ON CONFLICT (key) "
                   "DO UPDATE SET value = CAST(CAST(meta.value AS INTEGER) + 1 AS TEXT)")


def _v9(db: Database) -> None:
    """The frame vectors (float16 [T, D], 8 KiB for 4 frames of 1024: TOASTed) stored out of line as they are, not
    tried for compression first (``STORAGE EXTERNAL``): float16 embeddings do not compress, and the attempt cost the
    server about 10 us a value (docs/benchmarks.md, "PostgreSQL bulk load: where the server's time goes").
    Metadata only: the values stored before stay as they are."""
    db.execute("ALTER TABLE frame_vectors ALTER COLUMN vectors SET STORAGE EXTERNAL")


#: (version, what it does, the function that applies it), in order.
MIGRATIONS: list[tuple[int, str, Callable[[Database], None]]] = [
    (1, "the catalog: videos, frames, frame vectors, text cues, claims", _v1),
    (2, "frame_vectors.detail: how much each frame shows", _v2),
    (3, "claims.error, index_log: cooperating writers", _v3),
    (4, "the HNSW index over the vectors as halfvec", _v4),
    (5, "videos.taken_at, taken_from: when each video was taken", _v5),
    (6, "the HNSW index over the vectors and their biases", _v6),
    (7, "video_segments: each video's segments, their vectors and HNSW index", _v7),
    (8, "videos.vector NULL for a file without a picture, its zero rows dropped", _v8),
    (9, "frame_vectors.vectors stored out of line uncompressed", _v9),
]
LATEST = MIGRATIONS[-1][0]

#: Extensions the schema needs, and what each is for.
EXTENSIONS = {"vector": "pgvector: the vector columns and their HNSW index",
              "pg_trgm": "trigram search of on-screen text"}


def schema_version(db: Database) -> int:
    """The schema version of ``db`` (0: no reelsearch catalog yet)."""
    if db.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:
        return 0
    return int(db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])


def migrate(db: Database) -> int:
    """Bring ``db`` to the latest schema; its version. SchemaError for a newer schema or a missing extension."""
    version = schema_version(db)
    if version > LATEST:
        raise _too_new(db, version)
    if version == LATEST:
        return version
    for name, purpose in EXTENSIONS.items():
        _create_extension(db, name, purpose)
    _require_pgvector(db)
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, description text NOT "
                   "NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        version = schema_version(db)  # another process may have migrated while we waited for the lock
        if version > LATEST:
            raise _too_new(db, version)
        for number, description, apply in MIGRATIONS:
            if number > version:
                apply(db)
                db.execute("INSERT INTO schema_version (version, description) VALUES (?, ?)", (number, description))
    return LATEST


def _too_new(db: Database, version: int) -> SchemaError:
    return SchemaError(f"{db.location}: the catalog has schema version {version}, written by a newer reelsearch; "
                       f"this one reads versions up to {LATEST}: upgrade reelsearch (pip install -U reelsearch)")


#: The oldest pgvector with ``halfvec`` (the HNSW index's type).
PGVECTOR_MIN = (0, 7)


def _require_pgvector(db: Database) -> None:
    found = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    if tuple(int(p) for p in found.split(".")[:2] if p.isdigit()) < PGVECTOR_MIN:
        raise SchemaError(f"{db.location}: pgvector {found} is too old: reelsearch needs "
                          f"{'.'.join(map(str, PGVECTOR_MIN))} or later (halfvec): install it on the server, then "
                          "ALTER EXTENSION vector UPDATE; in this database")


def _create_extension(db: Database, name: str, purpose: str) -> None:
    if db.execute("SELECT 1 FROM pg_extension WHERE extname = ?", (name,)).fetchone():
        return
    try:
        db.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
    except DatabaseError as exc:
        if db.execute("SELECT 1 FROM pg_extension WHERE extname = ?", (name,)).fetchone():
            return  # another process created it meanwhile (workers starting at once on a new database)
        available = db.execute("SELECT 1 FROM pg_available_extensions WHERE name = ?", (name,)).fetchone()
        fix = (f"a superuser can run CREATE EXTENSION {name}; in this database" if available else
               f"install it on the server (the {name} extension package), then CREATE EXTENSION {name}; as a "
               "superuser")
        raise SchemaError(f"{db.location}: the {name} extension ({purpose}) is missing and this user cannot create "
                          f"it ({str(exc).split(': ', 1)[-1]}): {fix}") from None
