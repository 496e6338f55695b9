"""Vector indexes: FAISS exact and HNSW pass the same tests; exact scan; recall; persistence (the PostgreSQL
catalog's vectors are tested as a library: test_index_library.py)."""

from __future__ import annotations

import numpy as np
import pytest

from reelsearch.index import FaissIndex, top_k
from reelsearch.similarity import order_score_fn

DIM = 16


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def clustered(n: int, d: int, n_clusters: int, spread: float, seed: int) -> np.ndarray:
    """Unit vectors around ``n_clusters`` random centres (a crude stand-in for real embedding geometry)."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((n_clusters, d)))
    x = centres[rng.integers(0, n_clusters, n)] + spread * rng.standard_normal((n, d)) / np.sqrt(d)
    return unit(x)


@pytest.fixture(params=["faiss-flat", "faiss-hnsw"])
def make_index(request, tmp_path):
    """Factory of empty indexes of one backend; calling it again reopens the same storage."""
    opened = []

    def make():
        if request.param == "faiss-flat":
            idx = FaissIndex(DIM, tmp_path / "v.npz", kind="flat")
        else:
            idx = FaissIndex(DIM, tmp_path / "v.npz", kind="hnsw", ef_search=256)
        opened.append(idx)
        return idx

    yield make
    for idx in opened:
        idx.close()


def brute_force(queries: np.ndarray, ids: list[str], vectors: np.ndarray, k: int):
    """Reference top-k by a Python loop over every (query, vector) pair."""
    out = []
    for q in queries:
        scored = sorted(((float(np.dot(q, v)), i) for i, v in zip(ids, vectors, strict=True)), key=lambda s: -s[0])
        out.append(scored[:k])
    return out


def test_add_search_get_remove_upsert(make_index):
    idx = make_index()
    rng = np.random.default_rng(0)
    x = unit(rng.standard_normal((50, DIM)))
    ids = [f"v{i}" for i in range(50)]
    idx.add(ids, x)
    assert len(idx) == 50
    found, scores = idx.search(x[:5], 3)
    ref = brute_force(x[:5], ids, x, 3)
    assert [row[0] for row in found] == ids[:5]  # each vector is its own nearest neighbour
    np.testing.assert_allclose(scores, [[s for s, _ in r] for r in ref], atol=1e-5)
    np.testing.assert_allclose(idx.get(["v7", "v3"]), x[[7, 3]], atol=1e-6)
    # upsert: v3 now points where v10 is
    idx.add(["v3"], x[10:11])
    assert len(idx) == 50
    np.testing.assert_allclose(idx.get(["v3"]), x[10:11], atol=1e-6)
    assert set(idx.search(x[10:11], 2)[0][0]) == {"v3", "v10"}
    assert idx.remove(["v10", "v11", "nope"]) == 2
    assert len(idx) == 48
    found, _ = idx.search(x[10:12], 48)
    assert "v10" not in found[0] and "v11" not in found[1] and found[0][0] == "v3"
    with pytest.raises(KeyError):
        idx.get(["v10"])


def test_k_larger_than_index_pads(make_index):
    idx = make_index()
    x = unit(np.eye(DIM)[:3])
    idx.add(["a", "b", "c"], x)
    found, scores = idx.search(x[:1], 5)
    assert found[0][0] == "a" and len(found[0]) == 3
    assert scores.shape == (1, 5) and np.isneginf(scores[0, 3:]).all()


def test_persistence_roundtrip(make_index):
    idx = make_index()
    x = unit(np.random.default_rng(1).standard_normal((30, DIM)))
    idx.add([str(i) for i in range(30)], x)
    idx.remove(["4"])
    idx.save()
    idx.close()
    again = make_index()
    assert len(again) == 29
    np.testing.assert_allclose(again.get(["5"]), x[5:6], atol=1e-6)
    assert again.search(x[7:8], 1)[0][0] == ["7"]
    assert "4" not in {i for ids, _ in again.iter_chunks(8) for i in ids}


def test_order_scan_matches_brute_force_loop(make_index):
    idx = make_index()
    rng = np.random.default_rng(2)
    v = np.abs(rng.standard_normal((70, DIM))).astype(np.float32)  # order embeddings are non-negative
    q = np.abs(rng.standard_normal((3, DIM))).astype(np.float32)
    ids = [f"x{i}" for i in range(70)]
    idx.add(ids, v)
    found, scores = idx.scan(q, 5, order_score_fn(), rows=16)  # several chunks
    for qi in range(3):
        ref = sorted(((-float(sum(max(0.0, a - b) ** 2 for a, b in zip(q[qi], v[j], strict=True))), ids[j])
                      for j in range(70)), key=lambda s: -s[0])[:5]
        assert found[qi] == [i for _, i in ref]
        np.testing.assert_allclose(scores[qi], [s for s, _ in ref], rtol=1e-4)


def test_top_k_ties_and_order():
    s = np.array([[0.1, 0.5, 0.5, 0.9, -1.0]], np.float32)
    idx, sc = top_k(s, 3)
    assert idx.tolist() == [[3, 1, 2]] and sc.tolist() == [[pytest.approx(0.9), 0.5, 0.5]]


def test_faiss_switches_exact_to_hnsw_and_back():
    rng = np.random.default_rng(3)
    x = unit(rng.standard_normal((120, DIM)))
    idx = FaissIndex(DIM, threshold=100)
    idx.add([str(i) for i in range(99)], x[:99])
    assert idx.structure == "flat"
    idx.add(["99"], x[99:100])
    assert idx.structure == "hnsw"
    idx.add([str(i) for i in range(100, 120)], x[100:])
    assert len(idx) == 120 and idx.search(x[110:111], 1)[0][0] == ["110"]
    idx.remove([str(i) for i in range(60, 120)])  # down to 60: still HNSW (hysteresis: back below 50)
    assert idx.structure == "hnsw" and len(idx) == 60
    assert all(int(i) < 60 for i in idx.search(x[100:101], 60)[0][0])
    idx.remove([str(i) for i in range(45, 60)])
    assert idx.structure == "flat" and len(idx) == 45
    found, scores = idx.search(x[:3], 45)
    ref = brute_force(x[:3], [str(i) for i in range(45)], x[:45], 45)
    assert found == [[i for _, i in r] for r in ref]


def test_hnsw_masks_removed_and_replaced_vectors(tmp_path):
    rng = np.random.default_rng(4)
    x = unit(rng.standard_normal((200, DIM)))
    idx = FaissIndex(DIM, tmp_path / "h.npz", kind="hnsw")
    idx.add([str(i) for i in range(200)], x)
    idx.remove(["5"])
    idx.add(["6"], x[7:8])  # 6 replaced: its old vector must not be found
    found, scores = idx.search(x[5:8], 3)
    assert "5" not in found[0]
    assert scores[1, 0] < 0.999  # x[6] itself is no longer stored under any id
    assert set(found[2][:2]) == {"6", "7"}
    np.testing.assert_allclose(idx.get(["6"]), x[7:8], atol=1e-6)
    idx.save()
    again = FaissIndex(DIM, tmp_path / "h.npz")
    assert again.structure == "hnsw" and len(again) == 199
    assert "5" not in again.search(x[5:6], 10)[0][0]


def test_hnsw_recall_on_clustered_vectors():
    """HNSW recall@10 against exact search on clustered unit vectors: >= 0.95 (issue 6 target)."""
    x = clustered(10_000, 128, n_clusters=200, spread=0.7, seed=5)
    q = clustered(200, 128, n_clusters=200, spread=0.7, seed=6)
    ids = [str(i) for i in range(len(x))]
    exact = FaissIndex(128, kind="flat")
    approx = FaissIndex(128, kind="hnsw", hnsw_m=32, ef_construction=80, ef_search=128)
    exact.add(ids, x)
    approx.add(ids, x)
    truth, _ = exact.search(q, 10)
    got, _ = approx.search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, got, strict=True)])
    assert recall >= 0.95, recall


def test_save_is_atomic(tmp_path, monkeypatch):
    import faiss

    idx = FaissIndex(DIM, tmp_path / "v.npz")
    x = unit(np.random.default_rng(7).standard_normal((10, DIM)))
    idx.add([str(i) for i in range(10)], x)
    idx.save()
    before = (tmp_path / "v.npz").read_bytes()
    idx.add(["new"], x[:1])

    def broken(_index):
        raise RuntimeError("disk full")

    monkeypatch.setattr(faiss, "serialize_index", broken)
    with pytest.raises(RuntimeError):
        idx.save()
    assert (tmp_path / "v.npz").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["v.npz"]  # no temporary file left behind
