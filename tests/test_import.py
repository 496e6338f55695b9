"""Importing precomputed features (npy-dir, npz, HDF5, npy-matrix) and the `reelsearch features` CLI."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from reelsearch.cli.main import app
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.features.importers import detect_format, import_features, normalize, read_ids
from reelsearch.features.store import FeatureStore

D = 6


def features(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"video{i}": rng.standard_normal((int(rng.integers(1, 9)), D)).astype(np.float32) for i in range(n)}


def check_store(root, items: dict, modality: str = "appearance") -> None:
    store = FeatureStore(root)
    assert sorted(store.keys(modality)) == sorted(items)
    for key, arr in items.items():
        np.testing.assert_array_equal(store.get(modality, key), arr)


def test_npy_dir_with_every_shape_and_bad_files(tmp_path):
    src = tmp_path / "i3d"
    src.mkdir()
    items = features(5)
    for key, arr in items.items():
        np.save(src / f"{key}.npy", arr)
    np.save(src / "pooled.npy", np.arange(D, dtype=np.float64))  # [D] -> [1, D]
    np.save(src / "batched.npy", np.ones((1, 3, D), np.float32))  # [1, T, D]
    np.save(src / "resnet.npy", np.full((2, D, 1, 1), 2.0, np.float32))  # [T, D, 1, 1] pooled maps
    np.save(src / "wrongdim.npy", np.ones((4, D + 1), np.float32))
    np.save(src / "nan.npy", np.full((2, D), np.nan, np.float32))
    (src / "broken.npy").write_bytes(b"\x93NUMPY garbage")
    (src / "README.txt").write_text("not features")
    report = import_features(src, tmp_path / "store", "appearance", dtype="float32", progress=False)
    assert (report.imported, report.skipped, report.dim, report.total) == (8, 0, D, 11)
    bad = {p.id: p for p in report.bad}
    assert sorted(bad) == ["broken", "nan", "wrongdim"]
    assert bad["wrongdim"].source == str(src / "wrongdim.npy") and "dimension 7" in bad["wrongdim"].problem
    assert "NaN" in bad["nan"].problem and "cannot read" in bad["broken"].problem
    assert str(src / "broken.npy") in str(bad["broken"])
    expected = {
        **items,
        "pooled": np.arange(D, dtype=np.float32)[None],
        "batched": np.ones((3, D), np.float32),
        "resnet": np.full((2, D), 2.0, np.float32),
    }
    check_store(tmp_path / "store", expected)
    assert FeatureStore(tmp_path / "store").info()["modalities"]["appearance"]["finalized"]
    again = import_features(src, tmp_path / "store", "appearance", progress=False)  # resumes: nothing new
    assert (again.imported, again.skipped, len(again.bad)) == (0, 8, 3)


def test_npz(tmp_path):
    items = features(6, seed=1)
    np.savez(tmp_path / "clip.npz", **items, short=np.ones((2, 3)))
    report = import_features(tmp_path / "clip.npz", tmp_path / "store", "text", progress=False)
    assert report.imported == 6 and [p.id for p in report.bad] == ["short"]
    assert report.bad[0].source == f"{tmp_path / 'clip.npz'}[short]"
    store = FeatureStore(tmp_path / "store")
    for key, arr in items.items():  # default float16 storage
        np.testing.assert_array_equal(store.get("text", key), arr.astype(np.float16).astype(np.float32))


def test_hdf5_flat_datasets_like_msrvtt_dumps(tmp_path):
    items = features(5, seed=2)
    with h5py.File(tmp_path / "resnet152.h5", "w") as h5:
        for key, arr in items.items():
            h5.create_dataset(key, data=arr.astype(np.float64))
    report = import_features(
        tmp_path / "resnet152.h5", tmp_path / "store", "appearance", dtype="float32", progress=False
    )
    assert report.imported == 5 and not report.bad
    check_store(tmp_path / "store", items)


def test_hdf5_groups_per_id_and_split_containers(tmp_path):
    items = features(6, seed=3)
    keys = list(items)
    with h5py.File(tmp_path / "c3d.hdf5", "w") as h5:
        for key in keys[:2]:
            h5.create_group(key).create_dataset("c3d_features", data=items[key])  # one group per id
        train = h5.create_group("train")  # a container of per-id datasets
        for key in keys[2:5]:
            train.create_dataset(key, data=items[key])
        h5.create_group("test").create_dataset(keys[5], data=items[keys[5]])  # per-id group, one dataset inside?
        h5.create_group("dup").create_dataset(keys[0], data=items[keys[0]])
        h5["dup"].create_dataset("other", data=items[keys[0]])
    report = import_features(tmp_path / "c3d.hdf5", tmp_path / "store", "motion", dtype="float32", progress=False)
    # "test" holds exactly one dataset, so it reads as the features of an item called "test"
    assert report.imported == 7
    assert [(p.id, "duplicate" in p.problem) for p in report.bad] == [(keys[0], True)]
    store = FeatureStore(tmp_path / "store")
    np.testing.assert_array_equal(store.get("motion", "test"), items[keys[5]])
    np.testing.assert_array_equal(store.get("motion", "other"), items[keys[0]])
    for key in keys[:5]:
        np.testing.assert_array_equal(store.get("motion", key), items[key])


def test_hdf5_groups_with_several_datasets_need_dataset_name(tmp_path):
    items = features(3, seed=4)
    with h5py.File(tmp_path / "feats.h5", "w") as h5:
        for key, arr in items.items():
            g = h5.create_group(key)
            g.create_dataset("rgb", data=arr)
            g.create_dataset("flow", data=arr[:, :2])
        h5.create_group("odd").create_dataset("flow", data=np.ones((1, 2)))
    report = import_features(
        tmp_path / "feats.h5", tmp_path / "store", "appearance", dataset="rgb", dtype="float32", progress=False
    )
    assert report.imported == 3
    assert [p.id for p in report.bad] == ["odd"] and "no dataset 'rgb' (has: flow)" in report.bad[0].problem
    assert report.bad[0].source.endswith("feats.h5:/odd")
    check_store(tmp_path / "store", items)


def test_npy_matrix_2d_and_padded_3d(tmp_path):
    ids = [f"vid{i}" for i in range(1, 6)]
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n\n")
    pooled = np.random.default_rng(5).standard_normal((5, D)).astype(np.float32)
    np.save(tmp_path / "pooled.npy", pooled)
    report = import_features(
        tmp_path / "pooled.npy", tmp_path / "store", "places", ids=tmp_path / "ids.txt", dtype="float32", progress=False
    )
    assert report.imported == 5
    check_store(tmp_path / "store", {i: pooled[n][None] for n, i in enumerate(ids)}, "places")

    lengths = [3, 1, 4, 2, 4]
    padded = np.zeros((5, 4, D), np.float32)
    for n, t in enumerate(lengths):
        padded[n, :t] = n + 1
    np.save(tmp_path / "padded.npy", padded)
    import_features(
        tmp_path / "padded.npy", tmp_path / "store", "i3d", ids=tmp_path / "ids.txt", strip_padding=True, progress=False
    )
    store = FeatureStore(tmp_path / "store")
    assert [store.length("i3d", i) for i in ids] == lengths
    np.testing.assert_array_equal(store.get("i3d", "vid3"), np.full((4, D), 3.0))


def test_ids_filter_reports_missing_ids(tmp_path):
    src = tmp_path / "npys"
    src.mkdir()
    items = features(4, seed=6)
    for key, arr in items.items():
        np.save(src / f"{key}.npy", arr)
    (tmp_path / "ids.txt").write_text("video2\nvideo0\nvideo9\n")
    report = import_features(src, tmp_path / "store", "appearance", ids=tmp_path / "ids.txt", progress=False)
    assert report.imported == 2 and [(p.id, p.problem) for p in report.bad] == [
        ("video9", "listed in the ids file but not in the source")
    ]
    assert FeatureStore(tmp_path / "store").keys("appearance") == ["video2", "video0"]


def test_float16_overflow_is_a_bad_entry_suggesting_float32(tmp_path):
    np.savez(tmp_path / "f.npz", ok=np.ones((1, 3)), huge=np.full((1, 3), 1e6))
    report = import_features(tmp_path / "f.npz", tmp_path / "store", "audio", progress=False)
    assert report.imported == 1 and "float16 range" in report.bad[0].problem and "float32" in report.bad[0].problem
    report = import_features(tmp_path / "f.npz", tmp_path / "store32", "audio", dtype="float32", progress=False)
    assert report.imported == 2


def test_input_errors(tmp_path):
    np.save(tmp_path / "m.npy", np.ones((3, D)))
    (tmp_path / "two.txt").write_text("a\nb\n")
    with pytest.raises(DataFormatError, match="3 rows but the ids file lists 2"):
        import_features(tmp_path / "m.npy", tmp_path / "s", "appearance", ids=tmp_path / "two.txt", progress=False)
    with pytest.raises(ReelsearchError, match="needs an ids file"):
        import_features(tmp_path / "m.npy", tmp_path / "s", "appearance", progress=False)
    (tmp_path / "dups.txt").write_text("a\nb\n\na\n")
    with pytest.raises(DataFormatError, match=r"dups.txt:4: id 'a' repeats line 1"):
        read_ids(tmp_path / "dups.txt")
    with pytest.raises(DataFormatError, match="does not exist"):
        import_features(tmp_path / "nope.npz", tmp_path / "s", "appearance", progress=False)
    (tmp_path / "bad.h5").write_bytes(b"not hdf5")
    with pytest.raises(DataFormatError, match="bad.h5: not a readable HDF5"):
        import_features(tmp_path / "bad.h5", tmp_path / "s", "appearance", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match="no .npy files"):
        import_features(tmp_path / "empty", tmp_path / "s", "appearance", progress=False)
    with pytest.raises(DataFormatError, match="cannot tell the feature format"):
        detect_format(tmp_path / "two.txt")
    assert [detect_format(tmp_path / n) for n in ("empty", "a.npz", "a.hdf5", "a.H5", "m.npy")] == [
        "npy-dir",
        "npz",
        "hdf5",
        "hdf5",
        "npy-matrix",
    ]
    with pytest.raises(ValueError, match="shape"):
        normalize(np.ones((2, 3, 4)))


def test_import_resumes_after_interruption(tmp_path):
    src = tmp_path / "npys"
    src.mkdir()
    items = features(20, seed=7)
    for key, arr in items.items():
        np.save(src / f"{key}.npy", arr)
    store = FeatureStore(tmp_path / "store")
    from reelsearch.features.importers import imported_recipe

    recipe = imported_recipe("imported", D)
    with store.writer("appearance", D, dtype="float32", recipe=recipe) as w:  # what an interrupted import committed
        for key in list(items)[:7]:
            w.add(key, items[key])
    report = import_features(src, tmp_path / "store", "appearance", progress=False)
    assert (report.imported, report.skipped) == (13, 7)
    check_store(tmp_path / "store", items)


# ---- CLI ----------------------------------------------------------------------------------------------------------
runner = CliRunner()


def test_cli_import_and_info(tmp_path):
    src = tmp_path / "npys"
    src.mkdir()
    items = features(4, seed=8)
    for key, arr in items.items():
        np.save(src / f"{key}.npy", arr)
    store = str(tmp_path / "store")
    res = runner.invoke(app, ["features", "import", str(src), "--out", store, "--modality", "appearance",
                              "--extractor", "resnet152"])
    assert res.exit_code == 0, res.output
    assert "imported 4" in res.stdout
    res = runner.invoke(app, ["features", "import", str(src), "-o", store, "-m", "motion", "--dtype", "float32",
                              "--extractor", "i3d"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["features", "info", store, "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert list(info) == ["modalities"]
    assert {name: (m["items"], m["dim"]) for name, m in info["modalities"].items()} == {
        "appearance": (4, D),
        "motion": (4, D),
    }
    assert info["modalities"]["motion"]["dtype"] == "float32"
    assert info["modalities"]["motion"]["recipe"]["extractor"] == "i3d"  # what made them, for the recipe checks
    res = runner.invoke(app, ["features", "info", store])
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[1].split()[:4] == ["modality", "items", "dim", "dtype"]
    assert lines[2].split()[:4] == ["appearance", "4", str(D), "float16"] and "resnet152" in lines[2]
    res = runner.invoke(app, ["features", "import", str(src), "-o", store, "-m", "motion", "--extractor", "c3d"])
    assert isinstance(res.exception, ReelsearchError) and "made differently" in str(res.exception)  # never mixed


def test_cli_import_bad_entries_exit_3_and_json_report(tmp_path):
    np.savez(tmp_path / "f.npz", a=np.ones((2, 3)), b=np.ones((2, 4)), c=np.ones(3))
    res = runner.invoke(app, ["features", "import", str(tmp_path / "f.npz"), "-o", str(tmp_path / "s"), "-m", "audio",
                              "--extractor", "vggish", "--json"])  # fmt: skip
    assert res.exit_code == 3  # partial failure: the bad entry is reported, the rest imported
    assert f"bad entry: {tmp_path / 'f.npz'}[b]: id 'b'" in res.stderr
    report = json.loads(res.stdout)
    assert (report["imported"], report["dim"], [b["id"] for b in report["bad"]]) == (2, 3, ["b"])


def test_cli_merge_and_errors(tmp_path):
    for r in range(2):
        np.savez(tmp_path / f"r{r}.npz", **{f"v{r}{i}": np.full((1, 3), r + i, np.float32) for i in range(3)})
        res = runner.invoke(app, ["features", "import", str(tmp_path / f"r{r}.npz"), "-o", str(tmp_path / f"rank{r}"),
                                  "-m", "appearance", "--extractor", "clip-vit-b32"])  # fmt: skip
        assert res.exit_code == 0, res.output
    res = runner.invoke(
        app, ["features", "merge", str(tmp_path / "all"), str(tmp_path / "rank0"), str(tmp_path / "rank1")]
    )
    assert res.exit_code == 0, res.output
    assert FeatureStore(tmp_path / "all").info()["modalities"]["appearance"]["items"] == 6
    res = runner.invoke(app, ["features", "info", str(tmp_path / "missing"), "--json"])
    assert isinstance(res.exception, ReelsearchError) and "no feature store" in str(res.exception)
