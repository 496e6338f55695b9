"""The embedded vector index's product-quantised structure (issue 34, memory): codes in memory, candidates scored
again with their exact rows read from disk; the catalog over it; an index of schema 6 (float32 HNSW files) rebuilt."""

from __future__ import annotations

import json
import logging
import sqlite3
import tracemalloc
import types

import faiss
import numpy as np
import pytest

from reelsearch.errors import DataFormatError
from reelsearch.index import EmbeddedCatalog, EmbeddedMedia, FaissIndex
from reelsearch.index.embedded.catalog import FAISS_NAME, SEGMENTS_FAISS_NAME, SQLITE_NAME
from reelsearch.index.embedded.id_table import IdTable
from reelsearch.index.embedded.schema import SCHEMA_VERSION
from reelsearch.index.sync import FileChange, FileToSync

DIM = 128


def clustered(n: int, d: int, seed: int, n_clusters: int = 60, spread: float = 0.5) -> np.ndarray:
    """Unit vectors around random centres (a crude stand-in for real embedding geometry)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, d))
    x = centres[rng.integers(0, n_clusters, n)] / np.sqrt(d) + spread * rng.standard_normal((n, d)) / np.sqrt(d)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class Disk:
    """The rows as a catalog's disk holds them: what ``rows_of`` reads (and counts)."""

    def __init__(self):
        self.rows: dict[str, np.ndarray] = {}
        self.reads = 0

    def put(self, ids, x):
        self.rows.update(zip(ids, x, strict=True))

    def rows_of(self, ids):
        self.reads += len(ids)
        return {i: self.rows[i] for i in ids if i in self.rows}


def recall(found, truth) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)]))


def test_codes_above_the_threshold_with_exact_scores(tmp_path):
    x = clustered(3000, DIM, seed=1)
    q = clustered(40, DIM, seed=2)
    ids = [str(i) for i in range(len(x))]
    disk = Disk()
    idx = FaissIndex(DIM, tmp_path / "v.npz", threshold=2500, rows_of=disk.rows_of)
    for start in range(0, 3000, 500):
        disk.put(ids[start:start + 500], x[start:start + 500])
        idx.add(ids[start:start + 500], x[start:start + 500])
        assert idx.structure == ("flat" if start + 500 < 2500 else "ivfpq")
    found, scores = idx.search(q, 10)
    truth = [[ids[j] for j in row] for row in np.argsort(-(q @ x.T), axis=1)[:, :10]]
    assert recall(found, truth) >= 0.95
    for qi in range(len(q)):  # every score is the exact inner product, best first
        want = x[[int(i) for i in found[qi]]] @ q[qi]
        np.testing.assert_allclose(scores[qi], want, atol=1e-5)
        assert list(scores[qi]) == sorted(scores[qi], reverse=True)
    np.testing.assert_array_equal(idx.get(["7", "2999"]), x[[7, 2999]])  # read from disk
    assert sum(len(b) for b, _ in idx.iter_chunks(700)) == 3000
    # no float32 row in memory: the file (what memory holds) is a fraction of the rows' 768 KB
    idx.save()
    assert (tmp_path / "v.npz").stat().st_size < x.nbytes / 3


def test_removed_and_replaced_rows_and_reopening(tmp_path):
    x = clustered(2000, DIM, seed=3)
    ids = [str(i) for i in range(len(x))]
    disk = Disk()
    disk.put(ids, x)
    idx = FaissIndex(DIM, tmp_path / "v.npz", kind="ivfpq", rows_of=disk.rows_of)
    idx.add(ids, x)
    assert idx.structure == "ivfpq"
    idx.remove(["5"])
    del disk.rows["5"]
    disk.put(["6"], x[7:8])
    idx.add(["6"], x[7:8])  # 6 replaced: its old vector must not be found
    found, scores = idx.search(x[5:8], 3)
    assert "5" not in found[0] and len(idx) == 1999
    assert scores[1, 0] < 0.999
    assert set(found[2][:2]) == {"6", "7"}
    del disk.rows["9"]  # gone from disk before the index caught up: left out, not an error
    assert "9" not in idx.search(x[9:10], 5)[0][0]
    idx.save()
    again = FaissIndex(DIM, tmp_path / "v.npz", rows_of=disk.rows_of)
    assert again.structure == "ivfpq" and len(again) == 1999
    assert again.search(x[20:21], 1)[0] == [["20"]]
    with pytest.raises(Exception, match="exact rows"):  # codes without a reader of their rows cannot be searched
        FaissIndex(DIM, tmp_path / "v.npz")


def test_retrained_as_it_grows_and_exact_again_when_small():
    x = clustered(5000, DIM, seed=4)
    ids = [str(i) for i in range(len(x))]
    disk = Disk()
    disk.put(ids, x)
    idx = FaissIndex(DIM, threshold=1024, rows_of=disk.rows_of)
    idx.add(ids[:1100], x[:1100])
    assert idx.structure == "ivfpq" and idx._trained_on == 1100
    idx.add(ids[1100:], x[1100:])  # over four times the rows it was trained on: trained again
    assert idx._trained_on == 5000 and len(idx) == 5000
    idx.remove(ids[500:])
    assert idx.structure == "flat" and len(idx) == 500
    assert idx.search(x[3:4], 1)[0] == [["3"]]


def test_a_full_build_in_small_batches_keeps_its_one_training(caplog):
    """train_for then adds in batches far below the threshold (as a build reads SQLite, 4,096 rows at a time): the
    codes stay those trained for all the rows (not exact for the first batches, trained again on the way)."""
    x = clustered(3000, DIM, seed=15)
    ids = [str(i) for i in range(len(x))]
    disk = Disk()
    disk.put(ids, x)
    idx = FaissIndex(DIM, threshold=2500, rows_of=disk.rows_of)
    with caplog.at_level(logging.INFO, "reelsearch.index.embedded.vectors"):
        assert idx.train_for(len(x), lambda n: x[np.random.default_rng(0).choice(len(x), n, replace=False)])
        for start in range(0, len(x), 300):
            idx.add(ids[start:start + 300], x[start:start + 300])
            assert idx.structure == "ivfpq" and idx._trained_on == 3000
    assert caplog.text.count("training the product quantiser") == 1
    q = clustered(20, DIM, seed=16)
    truth = [[ids[j] for j in row] for row in np.argsort(-(q @ x.T), axis=1)[:, :10]]
    assert recall(idx.search(q, 10)[0], truth) >= 0.95
    idx.remove(ids[1000:])  # the build over, the usual hysteresis again: exact below half the threshold
    assert idx.structure == "flat" and len(idx) == 1000


def commit(lib: EmbeddedCatalog, x: np.ndarray, segments: np.ndarray, bias: np.ndarray) -> None:
    """One synthetic video per row of ``x`` with its ``segments`` [n, 2, D] (one frame each) and ``bias``."""
    st = types.SimpleNamespace(st_size=0, st_mtime_ns=0)
    frames = np.array([[0, 1], [1, 2]])
    pending = []
    for i in range(len(x)):
        media = EmbeddedMedia(x[i], segments[i], np.array([0.0, 0.5]), 1.0, None, float(bias[i]))
        media.segment_vectors, media.segment_frames = segments[i], frames
        media.segment_times, media.segment_biases = frames * 0.5, np.zeros(2)
        pending.append(FileChange(FileToSync(f"/videos/{i:05d}.mp4", st, None), f"{i:064x}", media, (0.0, "file")))
    lib._commit(pending, [], "fake-model@1")
    lib.refresh()  # the vector files caught up, as a sync ends


def test_catalog_over_codes_ranks_by_exact_score_and_bias(tmp_path):
    segments = clustered(2 * 1600, DIM, seed=5).reshape(1600, 2, DIM)
    x = segments.mean(axis=1)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    bias = np.random.default_rng(6).uniform(-0.05, 0.05, len(x))
    q = clustered(30, DIM, seed=7)
    with EmbeddedCatalog(tmp_path / "index", threshold=1024) as lib:
        commit(lib, x, segments, bias)
        assert lib.vectors.structure == lib.segment_vectors.structure == "ivfpq"
        exact = q @ x.T + bias[None, :].astype(np.float32)
        truth = [[str(j + 1) for j in row] for row in np.argsort(-exact, axis=1)[:, :10]]
        found, scores = lib.nearest_many(q, 10, biased=True)
        assert recall(found, truth) >= 0.95
        for qi in range(len(q)):
            np.testing.assert_allclose(scores[qi], exact[qi, [int(i) - 1 for i in found[qi]]], atol=1e-5)
        seg_ids, seg_scores = lib.nearest_segments(q[0], 10)
        want = {f"{v + 1}:{o}": float(segments[v, o] @ q[0]) for v in range(len(x)) for o in range(2)}
        assert recall([seg_ids], [sorted(want, key=want.get, reverse=True)[:10]]) >= 0.9
        np.testing.assert_allclose(seg_scores, [want[i] for i in seg_ids], atol=1e-5)
        np.testing.assert_array_equal(lib.rows(["1", "1600"]), x[[0, 1599]])
        assert sum(len(i) for i, _ in lib.chunks()) == 1600
    with EmbeddedCatalog(tmp_path / "index", threshold=1024) as lib:  # opened from its saved files
        assert lib.vectors.structure == "ivfpq" and lib.nearest_many(q, 10, biased=True)[0] == found


def test_codes_trained_once_when_each_video_is_one_segment(tmp_path, caplog):
    """A full build of a library of one segment a video (the segments' rows are the videos') trains the codes once:
    the segments' index gets the videos' lists and quantiser; two segments a video: each index trains its own."""
    x = clustered(1600, DIM, seed=12)
    bias = np.random.default_rng(13).uniform(-0.05, 0.05, len(x))
    st = types.SimpleNamespace(st_size=0, st_mtime_ns=0)
    pending = []
    for i in range(len(x)):
        media = EmbeddedMedia(x[i], np.stack([x[i], x[i]]), np.array([0.0, 0.5]), 1.0, None, float(bias[i]))
        media.segment_vectors, media.segment_frames = x[i][None], np.array([[0, 2]])
        media.segment_times, media.segment_biases = np.array([[0.0, 1.0]]), np.array([bias[i]])
        pending.append(FileChange(FileToSync(f"/videos/{i:05d}.mp4", st, None), f"{i:064x}", media, (0.0, "file")))
    q = clustered(30, DIM, seed=14)
    with caplog.at_level(logging.INFO, "reelsearch.index.embedded.vectors"), \
            EmbeddedCatalog(tmp_path / "one", threshold=1024) as lib:
        lib._commit(pending, [], "fake-model@1")
        lib.refresh()
        assert lib.segment_vectors.structure == "ivfpq" and caplog.text.count("training the product quantiser") == 1
        lists, quantisers = [], []
        for index in (lib.vectors, lib.segment_vectors):
            ivfpq = faiss.downcast_index(index._index)
            lists.append(faiss.vector_to_array(faiss.downcast_index(ivfpq.quantizer).codes))
            quantisers.append(faiss.vector_to_array(ivfpq.pq.centroids))
        assert len(lists[0]) and np.array_equal(*lists) and np.array_equal(*quantisers)
        exact = {f"{v + 1}:0": float(x[v] @ q[0] + bias[v]) for v in range(len(x))}
        keys, scores = lib.nearest_segments(q[0], 10, biased=True)
        assert recall([keys], [sorted(exact, key=exact.get, reverse=True)[:10]]) >= 0.9
        np.testing.assert_allclose(scores, [exact[k] for k in keys], atol=1e-5)
    caplog.clear()
    segments = clustered(2 * 1600, DIM, seed=5).reshape(1600, 2, DIM)
    with caplog.at_level(logging.INFO, "reelsearch.index.embedded.vectors"), \
            EmbeddedCatalog(tmp_path / "two", threshold=1024) as lib:
        commit(lib, x, segments, bias)
        assert caplog.text.count("training the product quantiser") == 2


def test_an_index_of_schema_6_gets_its_vector_files_rebuilt(tmp_path, caplog):
    """An index written by schema 6 (float32 HNSW vector files) opens, says its vector files are rebuilt once, and
    searches from product-quantised codes with the same answers."""
    segments = clustered(2 * 1200, DIM, seed=8).reshape(1200, 2, DIM)
    x = segments.mean(axis=1)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = clustered(20, DIM, seed=9)
    with EmbeddedCatalog(tmp_path / "index", kind="hnsw") as lib:  # what schema 6 wrote
        commit(lib, x, segments, np.zeros(len(x)))
        before = lib.nearest_many(q, 10)[0]
        lib._set_meta("schema_version", 6)
    db = sqlite3.connect(tmp_path / "index" / SQLITE_NAME)
    assert db.execute("SELECT value FROM meta WHERE key = 'vector_gen:faiss'").fetchone()[0] != "0"
    db.close()
    with caplog.at_level(logging.WARNING), EmbeddedCatalog(tmp_path / "index", threshold=1024) as lib:
        assert "rebuilt" in caplog.text and "product-quantised" in caplog.text
        assert lib._meta("schema_version") == str(SCHEMA_VERSION)
        assert lib.vectors.structure == lib.segment_vectors.structure == "ivfpq"
        assert recall(lib.nearest_many(q, 10)[0], before) >= 0.95
    for name in (FAISS_NAME, SEGMENTS_FAISS_NAME):  # the files were replaced
        with np.load(tmp_path / "index" / name) as z:
            assert json.loads(str(z["settings"]))["structure"] == "ivfpq"
    caplog.clear()
    with caplog.at_level(logging.WARNING), EmbeddedCatalog(tmp_path / "index", threshold=1024):
        assert "rebuilt" not in caplog.text  # once


def test_bias_column_kept_out_of_the_codes(tmp_path):
    """[row, bias] rows with biases as large as the querybank's: the codes hold the row, the biases are added apart;
    the biased and unbiased top 10 both near exact, through a save and load."""
    rng = np.random.default_rng(5)
    rows = clustered(3000, DIM, seed=1)
    x = np.hstack([rows, 0.1 * rng.standard_normal((3000, 1)).astype(np.float32)])
    ids = [str(i) for i in range(len(x))]
    disk = Disk()
    disk.put(ids, x)
    idx = FaissIndex(DIM + 1, tmp_path / "v.npz", kind="ivfpq", rows_of=disk.rows_of, bias_column=True)
    idx.add(ids, x)
    idx.save()
    again = FaissIndex(DIM + 1, tmp_path / "v.npz", rows_of=disk.rows_of, bias_column=True)
    assert again.structure == "ivfpq"
    for weight in (1.0, 0.0):
        near = rows[rng.choice(3000, 40, replace=False)] + 0.05 * rng.standard_normal((40, DIM)).astype(np.float32)
        q = np.hstack([near / np.linalg.norm(near, axis=1, keepdims=True), np.full((40, 1), weight, np.float32)])
        truth = [[ids[j] for j in row] for row in np.argsort(-(q @ x.T), axis=1)[:, :10]]
        for index in (idx, again):
            found, scores = index.search(q, 10)
            assert recall(found, truth) >= 0.95
            exact = np.array([[x[int(i)] @ q[n] for i in row] for n, row in enumerate(found)])
            assert np.allclose(scores, exact, atol=1e-5)
    with pytest.raises(DataFormatError, match="bias_column"):  # codes of the other kind: not read as these
        FaissIndex(DIM + 1, tmp_path / "v.npz", rows_of=disk.rows_of)


def test_id_table_matches_a_dict_and_holds_no_object_per_id():
    """IdTable under random adds and removes answers as a dict both ways does (the reference), ids of any length and
    of any characters (held as UTF-8 bytes, given back as the same strings); its memory at 50,000 ids is a fraction of
    the two dicts it replaced and of numpy str arrays (4 bytes a character: about 65 a segment id) (tracemalloc
    counts numpy's buffers)."""
    rng = np.random.default_rng(11)
    table, label_of, next_label = IdTable(), {}, 0
    for step in range(40):
        pool = [f"{v}:{o}" if step % 3 else str(v) for v, o in rng.integers(0, 300, (60, 2)).tolist()]
        if step == 20:
            pool += ["a-much-longer-id-than-the-others", "vidéo:1", "日本:2", "日本:10", "z", "caf\udce9:3"]
        gone = [i for i in dict.fromkeys(pool[:20]) if i in label_of]
        np.testing.assert_array_equal(np.sort(table.remove(pool[:20])), sorted(label_of.pop(i) for i in gone))
        new = [i for i in dict.fromkeys(pool[20:]) if i not in label_of]
        labels = np.arange(next_label, next_label + len(new))
        table.add(new, labels)
        label_of.update(zip(new, labels.tolist(), strict=True))
        next_label += len(new)
        assert len(table) == len(label_of) and table.ids() == sorted(label_of, key=label_of.get)
        asked = pool + ["nope", "1:2:3"]
        assert table.present(asked).tolist() == [i in label_of for i in asked]
        assert [i in table for i in asked] == [i in label_of for i in asked]
        stored = list(label_of)[:15]
        assert table.labels_of(stored).tolist() == [label_of[i] for i in stored]
        assert table.ids_of(table.labels_of(stored)) == stored
        live = table.live(np.arange(-1, next_label + 2))
        assert np.flatnonzero(live).tolist() == [lab + 1 for lab in sorted(label_of.values())]
    with pytest.raises(KeyError, match="nope"):
        table.labels_of([stored[0], "nope"])
    ids = [f"{v}:0" for v in range(1, 50_001)]
    tracemalloc.start()
    big = IdTable(np.arange(len(ids)), ids)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert big.labels_of(["4711:0"]).tolist() == [4710] and held < 30 * len(ids)  # two dicts: about 200 a row
    assert big.ids_of(np.arange(len(ids))) == ids and all(type(i) is str for i in big.ids_of([0]))
