"""The embedded catalog's SQLite schema (``reelsearch.index.embedded.catalog`` creates it and brings an earlier one up
to it; the PostgreSQL catalog's mirror is ``reelsearch.index.pg.schema``)."""

#: 2: videos.bias; 3: frame_vectors.detail; 4: videos.taken_at, taken_from; 5: video_segments; 6: videos.vector NULL
#: for a file without a picture; 7: vector files of product-quantised codes (the float32 HNSW files are rebuilt);
#: 8: video_segments a rowid table (``SEGMENTS_TABLE``)
SCHEMA_VERSION = 8

#: The videos' table (a name to make it under: schema 6 makes it again).
VIDEOS_SQL = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path BLOB NOT NULL UNIQUE,          -- absolute path, file-system bytes (os.fsencode)
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    duration REAL,
    n_frames INTEGER NOT NULL,
    model_id TEXT NOT NULL,
    added_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    gen INTEGER NOT NULL,               -- generation of the commit that last wrote the vector
    vector BLOB,                        -- float32 [D], the video-level embedding; NULL: no picture (sound alone)
    -- bias: added to every query's score of the video (a querybank offset, negated)
    bias REAL NOT NULL DEFAULT 0,
    taken_at REAL,                      -- when it was taken, seconds since the epoch (NULL: indexed before schema 4,
    taken_from TEXT                     -- read by the next sync), and from where: container, exif or file
);
"""
#: The tables (``reelsearch.index.tables``) and what only the embedded catalog has (``tombstones``).
SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
""" + VIDEOS_SQL.format(name="videos") + """
CREATE INDEX IF NOT EXISTS videos_sound_only ON videos (id) WHERE vector IS NULL;
CREATE INDEX IF NOT EXISTS videos_sha256 ON videos (sha256);
CREATE INDEX IF NOT EXISTS videos_gen ON videos (gen);
CREATE INDEX IF NOT EXISTS videos_bias ON videos (bias);
CREATE TABLE IF NOT EXISTS frames (
    video_id INTEGER NOT NULL REFERENCES videos (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    t REAL NOT NULL,                    -- seconds from the start
    thumbnail BLOB,                     -- small JPEG/PNG, or NULL
    PRIMARY KEY (video_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS frame_vectors (
    video_id INTEGER PRIMARY KEY REFERENCES videos (id) ON DELETE CASCADE,
    vectors BLOB NOT NULL,              -- float16 [T, D], row i = frame idx i
    times BLOB NOT NULL,                -- float64 [T], the frames' t (copied here for a one-row moment lookup)
    detail BLOB                         -- float32 [T], how much each frame shows (empty: not measurable; NULL:
                                        -- indexed before schema 3, measured on the thumbnails by the next sync)
);
CREATE TABLE IF NOT EXISTS tombstones (id INTEGER PRIMARY KEY, gen INTEGER NOT NULL);
"""
#: Schema 5: each video's segments (the unit of retrieval); a table to make under ``name``. A rowid table since
#: schema 8: WITHOUT ROWID (before) keeps whole rows, 4 KiB vectors and all, in the key's b-tree, a few to a page, so
#: finding a video's segments read about eight levels of pages (0.2-0.3 ms of a search's 10 hits; 0.06-0.1 ms now).
SEGMENTS_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    video_id INTEGER NOT NULL REFERENCES videos (id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,           -- 0, 1, ... in time order
    start REAL NOT NULL,                -- seconds: on screen over [start, stop)
    stop REAL NOT NULL,
    first_frame INTEGER NOT NULL,       -- its frames are frames.idx first_frame .. first_frame + n_frames - 1
    n_frames INTEGER NOT NULL,
    vector BLOB NOT NULL,               -- float32 [D], the model's video encoder over the segment's frames
    bias REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (video_id, ordinal)
);
"""
SEGMENTS_SQL = SEGMENTS_TABLE.format(name="video_segments")
#: Schema 4 -> 5: each video stored before segments is one segment (its row and bias, all its frames) until the
#: next sync re-embeds it (the index's model id records the sampling and segmenting: docs/index.md).
ONE_SEGMENT_EACH = """
INSERT OR IGNORE INTO video_segments (video_id, ordinal, start, stop, first_frame, n_frames, vector, bias)
SELECT id, 0, 0, COALESCE(duration, 0), 0, n_frames, vector, bias FROM videos
"""
