"""The PostgreSQL catalog's bulk writes by binary COPY (``reelsearch.index.pg.copy``): a library loaded by COPY reads
back as one loaded one INSERT per row does (frames, thumbnails, detail, segments, biases, dates, a file without a
picture), a load interrupted mid-way keeps its committed batches and resumes, a row the server refuses is named by its
file, and a first load makes its HNSW indexes after its rows."""

from __future__ import annotations

import types

import numpy as np
import pytest

from reelsearch.index.media import EmbeddedMedia
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.pg import copy as pg_copy
from reelsearch.index.pg.database import CopyError
from reelsearch.index.sync import CatalogSync
from reelsearch.index.sync_records import FileChange, FileToSync

DIM = 6


def library(n: int = 9, seed: int = 0) -> list[FileChange]:
    """``n`` files as a commit writes them: 1 to 3 segments each, thumbnails and detail on some, a bias, a date, no
    duration on one, and one file of sound alone."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        st = types.SimpleNamespace(st_size=1000 + i, st_mtime_ns=10**18 + i)
        path = f"/media/{'holiday/' if i % 3 == 0 else ''}clip é {i:02d}.mp4"
        if i == 4:  # sound alone: no vector, no frames, no segments
            media = EmbeddedMedia(None, None, np.zeros(0), 31.5)
        else:
            k, per = 1 + i % 3, 2
            frames = rng.standard_normal((k * per, DIM)).astype(np.float32)
            frames /= np.linalg.norm(frames, axis=1, keepdims=True)
            times = np.arange(k * per) * 0.5 + 0.25
            segments = frames.reshape(k, per, DIM).mean(axis=1)
            media = EmbeddedMedia(
                frames.mean(0), frames, times, None if i == 2 else float(k * per) * 0.5,
                [bytes([i, f]) * 7 for f in range(k * per)] if i % 2 else None, float(rng.uniform(-0.5, 0.5)),
                rng.uniform(0, 60, k * per).astype(np.float32) if i % 4 == 1 else None,
                segment_vectors=segments, segment_frames=np.stack([np.arange(k), np.arange(1, k + 1)], axis=1) * per,
                segment_times=np.stack([np.arange(k), np.arange(1, k + 1)], axis=1) * per * 0.5,
                segment_biases=rng.uniform(-0.5, 0.5, k))
        out.append(FileChange(FileToSync(path, st, None), f"{i:064x}", media.checked(DIM),
                              (1.6e9 + i * 86400.0, "container")))
    return out


def inserted_one_row_at_a_time(monkeypatch) -> None:
    """The catalog's writes as before COPY: one INSERT per row (``CatalogSync``'s own)."""
    monkeypatch.setattr(PostgresCatalog, "_insert_videos", CatalogSync._insert_videos)
    monkeypatch.setattr(PostgresCatalog, "_write_media", CatalogSync._write_media)


def read_back(lib: PostgresCatalog) -> list[tuple]:
    """Everything stored of every video, by path (ids aside): its record, its media, its segments."""
    out = []
    for record in sorted(lib.videos(), key=lambda r: r.path):
        media = lib.media(record.id)
        segs = lib.segments([record.id]).get(record.id)
        fields = {k: v for k, v in vars(record).items() if k not in ("id", "added_at", "updated_at")}
        arrays = [media.video_vector, media.frame_vectors, media.timestamps, media.detail]
        if segs is not None:
            arrays += [segs.starts, segs.ends, segs.firsts, segs.counts, segs.rows, segs.biases]
        out.append((fields, media.duration, media.thumbnails, media.bias,
                    [None if a is None else (a.dtype.str, a.shape, a.tobytes()) for a in arrays]))
    return out


def test_a_library_loaded_by_copy_reads_back_as_one_inserted_row_by_row(pg_server, pg_url, monkeypatch):
    changes = library()
    with PostgresCatalog(pg_url) as lib:
        lib._commit(changes[:5], [], "model-a")
        lib._commit(changes[5:], [], "model-a")
        by_copy = read_back(lib)
        ids = lib.ids()
    other = pg_server.create_database()
    try:
        with monkeypatch.context() as patch:
            inserted_one_row_at_a_time(patch)
            with PostgresCatalog(pg_server.url(other)) as lib:
                lib._commit(changes[:5], [], "model-a")
                lib._commit(changes[5:], [], "model-a")
                by_insert = read_back(lib)
                assert lib.ids() == ids
    finally:
        pg_server.drop_database(other)
    assert len(by_copy) == 9 and by_copy == by_insert
    assert sum(r[4][0] is None for r in by_copy) == 1  # the file of sound alone: no vector
    assert {len(r[4][4][1]) for r in by_copy if r[4][0] is not None} == {1}  # segments read back (1-D starts)


def test_a_rewritten_video_replaces_its_rows(pg_url):
    """A changed file (its row kept, its frames and segments written again by COPY) leaves nothing of before."""
    first, second = library(3, seed=1), library(3, seed=2)
    with PostgresCatalog(pg_url) as lib:
        lib._commit(first, [], "m")
        stored = {r.path: r for r in lib.videos()}
        again = [c._replace(file=c.file._replace(stored=types.SimpleNamespace(id=int(stored[c.file.path].id))))
                 for c in second]
        lib._commit(again, [], "m")
        for change in second:
            vid = lib.find(change.file.path)
            media = lib.media(vid)
            assert np.array_equal(media.frame_vectors, change.media.frame_vectors.astype(np.float16).astype(np.float32))
            assert len(lib.segments([vid])[vid]) == len(change.media.segment_vectors)
        assert lib._db.execute("SELECT count(*) FROM frames").fetchone()[0] == sum(
            len(c.media.timestamps) for c in second)


def test_an_interrupted_load_keeps_its_committed_batches_and_resumes(pg_server, pg_url, tmp_path, monkeypatch):
    changes = library(7)
    with PostgresCatalog(pg_url) as source:
        source._commit(changes, [], "model-a")
        expected = read_back(source)
    target_db = pg_server.create_database()
    try:
        real, calls = pg_copy.copy_media, []

        def dies_in_the_third_batch(db, written):
            calls.append(len(written))
            if len(calls) == 3:
                raise KeyboardInterrupt("killed mid-batch")
            real(db, written)

        with PostgresCatalog(pg_url) as source, PostgresCatalog(pg_server.url(target_db)) as target:
            monkeypatch.setattr("reelsearch.index.pg.catalog.copy_media", dies_in_the_third_batch)
            with pytest.raises(KeyboardInterrupt):
                target.copy_from(source, progress=False, commit_every=2)
            assert len(target) == 4  # two batches committed; the third rolled back whole
            assert target._db.execute("SELECT count(*) FROM frame_vectors").fetchone()[0] == sum(
                r[4][0] is not None for r in read_back(target))
            monkeypatch.setattr("reelsearch.index.pg.catalog.copy_media", real)
            report = target.copy_from(source, progress=False, commit_every=2)
            assert len(report.unchanged) == 4 and len(report.added) == 3
            assert read_back(target) == expected
            assert target._db.execute("SELECT count(*) FROM videos").fetchone()[0] == 7
    finally:
        pg_server.drop_database(target_db)


def test_a_refused_row_is_named_by_its_file_and_nothing_of_its_batch_stays(pg_url):
    changes = library(4)
    with PostgresCatalog(pg_url) as lib:
        lib._commit(changes[:2], [], "m")
        again = changes[2:] + [changes[1]]  # stored already, but written as new: the path is unique
        with pytest.raises(CopyError, match=r"clip é 01\.mp4: its videos row was refused: .*duplicate key"):
            lib._commit(again, [], "m")
        assert len(lib) == 2 and lib.find(changes[2].file.path) is None
        assert lib._db.execute("SELECT count(*) FROM frames").fetchone()[0] == sum(
            len(c.media.timestamps) for c in changes[:2])


def test_binary_rows_are_postgresql_s_own(pg_url):
    """Each column type's encoding read back by the server as the value written (NULLs, non-ASCII text, bytes)."""
    with PostgresCatalog(pg_url) as lib:
        lib._db.execute("CREATE TABLE probe (a bigint, b integer, c double precision, d text, e bytea, f vector(3))")
        rows = [(2**40, -7, 0.1, "é ü", b"\x00\xff", np.array([1.5, -2.0, 1e-8], np.float32)),
                (None, None, None, None, None, None)]
        pg_copy.copy_rows(lib._db, ("probe", "a, b, c, d, e, f", ("int8", "int4", "float8", "text", "bytea", "vector")),
                          rows, ["one", "two"])
        got = lib._db.execute("SELECT a, b, c, d, e, f::text FROM probe ORDER BY a NULLS LAST").fetchall()
    assert got[0][:5] == (2**40, -7, 0.1, "é ü", b"\x00\xff") and got[0][5] == "[1.5,-2,1e-08]"
    assert got[1] == (None,) * 6


def hnsw_indexes(lib: PostgresCatalog) -> set[str]:
    return {r[0] for r in lib._db.execute("SELECT indexname FROM pg_indexes WHERE indexname IN ('videos_hnsw', "
                                          "'video_segments_hnsw')")}


def test_a_first_load_makes_the_hnsw_indexes_once_after_its_rows(pg_url, tmp_path):
    """A sync into an empty catalog commits its rows with no HNSW index to update row by row, then makes the videos'
    index at its end (images: one segment each, so no segments' index: searches rank the videos'); a sync that finds
    it missing (its writer died before the end) makes it."""
    from test_index_library import FakeEmbedder, write_png

    for i in range(6):
        write_png(tmp_path / "media" / f"img{i}.png", seed=i)
    with PostgresCatalog(pg_url) as lib:
        during = []
        commit = lib._commit
        lib._commit = lambda *a: commit(*a) or during.append(hnsw_indexes(lib))
        report = lib.sync([tmp_path / "media"], FakeEmbedder(), progress=False, commit_every=2)
        assert len(report.added) == 6 and during[:3] == [set()] * 3 and hnsw_indexes(lib) == {"videos_hnsw"}
        assert not lib.several_segments()
        lib._db.execute("DROP INDEX videos_hnsw")
        assert lib.sync([tmp_path / "media"], FakeEmbedder(), progress=False).summary().startswith("0 added")
        assert hnsw_indexes(lib) == {"videos_hnsw"}


def test_the_segments_index_is_made_once_a_video_has_several_segments(pg_url):
    """Clips of one segment each: the videos' HNSW index alone (the segments' would repeat it); once a video of
    several segments is committed, the next ``_synced`` makes the segments' index, and a segments search by HNSW
    answers as an exact one."""
    changes = library(9)
    one = {c.file.path for c in changes if c.media.pictured and len(c.media.segment_vectors) == 1}
    clips = [c for c in changes if c.file.path in one]
    with PostgresCatalog(pg_url, threshold=0) as lib:
        lib._commit(clips, [], "m")
        lib._synced()
        assert hnsw_indexes(lib) == {"videos_hnsw"} and lib.segment_count() == lib.row_count() == len(clips)
        lib._commit([c for c in changes if c.file.path not in one], [], "m")
        assert lib.several_segments() and hnsw_indexes(lib) == {"videos_hnsw"}
        lib._synced()
        assert hnsw_indexes(lib) == {"videos_hnsw", "video_segments_hnsw"}
        q = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
        by_index = lib.nearest_segments(q, 5)
        lib.threshold = 10**6
        exact = lib.nearest_segments(q, 5)
    assert by_index[0] == exact[0] and np.allclose(by_index[1], exact[1], atol=1e-5)


def test_migration_9_keeps_frame_vectors_out_of_line_uncompressed_and_those_stored_before(pg_url):
    """Schema 9: ``frame_vectors.vectors`` is ``STORAGE EXTERNAL`` (no compression tried: float16 embeddings do not
    compress); a catalog of schema 8 migrates with its rows read back unchanged, and a long value written after is
    stored uncompressed (the same value was compressed before)."""
    from reelsearch.index.pg.schema import LATEST

    def storage(lib) -> str:
        return lib._db.execute("SELECT attstorage FROM pg_attribute WHERE attrelid = 'frame_vectors'::regclass AND "
                               "attname = 'vectors'").fetchone()[0]

    class Undo(Exception):
        pass

    def compression_of_a_long_value(lib) -> str | None:
        """How a long compressible value written now is stored (None: uncompressed), in a transaction rolled back."""
        found = []
        with pytest.raises(Undo), lib._db.transaction():
            first = lib._db.execute("SELECT min(video_id) FROM frame_vectors").fetchone()[0]
            lib._db.execute("UPDATE frame_vectors SET vectors = decode(repeat('00', 20000), 'hex') WHERE video_id = ?",
                            (first,))
            found.append(lib._db.execute("SELECT pg_column_compression(vectors) FROM frame_vectors WHERE video_id = ?",
                                         (first,)).fetchone()[0])
            raise Undo
        return found[0]

    with PostgresCatalog(pg_url) as lib:
        assert lib.schema == LATEST and storage(lib) == "e"
        lib._db.execute("ALTER TABLE frame_vectors ALTER COLUMN vectors SET STORAGE EXTENDED")  # as schema 8 had it
        lib._db.execute("DELETE FROM schema_version WHERE version >= 9")
        lib._commit(library(), [], "m")
        before = read_back(lib)
        assert compression_of_a_long_value(lib) is not None
    with PostgresCatalog(pg_url) as lib:
        assert lib.schema == LATEST and storage(lib) == "e" and read_back(lib) == before
        assert compression_of_a_long_value(lib) is None


def test_an_index_build_gets_the_memory_its_graph_needs_for_its_transaction(pg_url):
    """``schema.hnsw_indexes`` raises ``maintenance_work_mem`` for its transaction to the graph's estimated size
    (value, neighbours and element of each row, with a quarter to spare), at most GRAPH_MEMORY_MAX_KIB, and never
    lowers a larger setting."""
    from reelsearch.index.pg.schema import GRAPH_MEMORY_MAX_KIB
    from reelsearch.index.pg.schema import hnsw_indexes as make_indexes

    with PostgresCatalog(pg_url) as lib:
        lib._commit(library(), [], "m")
        db = lib._db

        def memory() -> int:
            return db.execute("SELECT setting::bigint FROM pg_settings WHERE name = ?",
                              ("maintenance_work_mem",)).fetchone()[0]

        def built(rows: int) -> int:
            with db.transaction():
                make_indexes(db, DIM, 16, 64, rows, True)
                return memory()

        default = memory()
        assert built(100_000) == 100_000 * (2 * (DIM + 1) + 8 + 32 * 16 + 128) * 5 // 4 // 1024 > default
        assert memory() == default and hnsw_indexes(lib) == {"videos_hnsw", "video_segments_hnsw"}
        assert built(10**9) == GRAPH_MEMORY_MAX_KIB and built(10) == default
        db.execute("SET maintenance_work_mem = '2GB'")
        assert built(10**9) == 2 * 1024 * 1024


def test_a_graph_that_will_not_fit_its_build_memory_is_warned_of_once_with_the_fix(pg_url, caplog):
    """``schema.build_memory``: past GRAPH_MEMORY_MAX_KIB the build gets the cap and a warning naming the rows, the
    memory the graph needs and the setting that gives it; a graph that fits (in the cap, or in a higher setting of the
    server's or role's, kept) none. ``hnsw_indexes`` logs it once a build, with the database, over a small table."""
    from reelsearch.index.pg.schema import GRAPH_MEMORY_MAX_KIB, build_memory, graph_kib
    from reelsearch.index.pg.schema import hnsw_indexes as make_indexes

    per_row = (2 * 1025 + 8 + 32 * 16 + 128) * 5 / 4  # bytes: halfvec, layer-0 neighbours, element, a quarter more
    assert graph_kib(1_000_000, 1024, 16) == int(1_000_000 * per_row) // 1024  # 3.4 GB: 3.1 GiB
    memory, warning = build_memory(1_000_000, 1024, 16, 65536)
    assert memory == GRAPH_MEMORY_MAX_KIB
    for part in ("1,000,000 rows", "3.1 GiB", "allows 1.0 GiB", "3x slower", "maintenance_work_mem = '4GB'",
                 "ALTER ROLE", "ALTER SYSTEM"):
        assert part in warning
    assert build_memory(100_000, 1024, 16, 65536) == (graph_kib(100_000, 1024, 16), None)  # fits in the cap
    assert build_memory(1_000_000, 1024, 16, 4 << 20) == (4 << 20, None)  # the server's 4 GB kept, and enough
    assert build_memory(1_000_000, 1024, 16, 3 << 20)[1] is not None  # 3 GB: not enough yet

    with PostgresCatalog(pg_url) as lib:
        lib._commit(library(), [], "m")
        for rows, warned in ((10**9, 1), (1000, 0)):
            lib._db.execute("DROP INDEX IF EXISTS videos_hnsw")
            caplog.clear()
            with caplog.at_level("WARNING", logger="reelsearch.index.pg.schema"), lib._db.transaction():
                make_indexes(lib._db, DIM, 16, 64, rows, False)
            assert len(caplog.records) == warned
            assert (f"{lib._db.location}: the HNSW graph of 1,000,000,000 rows" in caplog.text) == bool(warned)


def one_segment_library(n: int = 5, seed: int = 3) -> list[FileChange]:
    """``n`` clips without segments of their own (each one segment of every frame once checked), thumbnails on some,
    detail on some, a duration shorter than the last frame's time on one."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = 1 + i % 4
        frames = rng.standard_normal((t, DIM)).astype(np.float32)
        media = EmbeddedMedia(frames.mean(0), frames, np.arange(t) * 1.5 + 0.5, 0.1 if i == 1 else t * 1.5 + 1.0,
                              [bytes([i, f, 0]) for f in range(t)] if i % 2 == 0 else None,
                              float(rng.uniform(-0.5, 0.5)), rng.uniform(0, 9, t) if i % 3 == 0 else None)
        out.append(FileChange(FileToSync(f"/clips/{i}.mp4", types.SimpleNamespace(st_size=i, st_mtime_ns=i), None),
                              f"{i + 100:064x}", media.checked(DIM), (1.7e9, "container")))
    return out


def expected_rows(changes: list[FileChange]) -> tuple[list, list, list]:
    """What the frames, frame_vectors and video_segments tables should hold of ``changes`` (by path), computed from
    the media's fields as the schema defines them (one segment of every frame, the video's row and bias, for a video
    without segments of its own)."""
    frames, vectors, segments = [], [], []
    for change in sorted(changes, key=lambda c: c.file.path):
        m, path = change.media, change.file.path.encode()
        if not m.pictured:
            continue
        t = [float(v) for v in m.timestamps]
        thumbs = m.thumbnails or [None] * len(t)
        frames += [(path, i, t[i], None if thumbs[i] is None else bytes(thumbs[i])) for i in range(len(t))]
        half = b"".join(np.float16(v).tobytes() for v in np.asarray(m.frame_vectors).reshape(-1))
        detail = b"" if m.detail is None else b"".join(np.float32(v).tobytes() for v in m.detail)
        vectors.append((path, half, b"".join(np.float64(v).tobytes() for v in t), detail))
        bounds = [(float(a), float(b), int(f), int(g - f)) for (a, b), (f, g) in zip(
            m.segment_times, m.segment_frames, strict=True)]
        segments += [(path, s, *bounds[s], [float(v) for v in m.segment_vectors[s]], float(m.segment_biases[s]))
                     for s in range(len(bounds))]
    return frames, vectors, segments


def stored_rows(lib: PostgresCatalog) -> tuple[list, list, list]:
    """The frames, frame_vectors and video_segments rows as stored (by path; the vectors read as pgvector's text)."""
    db = lib._db
    frames = [(bytes(p), i, t, None if th is None else bytes(th)) for p, i, t, th in db.execute(
        "SELECT v.path, f.idx, f.t, f.thumbnail FROM frames f JOIN videos v ON v.id = f.video_id ORDER BY 1, 2")]
    vectors = [tuple(bytes(x) for x in r) for r in db.execute(
        "SELECT v.path, f.vectors, f.times, f.detail FROM frame_vectors f JOIN videos v ON v.id = f.video_id "
        "ORDER BY 1")]
    segments = [(bytes(p), s, a, b, f, n, [float(x) for x in vec.strip("[]").split(",")], bias)
                for p, s, a, b, f, n, vec, bias in db.execute(
                    "SELECT v.path, s.ordinal, s.start, s.stop, s.first_frame, s.n_frames, s.vector::text, s.bias "
                    "FROM video_segments s JOIN videos v ON v.id = s.video_id ORDER BY 1, 2")]
    return frames, vectors, segments


@pytest.mark.parametrize("make", [library, one_segment_library], ids=["segmented", "one segment"])
def test_the_batch_encoded_rows_are_the_media_s_own(pg_url, make):
    """Frames, frame vectors and segments stored by the batch-encoded COPY (``copy_media``), read back as stored,
    equal those computed from the media's fields (float16 frame vectors, float32 segment vectors, exactly); a one-
    segment library's segment is every frame with the video's row and bias (its ``checked`` defaults)."""
    changes = make()
    with PostgresCatalog(pg_url) as lib:
        lib._commit(changes[:3], [], "m")
        lib._commit(changes[3:], [], "m")
        frames, vectors, segments = stored_rows(lib)
    want = expected_rows(changes)
    assert frames == want[0] and vectors == want[1]
    assert [s[:6] + (s[7],) for s in segments] == [s[:6] + (s[7],) for s in want[2]]
    for got, expected in zip(segments, want[2], strict=True):  # float32 values, as written: np.float32 round trip
        assert np.array_equal(np.float32(got[6]), np.float32(expected[6]))
    if make is one_segment_library:
        for change in changes:
            path, m = change.file.path.encode(), change.media
            (row,) = [s for s in segments if s[0] == path]
            t = np.asarray(m.timestamps)
            assert row[1:6] == (0, t[0], max(t[-1], m.duration), 0, len(t)) and row[7] == m.bias
            assert np.array_equal(np.float32(row[6]), m.video_vector)


def test_fixed_rows_encode_as_row_by_row():
    """``fixed_rows``' numpy records are the bytes ``encode_row`` makes row by row (a segments' table of random
    values), and an ``int4`` out of range is refused, not wrapped."""
    rng = np.random.default_rng(5)
    n, types_ = 50, pg_copy.SEGMENTS[2]
    columns = [rng.integers(-2**62, 2**62, n), rng.integers(-2**31, 2**31, n), rng.standard_normal(n),
               rng.standard_normal(n), rng.integers(0, 10**6, n), rng.integers(1, 500, n),
               rng.standard_normal((n, 7)).astype(np.float32), rng.standard_normal(n)]
    by_row = b"".join(pg_copy.encode_row([c[i] if c.ndim > 1 else c[i].item() for c in columns], types_)
                      for i in range(n))
    assert pg_copy.fixed_rows(types_, columns).tobytes() == by_row
    with pytest.raises(ValueError, match="int4"):
        pg_copy.fixed_rows(("int4",), [np.array([2**31])])
