"""EmbeddedCatalog over real small files (PNGs and an MP4 generated here): sync, search, moments, crash safety.

The same test functions run on the embedded catalog (SQLite + FAISS) and on PostgreSQL + pgvector (a database of the
session's embedded server: tests/pg_fixtures.py). A library is searched through the search path
(``reelsearch.search.query.run_query``) with stand-in models that score a query vector by the plain inner product or
by a given score function.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import types

import numpy as np
import pytest

from fake_embedder import DIM, N_FRAMES, FakeEmbedder, fake_bias, fake_vectors
from reelsearch.index import EmbeddedCatalog, EmbeddedMedia, make_thumbnail
from reelsearch.index.embedded.catalog import CACHE_KIB, FAISS_NAME, SQLITE_NAME, WRITE_CACHE_KIB
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.sync_records import FileChange, FileToSync
from reelsearch.search.experts import Plan
from reelsearch.search.query import run_query
from reelsearch.search.sources import ExactScan, InnerProduct
from reelsearch.similarity import order_score_fn


class VectorModel:
    """A stand-in model whose query rows are the query vectors: the library is ranked by their inner product with
    the stored vectors (or by ``score``, a score function, when given)."""

    experts = {"vectors": None}

    def __init__(self, score=None):
        self.score = score

    def ann_query(self, query):
        return np.asarray(query, np.float32)


def search(lib, query, k, score_fn=None):
    """The ``k`` best videos of ``lib`` for a query vector [D] (inner product, or ``score_fn``'s), each video's bias
    added, with their best moments: the search path's SearchResults."""
    visual = InnerProduct(VectorModel(), lib) if score_fn is None else ExactScan(VectorModel(score_fn), lib)
    query = np.asarray(query, np.float32).reshape(1, -1)
    # a query of seven words or more: the search adds the querybank's offsets (the biases) to its scores
    return run_query(lib, visual, None, "a query of seven words or more", query, None, Plan(True, [], {"visual": 1.0}),
                     k)


def write_png(path, seed: int) -> None:
    import cv2

    img = np.random.default_rng(seed).integers(0, 256, (12, 16, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), img)


def vectors_of(path) -> tuple[np.ndarray, np.ndarray]:
    return fake_vectors(path.read_bytes())


@pytest.fixture(params=["embedded", "postgres"])
def open_catalog(request, tmp_path):
    """Factory: open (or reopen) the library: in tmp_path/index (embedded), or in a fresh PostgreSQL database."""
    opened = []
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None

    def open_():
        lib = PostgresCatalog(url) if url else EmbeddedCatalog(tmp_path / "index")
        opened.append(lib)
        return lib

    yield open_
    for lib in opened:
        if lib._db is not None:
            try:
                lib.close()
            except sqlite3.ProgrammingError:
                pass


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "videos"
    for i in range(6):
        write_png(root / ("sub" if i % 2 else "") / f"img{i}.png", seed=i)
    (root / "notes.txt").write_text("not media")
    return root


def check_consistent(lib) -> None:
    """Every video row has its frames, frame vectors and exactly one vector in the vector index, equal to its own."""
    ids = {r.id for r in lib.videos()}
    assert sorted(lib.ids()) == sorted(ids) and len(lib) == len(ids)
    for id_ in ids:
        media = lib.media(id_)
        assert media.frame_vectors.shape == (N_FRAMES, DIM)
        np.testing.assert_allclose(lib.rows([id_])[0], media.video_vector, atol=1e-6)


def test_sync_add_update_delete(open_catalog, folder):
    lib = open_catalog()
    emb = FakeEmbedder()
    rep = lib.sync([folder], emb, model_id="fake", progress=False)
    assert len(rep.added) == 6 and not rep.failed and len(lib) == 6
    assert sorted(emb.calls) == [f"img{i}.png" for i in range(6)]
    check_consistent(lib)

    rep = lib.sync([folder], emb, model_id="fake", progress=False)
    assert len(rep.unchanged) == 6 and not (rep.added or rep.updated or rep.removed)
    assert len(emb.calls) == 6

    write_png(folder / "img0.png", seed=100)  # changed content
    os.utime(folder / "sub" / "img1.png", ns=(1, 1))  # touched only: hashed, found unchanged, not re-embedded
    (folder / "sub" / "img3.png").unlink()
    write_png(folder / "new" / "img9.png", seed=9)
    rep = lib.sync([folder], emb, model_id="fake", progress=False)
    assert [os.path.basename(p) for p in rep.updated] == ["img0.png"]
    assert [os.path.basename(p) for p in rep.added] == ["img9.png"]
    assert [os.path.basename(p) for p in rep.removed] == ["img3.png"]
    assert len(rep.unchanged) == 4 and sorted(emb.calls[6:]) == ["img0.png", "img9.png"]
    assert len(lib) == 6
    check_consistent(lib)

    # the search finds the updated content at the same path, and nothing of the deleted file
    video, _ = vectors_of(folder / "img0.png")
    hits = search(lib, video, k=6)
    assert hits[0].path == str(folder / "img0.png") and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert str(folder / "sub" / "img3.png") not in {h.path for h in hits}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    lib.close()
    again = open_catalog()  # reopened from disk
    assert len(again) == 6 and search(again, video, k=1)[0].path == str(folder / "img0.png")


def test_failed_file_is_recorded_and_the_rest_indexed(open_catalog, folder):
    (folder / "broken.mp4").write_bytes(b"\x00not a video")
    lib = open_catalog()
    rep = lib.sync([folder, folder / "absent"], FakeEmbedder(fail_on={"broken.mp4", "img2.png"}), progress=False)
    failed = {os.path.basename(p): msg for p, msg in rep.failed}
    assert set(failed) == {"broken.mp4", "img2.png", "absent"}
    assert "cannot decode" in failed["img2.png"] and "no such file" in failed["absent"]
    assert len(rep.added) == 5 and len(lib) == 5
    # failures are retried next time
    rep = lib.sync([folder], FakeEmbedder(), progress=False)
    assert sorted(os.path.basename(p) for p in rep.added) == ["broken.mp4", "img2.png"]


def test_kill_mid_sync_keeps_a_consistent_index(open_catalog, folder):
    lib = open_catalog()
    with pytest.raises(KeyboardInterrupt):
        lib.sync([folder], FakeEmbedder(interrupt_after=3), progress=False, commit_every=2)
    lib.close()
    lib = open_catalog()
    # the committed batch of two, the third embedding never committed (both catalogs commit in batches)
    done = 2
    assert len(lib) == done
    check_consistent(lib)
    emb = FakeEmbedder()
    rep = lib.sync([folder], emb, progress=False)
    assert len(rep.added) == 6 - done and len(rep.unchanged) == done and len(emb.calls) == 6 - done
    check_consistent(lib)


def test_crash_before_vector_index_is_saved_is_replayed(open_catalog, folder, monkeypatch):
    lib = open_catalog()
    if not isinstance(lib, EmbeddedCatalog):
        pytest.skip("PostgreSQL commits each vector with its video: there is no derived vector index to replay")
    lib.sync([folder], FakeEmbedder(), progress=False)
    write_png(folder / "late.png", seed=50)
    (folder / "img4.png").unlink()

    def crash(*_a, **_k):
        raise KeyboardInterrupt("killed while saving the vector index")

    monkeypatch.setattr(type(lib.vectors), "save", crash)
    with pytest.raises(KeyboardInterrupt):
        lib.sync([folder], FakeEmbedder(), progress=False)
    monkeypatch.undo()
    lib.close()
    assert (lib.dir / FAISS_NAME).exists()
    lib = open_catalog()  # SQLite committed; the vector index catches up on open
    assert len(lib) == 6
    check_consistent(lib)
    video, _ = vectors_of(folder / "late.png")
    assert search(lib, video, k=1)[0].path == str(folder / "late.png")


def test_moment_is_the_best_frame(open_catalog, folder):
    lib = open_catalog()
    lib.sync([folder], FakeEmbedder(), progress=False)
    _, frames = vectors_of(folder / "sub" / "img5.png")
    hits = search(lib, frames[2], k=6)
    mine = next(h for h in hits if h.path == str(folder / "sub" / "img5.png"))
    ref = frames.astype(np.float16).astype(np.float32) @ frames[2]
    np.testing.assert_allclose([f.score for f in mine.frames], ref, atol=1e-5)
    assert mine.frame == 2 and mine.moment == pytest.approx(1.0)  # frame 2 at 2 x 0.5 s


def test_order_similarity_search_is_exact(open_catalog, folder):
    lib = open_catalog()
    lib.sync([folder], FakeEmbedder(), progress=False)
    q = np.abs(np.random.default_rng(11).standard_normal(DIM)).astype(np.float32) * 0.3
    hits = search(lib, q, k=6, score_fn=order_score_fn())
    ref = []
    for rec in lib.videos():
        v = lib.media(rec.id).video_vector
        ref.append((-sum(max(0.0, float(a) - float(b)) ** 2 for a, b in zip(q, v, strict=True)), rec.path))
    ref.sort(key=lambda s: -s[0])
    assert [h.path for h in hits] == [p for _, p in ref]
    np.testing.assert_allclose([h.score for h in hits], [s for s, _ in ref], rtol=1e-4, atol=1e-6)


def test_biases_are_added_to_the_scores_exactly(open_catalog, tmp_path):
    """Each video's bias (a querybank offset, negated) is added to its inner product: the vector index holds it, so
    its top k is the top k of score + bias. The biases here spread as widely as the scores, so the ranking changes;
    the result is the brute-force one, and the index's own top k without the bias is the raw inner product's."""
    root = tmp_path / "many"
    for i in range(60):
        write_png(root / f"p{i:02d}.png", seed=100 + i)
    lib = open_catalog()
    lib.sync([root], FakeEmbedder(biased=True), progress=False)
    truth = {}
    for rec in lib.videos():
        data = (root / os.path.basename(rec.path)).read_bytes()
        truth[rec.path] = (fake_vectors(data)[0], fake_bias(data))
        assert lib.media(rec.id).bias == pytest.approx(fake_bias(data))
    ids = [rec.id for rec in lib.videos()]
    assert lib.biases(ids) == pytest.approx([truth[lib.video(i).path][1] for i in ids])
    rng = np.random.default_rng(5)
    reordered = 0
    for _ in range(20):
        q = rng.standard_normal(DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        want = sorted(truth, key=lambda p: -(float(truth[p][0] @ q) + truth[p][1]))
        raw = sorted(truth, key=lambda p: -float(truth[p][0] @ q))
        for k in (1, 3, 10):
            hits = search(lib, q, k=k)
            assert [h.path for h in hits] == want[:k]
            assert [h.score for h in hits] == pytest.approx([float(truth[p][0] @ q) + truth[p][1] for p in want[:k]],
                                                           abs=1e-5)
        reordered += raw[:3] != want[:3]
        assert [lib.video(i).path for i in lib.nearest(q, 3)[0]] == raw[:3]
        assert [lib.video(i).path for i in lib.nearest(q, 3, biased=True)[0]] == want[:3]
    assert reordered >= 10  # the biases mattered
    os.rename(root / "p07.png", root / "moved.png")  # a moved file keeps its bias without being embedded again
    emb = FakeEmbedder(biased=False)
    lib.sync([root], emb, progress=False)
    assert emb.calls == [] and lib.media(lib.find(root / "moved.png")).bias == pytest.approx(
        fake_bias((root / "moved.png").read_bytes()))
    write_png(root / "p03.png", seed=999)  # new content, new bias: the next search reads it
    lib.sync([root], FakeEmbedder(biased=True), progress=False)
    assert lib.biases([lib.find(root / "p03.png")])[0] == pytest.approx(fake_bias((root / "p03.png").read_bytes()))


def test_frame_detail_of_an_older_index_is_measured_by_the_next_sync(tmp_path, folder):
    """Videos stored before frames had their detail (NULL) read as unmeasured, and the next sync measures it on
    their thumbnails: the luma standard deviation of each, checked against a direct computation."""
    import cv2

    from reelsearch.index.media import make_thumbnail

    rng = np.random.default_rng(0)
    frames = [np.zeros((40, 60, 3), np.uint8), rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)]
    thumbs = [make_thumbnail(f) for f in frames]

    def with_thumbs(path):
        media = FakeEmbedder()(path)
        media.timestamps, media.frame_vectors = media.timestamps[:2], media.frame_vectors[:2]
        media.thumbnails = thumbs
        return media

    with EmbeddedCatalog(tmp_path / "index") as lib:
        lib.sync([folder], with_thumbs, progress=False)
        assert all(v.detail is None for v in lib.stored(lib.ids()).values())  # the embedder measured nothing
        lib._db.execute("UPDATE frame_vectors SET detail = NULL")  # as schema 2 left them
        lib.sync([folder], with_thumbs, progress=False)  # nothing to embed; the detail is measured
        want = [float((cv2.cvtColor(cv2.imdecode(np.frombuffer(t, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
                       .astype(np.float32) / 255 @ np.array([0.299, 0.587, 0.114], np.float32)).std())
                for t in thumbs]
        stored = lib.stored(lib.ids())
        assert len(stored) == 6
        for v in stored.values():
            assert v.detail == pytest.approx(want, abs=1e-5)
        assert want[0] == 0.0 and want[1] > 0.1  # black, and noise


def test_a_schema_1_index_is_migrated(tmp_path, folder):
    """An index written before biases and frame detail existed (schema 1: no bias column, no detail column) opens,
    is migrated in place and searches as before; an index of a newer schema is refused."""
    import shutil

    from reelsearch.index.catalog import CatalogError
    from reelsearch.index.embedded.schema import SCHEMA_SQL, SCHEMA_VERSION

    with EmbeddedCatalog(tmp_path / "index") as lib:
        lib.sync([folder], FakeEmbedder(), progress=False)
    # the same index as schema 1 wrote it: its tables without the bias, detail and date columns, the rows copied over
    schema_1 = "\n".join(line for line in SCHEMA_SQL.splitlines()
                          if "bias" not in line and "detail" not in line and "taken_" not in line)
    schema_1 = schema_1.replace("vector BLOB,", "vector BLOB NOT NULL")
    schema_1 = schema_1.replace("times BLOB NOT NULL,", "times BLOB NOT NULL")
    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(tmp_path / "index" / FAISS_NAME, old / FAISS_NAME)
    db = sqlite3.connect(old / SQLITE_NAME)
    db.executescript(schema_1)
    db.execute("ATTACH DATABASE ? AS new", (str(tmp_path / "index" / SQLITE_NAME),))
    for table in ("videos", "meta", "frames", "frame_vectors"):
        columns = ", ".join(r[1] for r in db.execute(f"PRAGMA main.table_info({table})"))
        db.execute(f"INSERT INTO {table} SELECT {columns} FROM new.{table}")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with EmbeddedCatalog(old) as lib:
        assert lib._meta("schema_version") == str(SCHEMA_VERSION) and len(lib) == 6
        assert lib.biases(lib.ids()).tolist() == [0.0] * 6
        assert all(v.detail is None for v in lib.stored(lib.ids()).values())  # no thumbnails to measure
        q = vectors_of(folder / "img0.png")[0]
        hits = search(lib, q, k=1)
        assert hits[0].path == str(folder / "img0.png") and hits[0].score == pytest.approx(1.0, abs=1e-5)
        lib.sync([folder], FakeEmbedder(), progress=False)  # and it is written as before
        check_consistent(lib)
        lib._set_meta("schema_version", SCHEMA_VERSION + 1)
    with pytest.raises(CatalogError, match="newer reelsearch"):
        EmbeddedCatalog(old)


def test_a_schema_7_index_gets_its_segments_table_with_rowids(tmp_path, folder):
    """An index whose segments' table is WITHOUT ROWID (schema 7) opens with it written again as a rowid table, every
    segment kept, and searches and syncs as before."""
    from reelsearch.index.embedded.schema import SCHEMA_VERSION, SEGMENTS_TABLE

    with EmbeddedCatalog(tmp_path / "index") as lib:
        lib.sync([folder], FakeEmbedder(), progress=False)
        ids = lib.ids()
        want = {i: (s.starts.tolist(), s.rows.tolist(), s.biases.tolist()) for i, s in lib.segments(ids).items()}
        q = vectors_of(folder / "img0.png")[0]
        before = [(h.id, h.score) for h in search(lib, q, k=3)]
        db = lib._db  # as schema 7 wrote it
        db.execute(SEGMENTS_TABLE.format(name="old_segments").replace(");\n", ") WITHOUT ROWID;\n"))
        db.execute("INSERT INTO old_segments SELECT * FROM video_segments")
        db.execute("DROP TABLE video_segments")
        db.execute("ALTER TABLE old_segments RENAME TO video_segments")
        lib._set_meta("schema_version", 7)
    sql = "SELECT sql FROM sqlite_master WHERE name = 'video_segments'"
    assert "WITHOUT ROWID" in sqlite3.connect(tmp_path / "index" / SQLITE_NAME).execute(sql).fetchone()[0]
    with EmbeddedCatalog(tmp_path / "index") as lib:
        assert lib._meta("schema_version") == str(SCHEMA_VERSION)
        assert "WITHOUT ROWID" not in lib._db.execute(sql).fetchone()[0]
        got = {i: (s.starts.tolist(), s.rows.tolist(), s.biases.tolist()) for i, s in lib.segments(ids).items()}
        assert got == want and len(got) == 6
        assert [(h.id, h.score) for h in search(lib, q, k=3)] == before
        lib.sync([folder], FakeEmbedder(), progress=False)
        check_consistent(lib)


def test_model_change_reembeds_everything(open_catalog, folder, tmp_path):
    lib = open_catalog()
    other = tmp_path / "other"
    write_png(other / "o.png", seed=77)
    lib.sync([folder], FakeEmbedder(), model_id="m1", progress=False)
    lib.sync([other], FakeEmbedder(), model_id="m1", progress=False)
    assert len(lib) == 7
    emb = FakeEmbedder()
    rep = lib.sync([folder], emb, model_id="m2", progress=False)
    # the six files were indexed before: re-embedded for the new model, they are updated, not added
    assert len(emb.calls) == 6 and len(rep.updated) == 6 and rep.added == []
    assert [os.path.basename(p) for p in rep.removed] == ["o.png"]  # other model's vectors cannot stay
    assert lib.model_id == "m2" and len(lib) == 6
    check_consistent(lib)
    write_png(folder / "new.png", seed=78)
    rep = lib.sync([folder], FakeEmbedder(), model_id="m3", progress=False)
    assert [os.path.basename(p) for p in rep.added] == ["new.png"] and len(rep.updated) == 6


def test_an_exclusive_sync_drops_what_was_indexed_from_elsewhere(open_catalog, folder, tmp_path):
    lib = open_catalog()
    other = tmp_path / "other"
    write_png(other / "o.png", seed=77)
    lib.sync([folder, other], FakeEmbedder(), progress=False)
    rep = lib.sync([folder], FakeEmbedder(), progress=False)  # other roots are left alone by default
    assert len(lib) == 7 and not rep.removed
    emb = FakeEmbedder()
    rep = lib.sync([folder], emb, progress=False, exclusive=True)
    assert [os.path.basename(p) for p in rep.removed] == ["o.png"] and len(rep.unchanged) == 6
    assert emb.calls == [] and len(lib) == 6  # what stays is not embedded again
    check_consistent(lib)


def test_moved_file_reuses_its_embeddings(open_catalog, folder):
    lib = open_catalog()
    lib.sync([folder], FakeEmbedder(), progress=False)
    os.rename(folder / "img2.png", folder / "renamed.png")
    emb = FakeEmbedder()
    rep = lib.sync([folder], emb, progress=False)
    assert emb.calls == [] and rep.reused == 1
    assert [os.path.basename(p) for p in rep.added] == ["renamed.png"]
    assert [os.path.basename(p) for p in rep.removed] == ["img2.png"]
    check_consistent(lib)


def test_undecodable_file_names_round_trip(open_catalog, tmp_path):
    root = tmp_path / "names"
    root.mkdir()
    raw = os.fsencode(str(root)) + b"/caf\xe9-\xff.png"  # not UTF-8
    write_png(root / "tmp.png", seed=3)
    os.rename(root / "tmp.png", raw)
    lib = open_catalog()
    rep = lib.sync([root], FakeEmbedder(), progress=False)
    assert len(rep.added) == 1
    hit = search(lib, fake_vectors(open(raw, "rb").read())[0], k=1)[0]
    assert os.fsencode(hit.path) == raw


def test_real_video_thumbnails_and_moments(tmp_path):
    """A real MP4 (written with PyAV) decoded with reelsearch.media: thumbnails stored, moment points at a frame."""
    av = pytest.importorskip("av")
    from reelsearch.media.decode import decode_frames

    path = tmp_path / "clip" / "colours.mp4"
    path.parent.mkdir()
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(20):  # 2 s: red for the first second, blue for the second
            img = np.zeros((48, 64, 3), np.uint8)
            img[..., 0 if i < 10 else 2] = 220
            out.mux(stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        out.mux(stream.encode())

    def embed(p: str) -> EmbeddedMedia:
        fr = decode_frames(p, "interval:0.5")
        means = fr.images.reshape(len(fr), -1, 3).mean(1).astype(np.float32)  # colour embedding [T, 3]
        means /= np.linalg.norm(means, axis=1, keepdims=True)
        v = means.mean(0)
        return EmbeddedMedia(v / np.linalg.norm(v), means, fr.timestamps, fr.duration,
                             [make_thumbnail(im) for im in fr.images])

    lib = EmbeddedCatalog(tmp_path / "index")
    rep = lib.sync([tmp_path / "clip"], embed, model_id="colour-means", progress=False)
    assert len(rep.added) == 1, rep.failed
    hit = search(lib, np.array([0.0, 0.0, 1.0]), k=1)[0]  # "blue"
    assert hit.moment >= 1.0 and hit.duration == pytest.approx(2.0, abs=0.15)
    red = search(lib, np.array([1.0, 0.0, 0.0]), k=1)[0]
    assert red.moment < 1.0
    thumb = lib.thumbnail(hit.id, hit.frame)
    import cv2

    img = cv2.imdecode(np.frombuffer(thumb, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (48, 64, 3) and img[..., 0].mean() > 150  # BGR: blue channel
    lib.close()


def test_second_writer_is_refused(tmp_path, folder):
    import fcntl

    lib = EmbeddedCatalog(tmp_path / "index")
    with open(lib.dir / ".writer.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        from reelsearch.index import CatalogError

        with pytest.raises(CatalogError, match="another process"):
            lib.sync([folder], FakeEmbedder(), progress=False)
    lib.close()


def test_sqlite_file_is_where_documented(tmp_path, folder):
    with EmbeddedCatalog(tmp_path / "index") as lib:
        lib.sync([folder], FakeEmbedder(), progress=False)
    assert (tmp_path / "index" / SQLITE_NAME).exists() and (tmp_path / "index" / FAISS_NAME).exists()


def test_reader_refresh_sees_another_writers_changes(open_catalog, folder):
    """A second process's library (a replica) sees what a writer commits: the embedded one when it refreshes (as
    every search does), the PostgreSQL one at once."""
    writer = open_catalog()
    writer.sync([folder], FakeEmbedder(), progress=False)
    reader = open_catalog()
    assert len(reader) == 6
    write_png(folder / "fresh.png", seed=123)
    (folder / "img0.png").unlink()
    writer.sync([folder], FakeEmbedder(), progress=False)
    reader.refresh()
    video, _ = vectors_of(folder / "fresh.png")
    hits = search(reader, video, k=10)
    assert hits[0].path == str(folder / "fresh.png")
    assert str(folder / "img0.png") not in {h.path for h in hits} and len(hits) == 6
    assert reader.find(folder / "fresh.png") == hits[0].id and reader.find(folder / "img0.png") is None
    writer.close()
    reader.close()


def test_a_snapshot_reads_the_meta_once_and_sees_every_write_after(open_catalog, folder):
    """Inside ``snapshot`` the count and meta are read once (what a search asks a dozen times); another writer's
    commit shows at the next snapshot (another thread reads as outside); this object's own writes show at once."""
    writer = open_catalog()
    writer.sync([folder], FakeEmbedder(), progress=False)
    reader = open_catalog()
    executed = []
    real_execute = reader._db.execute
    reader._db.execute = lambda sql, *a: executed.append(sql) or real_execute(sql, *a)
    with reader.snapshot():
        gen, dim = reader.generation, reader.dim
        assert len(reader) == 6 and dim == DIM
        reads = len(executed)
        for _ in range(5):
            assert (len(reader), reader.generation, reader.dim) == (6, gen, DIM)
        assert len(executed) == reads  # held: no further reads
        write_png(folder / "fresh.png", seed=77)
        writer.sync([folder], FakeEmbedder(), progress=False)
        assert (len(reader), reader.generation) == (6, gen)
        outside = []
        thread = threading.Thread(target=lambda: outside.append((len(reader), reader.generation)))
        thread.start()
        thread.join()
        assert outside == [(7, writer.generation)] and writer.generation > gen
    last = writer.generation
    assert (len(reader), reader.generation) == (7, last)
    writer.close()
    with reader.snapshot():
        assert len(reader) == 7
        (folder / "fresh.png").unlink()
        (folder / "img0.png").unlink()
        reader.sync([folder], FakeEmbedder(), progress=False)  # its own write, inside the snapshot
        assert len(reader) == 5 and reader.generation == last + 1
        reader.refresh()
        assert len(reader.ids()) == 5
    check_consistent(reader)


def colour_histogram_embedder(policy: str = "uniform:8"):
    """embed_fn over real videos: per-frame 4x4x4 RGB histograms (unit norm), real timestamps and thumbnails."""
    from reelsearch.media.decode import decode_frames

    def embed(path: str) -> EmbeddedMedia:
        fr = decode_frames(path, policy)
        bins = (fr.images.reshape(len(fr), -1, 3) // 64).astype(np.int64)
        codes = bins[..., 0] * 16 + bins[..., 1] * 4 + bins[..., 2]
        hist = np.stack([np.bincount(c, minlength=64) for c in codes]).astype(np.float32)
        hist /= np.linalg.norm(hist, axis=1, keepdims=True)
        video = hist.mean(0)
        return EmbeddedMedia(video / np.linalg.norm(video), hist, fr.timestamps, fr.duration,
                             [make_thumbnail(im) for im in fr.images])

    return embed


def test_real_msrvtt_clips(tmp_path):
    """The two real MSR-VTT clips: indexed with real durations and timestamps; a frame finds its video and moment."""
    from conftest import shared_path

    clips = shared_path("msrvtt", "clips")
    embed = colour_histogram_embedder()
    with EmbeddedCatalog(tmp_path / "index") as lib:
        rep = lib.sync([clips], embed, model_id="colour-hist", progress=False)
        assert sorted(os.path.basename(p) for p in rep.added) == ["video9770.mp4", "video9771.mp4"], rep.failed
        durations = {os.path.basename(r.path): r.duration for r in lib.videos()}
        assert durations["video9770.mp4"] == pytest.approx(11.0, abs=0.1)
        assert durations["video9771.mp4"] == pytest.approx(13.98, abs=0.1)
        media = embed(str(clips / "video9771.mp4"))
        hit = search(lib, media.frame_vectors[5], k=2)[0]
        assert hit.path == str(clips / "video9771.mp4")
        assert hit.moment == pytest.approx(media.timestamps[5], abs=1e-6) and 0 <= hit.moment <= hit.duration
        import cv2

        thumb = cv2.imdecode(np.frombuffer(lib.thumbnail(hit.id, hit.frame), np.uint8), cv2.IMREAD_COLOR)
        assert max(thumb.shape[:2]) == 96  # 320 x 240 source, stored at 96 px on the long side
        rep = lib.sync([clips], embed, model_id="colour-hist", progress=False)
        assert len(rep.unchanged) == 2 and not rep.added


def test_a_commit_of_media_without_segments_stores_one_segment_of_every_frame(tmp_path):
    """What the benchmarks commit straight (``EmbeddedMedia`` without segments, not through ``checked``): the video
    is one segment of its frames, with its row and bias."""
    rng = np.random.default_rng(3)
    video, frames = rng.standard_normal(8).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    video, frames = video / np.linalg.norm(video), frames / np.linalg.norm(frames, axis=1, keepdims=True)
    with EmbeddedCatalog(tmp_path / "index") as lib:
        st = types.SimpleNamespace(st_size=0, st_mtime_ns=0)  # a FileToSync's stat
        lib._commit([FileChange(FileToSync("/videos/a.mp4", st, None), "0" * 64,
                                EmbeddedMedia(video, frames, np.arange(4) * 0.5, 2.0, None, 0.25))], [], "m")
        vid = lib.find("/videos/a.mp4")
        segs = lib.segments([vid])[vid]
        assert len(segs) == 1 and segs.firsts[0] == 0 and segs.counts[0] == 4
        assert segs.starts[0] == 0.0 and segs.ends[0] == 2.0 and segs.biases[0] == pytest.approx(0.25)
        np.testing.assert_allclose(segs.rows[0], video, atol=1e-3)


def test_stored_float16_rows_are_each_value_exactly():
    """``float16_rows`` (how stored frame rows are read) gives every float16 bit pattern's exact value, checked against
    the value computed from its sign, exponent and mantissa (IEEE binary16; float32 holds each exactly)."""
    from reelsearch.index.catalog import float16_rows

    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = float16_rows(bits.tobytes(), 16)
    assert got.shape == (4096, 16) and got.dtype == np.float32
    got = got.reshape(-1)
    sign = np.where(bits >> 15, -1.0, 1.0)
    exponent, mantissa = (bits >> 10) & 0x1F, (bits & 0x3FF).astype(np.float64)
    finite = exponent < 31
    want = sign * np.where(exponent == 0, mantissa / 1024 * 2.0 ** -14,
                           (1 + mantissa / 1024) * 2.0 ** (exponent.astype(np.float64) - 15))
    assert np.array_equal(got[finite].astype(np.float64), want[finite])
    assert np.array_equal(got[~finite & (mantissa == 0)], sign[~finite & (mantissa == 0)] * np.inf)
    assert np.isnan(got[~finite & (mantissa > 0)]).all()


def test_the_embedded_page_cache_is_the_larger_one_while_writing(tmp_path):
    """SQLite's page cache: CACHE_KIB to read (what a serving process holds), WRITE_CACHE_KIB inside the writer lock,
    back to CACHE_KIB after it, an error inside included."""
    lib = EmbeddedCatalog(tmp_path / "idx")
    try:
        def size():
            return lib._db.execute("PRAGMA cache_size").fetchone()[0]

        assert CACHE_KIB < WRITE_CACHE_KIB and size() == -CACHE_KIB
        with lib.writing():
            assert size() == -WRITE_CACHE_KIB
        assert size() == -CACHE_KIB
        with pytest.raises(RuntimeError), lib.writing():
            raise RuntimeError("a failed write")
        assert size() == -CACHE_KIB
    finally:
        lib.close()
