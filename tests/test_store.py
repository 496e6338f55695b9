"""FeatureStore: round trip, random access, resume, snapshots, compaction, merge, padded loading, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reelsearch.errors import ReelsearchError
from reelsearch.features import store as store_mod
from reelsearch.features import store_files
from reelsearch.features.store import FeatureNotFoundError, FeatureStore, FeatureStoreError


def make_items(n: int, dim: int, seed: int = 0, t_max: int = 12) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        f"vid{i:04d}": rng.standard_normal((int(rng.integers(1, t_max + 1)), dim)).astype(np.float32) for i in range(n)
    }


def write(store: FeatureStore, modality: str, items: dict, dtype: str | None = None, commit_every: int = 7):
    dim = next(iter(items.values())).shape[1]
    with store.writer(modality, dim, dtype=dtype, commit_every=commit_every) as w:
        for key, arr in items.items():
            w.add(key, arr, {"n": len(arr), "key": key})


def test_round_trip_float16_and_float32(tmp_path):
    items = make_items(60, 13)
    st = FeatureStore(tmp_path / "s")
    write(st, "appearance", items)
    write(st, "motion", items, dtype="float32")
    reread = FeatureStore(tmp_path / "s")
    assert reread.modalities() == ["appearance", "motion"]
    for key, arr in items.items():
        half = reread.get("appearance", key)
        assert half.dtype == np.float32 and half.shape == arr.shape
        np.testing.assert_array_equal(half, arr.astype(np.float16).astype(np.float32))  # numpy's own rounding
        assert np.abs(half - arr).max() <= 2**-10 * max(1.0, np.abs(arr).max())
        np.testing.assert_array_equal(reread.get("motion", key), arr)  # float32: exact
        assert reread.get_meta("motion", key) == {"n": len(arr), "key": key}
    info = reread.info()["modalities"]
    assert info["appearance"]["items"] == 60 and info["appearance"]["dim"] == 13
    assert info["appearance"]["dtype"] == "float16" and info["motion"]["dtype"] == "float32"
    assert info["motion"]["rows"] == sum(len(a) for a in items.values())
    assert info["appearance"]["segments"] == 9  # ceil(60 / 7) commits


def test_random_access_and_get_many(tmp_path):
    items = make_items(200, 8, seed=1)
    write(FeatureStore(tmp_path / "s"), "audio", items, dtype="float32", commit_every=16)
    st = FeatureStore(tmp_path / "s")
    keys = list(items)
    order = np.random.default_rng(2).permutation(len(keys))
    for i in order[:50]:
        np.testing.assert_array_equal(st.get("audio", keys[i]), items[keys[i]])
    picked = [keys[i] for i in order[50:80]]
    for key, arr in zip(picked, st.get_many("audio", picked), strict=True):
        np.testing.assert_array_equal(arr, items[key])
    assert st.keys("audio") == keys
    assert st.has("audio", keys[5]) and not st.has("audio", "nope") and not st.has("text", keys[5])
    assert st.length("audio", keys[3]) == len(items[keys[3]])
    assert st.get_meta("audio", keys[0]) == {"n": len(items[keys[0]]), "key": keys[0]}


def test_meta_is_json_and_optional(tmp_path):
    st = FeatureStore(tmp_path / "s")
    with st.writer("appearance", 2) as w:
        w.add("a", np.ones((2, 2)), {"fps": np.float32(25), "timestamps": np.array([0.0, 0.5]), "path": tmp_path})
        w.add("b", np.ones((1, 2)))
        with pytest.raises(FeatureStoreError, match="'c'.*JSON"):
            w.add("c", np.ones((1, 2)), {"bad": object()})
    assert st.get_meta("appearance", "a") == {"fps": 25.0, "timestamps": [0.0, 0.5], "path": str(tmp_path)}
    assert st.get_meta("appearance", "b") == {}
    assert not st.has("appearance", "c")


def test_resume_skips_committed_keys(tmp_path):
    items = make_items(30, 4, seed=3)
    keys = list(items)
    st = FeatureStore(tmp_path / "s")
    with st.writer("appearance", 4, commit_every=5) as w:
        for key in keys[:12]:
            w.add(key, items[key])
    st2 = FeatureStore(tmp_path / "s")
    added = []
    with st2.writer("appearance", 4, commit_every=5) as w:
        for key in keys:
            if w.done(key):
                continue
            w.add(key, items[key])
            added.append(key)
            assert w.done(key)  # pending counts as done for this writer
    assert added == keys[12:]
    st3 = FeatureStore(tmp_path / "s")
    assert st3.keys("appearance") == keys
    for key in keys:
        np.testing.assert_array_equal(st3.get("appearance", key), items[key].astype(np.float16).astype(np.float32))


def test_commits_are_visible_to_other_readers_before_close(tmp_path):
    items = make_items(10, 3)
    st = FeatureStore(tmp_path / "s")
    with st.writer("appearance", 3, commit_every=4) as w:
        for key in list(items)[:5]:
            w.add(key, items[key])
        other = FeatureStore(tmp_path / "s")
        assert other.keys("appearance") == list(items)[:4]  # one commit so far; the 5th item is pending
        assert not other.has("appearance", "vid0004")
        assert st.keys("appearance") == list(items)[:4]  # the writing store sees its own commits
    assert other.keys("appearance") == list(items)[:4]  # a snapshot, until refresh() or a miss
    assert other.has("appearance", "vid0004")  # a miss reloads when the manifest changed
    assert other.keys("appearance") == list(items)[:5]
    assert not other.has("appearance", "vid0009")


def test_snapshot_reader_survives_compaction(tmp_path):
    items = make_items(40, 5, seed=4)
    st = FeatureStore(tmp_path / "s")
    write(st, "appearance", items, commit_every=3)
    reader = FeatureStore(tmp_path / "s")
    first = next(iter(items))
    np.testing.assert_allclose(reader.get("appearance", first), items[first], atol=1e-2)  # maps one segment only
    st.finalize()
    assert sorted(p.suffix for p in (tmp_path / "s" / "appearance" / "segments").iterdir()) == [".json", ".npy"]
    for key, arr in items.items():  # the other segments are gone: the reader reloads and goes on
        np.testing.assert_allclose(reader.get("appearance", key), arr, atol=1e-2)
    info = FeatureStore(tmp_path / "s").info()["modalities"]["appearance"]
    assert info["finalized"] and info["segments"] == 1 and info["items"] == 40


def test_overwrite_replaces_and_finalize_drops_old_rows(tmp_path):
    st = FeatureStore(tmp_path / "s")
    with st.writer("appearance", 2, dtype="float32", commit_every=2) as w:
        w.add("a", np.zeros((3, 2)))
        w.add("b", np.ones((1, 2)))
        w.add("a", np.full((2, 2), 7.0), {"v": 2})
    assert st.keys("appearance") == ["a", "b"]
    np.testing.assert_array_equal(st.get("appearance", "a"), np.full((2, 2), 7.0))
    assert st.get_meta("appearance", "a") == {"v": 2}
    st.finalize("appearance")
    fresh = FeatureStore(tmp_path / "s")
    info = fresh.info()["modalities"]["appearance"]
    assert info["rows"] == 3 and info["segments"] == 1
    seg = next((tmp_path / "s" / "appearance" / "segments").glob("*.npy"))
    assert np.load(seg).shape == (3, 2)  # the replaced rows are gone from disk
    np.testing.assert_array_equal(fresh.get("appearance", "a"), np.full((2, 2), 7.0))
    with fresh.writer("appearance", 2) as w:  # appending after finalize works
        w.add("c", np.ones((4, 2)))
    assert FeatureStore(tmp_path / "s").info()["modalities"]["appearance"]["finalized"] is False


def test_writers_of_different_modalities_at_once_and_one_per_modality(tmp_path):
    st = FeatureStore(tmp_path / "s")
    with st.writer("appearance", 2) as wa, st.writer("audio", 3) as wb:
        wa.add("x", np.ones((1, 2)))
        wb.add("x", np.ones((2, 3)))
        with pytest.raises(FeatureStoreError, match="already open"):
            st.writer("appearance", 2)
        with pytest.raises(FeatureStoreError, match="another writer"):
            FeatureStore(tmp_path / "s").writer("audio", 3)  # the lock holds across store objects
        with pytest.raises(FeatureStoreError, match="close the open writer"):
            st.finalize("audio")
    assert st.get("audio", "x").shape == (2, 3) and st.get("appearance", "x").shape == (1, 2)


def test_error_inside_writer_keeps_items_added_before(tmp_path):
    st = FeatureStore(tmp_path / "s")
    with pytest.raises(RuntimeError), st.writer("appearance", 2) as w:
        w.add("a", np.ones((1, 2)))
        raise RuntimeError("extractor failed")
    assert FeatureStore(tmp_path / "s").keys("appearance") == ["a"]
    with st.writer("appearance", 2) as w:  # the lock was released
        assert w.done("a")


@pytest.mark.parametrize(
    ("array", "match"),
    [
        (np.ones((3, 5)), r"'k'.*expected \[T, 4\].*\(3, 5\)"),
        (np.ones((0, 4)), r"'k'.*T >= 1"),
        (np.ones(4), r"'k'.*shape \(4,\)"),
        (np.array([[1.0, np.nan, 0, 0]]), r"'k'.*NaN"),
        (np.full((1, 4), 1e6), r"'k'.*float16 range.*float32"),
        (np.array([["a", "b", "c", "d"]]), r"'k'.*numbers"),
    ],
)
def test_bad_items_are_refused_naming_the_key(tmp_path, array, match):
    st = FeatureStore(tmp_path / "s")
    with st.writer("appearance", 4) as w:
        with pytest.raises(FeatureStoreError, match=match):
            w.add("k", array)
        w.add("ok", np.ones((1, 4)))
    assert st.keys("appearance") == ["ok"]


def test_store_errors(tmp_path):
    st = FeatureStore(tmp_path / "s")
    write(st, "appearance", {"a": np.ones((2, 3), np.float32)})
    with pytest.raises(FeatureNotFoundError) as err:
        st.get("appearance", "zz")
    assert isinstance(err.value, KeyError) and isinstance(err.value, ReelsearchError)
    assert str(tmp_path / "s") in str(err.value) and "'zz'" in str(err.value)
    with pytest.raises(KeyError, match="no modality 'motion'.*appearance"):
        st.keys("motion")
    with pytest.raises(FeatureStoreError, match="stored as \\[T, 3\\] float16"):
        st.writer("appearance", 5)
    with pytest.raises(FeatureStoreError, match="stored as"):
        st.writer("appearance", 3, dtype="float32")
    for bad in ("../evil", "a@b@c", "@lite2", "appearance@../x"):
        with pytest.raises(FeatureStoreError, match="invalid feature name"):
            st.writer(bad, 3)
    with st.writer("appearance@lite2", 3) as w:  # a mixture's second reading of a modality is stored as such
        w.add("v", np.zeros((1, 3), np.float32))
    assert st.keys("appearance@lite2") == ["v"] and (tmp_path / "s" / "appearance@lite2").is_dir()
    with pytest.raises(FeatureStoreError, match="dtype"):
        st.writer("text", 3, dtype="int8")
    (tmp_path / "file").write_text("hi")
    with pytest.raises(FeatureStoreError, match="is a file"):
        FeatureStore(tmp_path / "file")
    with pytest.raises(FeatureStoreError, match="no feature store"):
        FeatureStore(tmp_path / "missing", create=False)
    manifest = tmp_path / "s" / "appearance" / "manifest.json"
    manifest.write_text("{broken")
    with pytest.raises(ReelsearchError, match="manifest.json.*unreadable"):
        FeatureStore(tmp_path / "s").keys("appearance")


def test_load_all_pads_and_samples(tmp_path):
    items = make_items(25, 6, seed=5, t_max=9)
    st = FeatureStore(tmp_path / "s")
    write(st, "appearance", items, dtype="float32")
    keys = list(items)[::2]
    x, lengths = st.load_all("appearance", keys)
    assert x.dtype == np.float32 and x.shape == (len(keys), max(len(items[k]) for k in keys), 6)
    for n, key in enumerate(keys):  # brute force: each row block and zero padding
        t = len(items[key])
        assert lengths[n] == t
        np.testing.assert_array_equal(x[n, :t], items[key])
        assert not x[n, t:].any()
    x16, _ = st.load_all("appearance", dtype="float16", max_len=4)
    assert x16.dtype == np.float16 and x16.shape == (25, 4, 6)
    for n, arr in enumerate(items.values()):
        if len(arr) > 4:  # uniform sampling: first and last rows kept, evenly spaced in between
            want = arr[[round(i * (len(arr) - 1) / 3) for i in range(4)]]
        else:
            want = np.concatenate([arr, np.zeros((4 - len(arr), 6), np.float32)])
        np.testing.assert_array_equal(x16[n], want.astype(np.float16))


def test_load_all_refuses_what_does_not_fit(tmp_path, monkeypatch):
    st = FeatureStore(tmp_path / "s")
    write(st, "appearance", make_items(5, 8))
    monkeypatch.setattr(store_mod, "_available_memory", lambda: 100)
    with pytest.raises(FeatureStoreError, match="GiB.*float16.*max_len"):
        st.load_all("appearance")


def test_merge_rank_stores(tmp_path):
    items = make_items(40, 4, seed=6)
    keys = list(items)
    ranks = []
    for r in range(3):
        rank_store = FeatureStore(tmp_path / f"rank{r}")
        write(rank_store, "appearance", {k: items[k] for k in keys[r::3]}, commit_every=4)
        if r < 2:
            write(rank_store, "audio", {k: items[k][:, :2].copy() for k in keys[r::3]}, dtype="float32")
        ranks.append(tmp_path / f"rank{r}")
    added = FeatureStore.merge(ranks, tmp_path / "all")
    assert added == {"appearance": 40, "audio": len(keys[0::3]) + len(keys[1::3])}
    merged = FeatureStore(tmp_path / "all")
    info = merged.info()["modalities"]
    assert info["appearance"]["items"] == 40 and info["appearance"]["finalized"]
    assert info["audio"] == {**info["audio"], "items": 27, "dim": 2, "dtype": "float32"}
    for key, arr in items.items():
        np.testing.assert_array_equal(merged.get("appearance", key), arr.astype(np.float16).astype(np.float32))
        assert merged.get_meta("appearance", key) == {"n": len(arr), "key": key}
    assert FeatureStore.merge(ranks, tmp_path / "all") == {"appearance": 0, "audio": 0}  # resumes


def test_merge_refuses_conflicts(tmp_path):
    write(FeatureStore(tmp_path / "a"), "appearance", {"x": np.ones((1, 4), np.float32)})
    write(FeatureStore(tmp_path / "b"), "appearance", {"x": np.ones((1, 4), np.float32)})
    write(FeatureStore(tmp_path / "c"), "appearance", {"y": np.ones((1, 5), np.float32)})
    with pytest.raises(FeatureStoreError, match="'x' is in both"):
        FeatureStore.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    with pytest.raises(FeatureStoreError, match="cannot merge"):
        FeatureStore.merge([tmp_path / "a", tmp_path / "c"], tmp_path / "out")
    with pytest.raises(FeatureStoreError, match="destination"):
        FeatureStore.merge([tmp_path / "a"], tmp_path / "a")


def test_on_disk_layout_is_plain_npy_and_json(tmp_path):
    st = FeatureStore(tmp_path / "s")
    write(st, "appearance", {"a": np.ones((2, 3), np.float32), "b": np.zeros((1, 3), np.float32)})
    mod = tmp_path / "s" / "appearance"
    manifest = json.loads((mod / "manifest.json").read_text())
    assert manifest["dim"] == 3 and manifest["dtype"] == "float16" and len(manifest["segments"]) == 1
    name = manifest["segments"][0]
    seg = json.loads((mod / "segments" / f"{name}.json").read_text())
    assert seg["keys"] == ["a", "b"] and seg["lengths"] == [2, 1]
    rows = np.load(mod / "segments" / f"{name}.npy")
    assert rows.dtype == np.float16 and rows.shape == (3, 3)
    np.testing.assert_array_equal(rows, [[1, 1, 1], [1, 1, 1], [0, 0, 0]])


def test_interrupted_finalize_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    items = make_items(20, 3, seed=9)
    st = FeatureStore(tmp_path / "s")
    write(st, "appearance", items, dtype="float32", commit_every=6)
    segments = tmp_path / "s" / "appearance" / "segments"
    before = sorted(p.name for p in segments.iterdir())
    real = store_files.atomic_write_json

    def fail_on_manifest(path, obj, indent=2):
        if path.name == "manifest.json":
            raise OSError("disk full")
        real(path, obj, indent=indent)

    monkeypatch.setattr(store_files, "atomic_write_json", fail_on_manifest)
    with pytest.raises(OSError, match="disk full"):
        st.finalize("appearance")
    monkeypatch.setattr(store_files, "atomic_write_json", real)
    assert len(list(segments.iterdir())) == len(before) + 2  # the new segment was written but never committed
    check = FeatureStore(tmp_path / "s")
    assert check.info()["modalities"]["appearance"]["segments"] == 4
    for key, arr in items.items():
        np.testing.assert_array_equal(check.get("appearance", key), arr)
    st.finalize("appearance")  # a second try succeeds and cleans up
    assert len(list(segments.iterdir())) == 2
    for key, arr in items.items():
        np.testing.assert_array_equal(FeatureStore(tmp_path / "s").get("appearance", key), arr)
