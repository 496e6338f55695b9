"""Dataset readers on the real files in ../shared/data (skipped when absent), counts checked against the raw files."""

from __future__ import annotations

import csv
import functools
import json
import time
import zipfile
from collections import Counter

import pytest

from conftest import shared_path
from reelsearch.datasets import load_dataset
from reelsearch.errors import ReelsearchError


def _counts(ds) -> dict[str, tuple[int, int]]:
    return {s: (v["items"], v["captions"]) for s, v in ds.info()["splits"].items()}


# ---- MSR-VTT ----


@pytest.fixture(scope="module")
def msrvtt_root():
    return shared_path("msrvtt")


@functools.cache
def msrvtt(root, protocol: str = "full"):
    """Each protocol read once per test session (a read is ~0.5 s of CPU)."""
    return load_dataset("msrvtt", root, protocol=protocol)


@pytest.fixture(scope="module")
def msrvtt_raw(msrvtt_root):
    """video id -> (json split, captions in file order), read with plain json/zipfile."""
    out = {}
    for zname, member in (
        ("train_val_annotation.zip", "train_val_videodatainfo.json"),
        ("test_videodatainfo.json.zip", "test_videodatainfo.json"),
    ):
        data = json.loads(zipfile.ZipFile(msrvtt_root / zname).read(member))
        for v in data["videos"]:
            out[v["video_id"]] = (v["split"], [])
        for s in data["sentences"]:
            out[s["video_id"]][1].append(s["caption"])
    return out


def test_msrvtt_full_counts_and_captions(msrvtt_root, msrvtt_raw):
    t0 = time.process_time()  # CPU time: robust on a machine shared with other jobs
    ds = msrvtt(msrvtt_root)
    assert time.process_time() - t0 < 3.0
    assert ds.splits() == ["train", "val", "test"]
    assert _counts(ds) == {"train": (6513, 130260), "val": (497, 9940), "test": (2990, 59800)}
    items = ds.items()
    assert len(items) == 10_000 and sum(len(i.captions) for i in items) == 200_000
    assert Counter(i.split for i in items) == {"train": 6513, "val": 497, "test": 2990}
    split_name = {"train": "train", "validate": "val", "test": "test"}
    for it in items:
        raw_split, raw_caps = msrvtt_raw[it.id]
        assert it.split == split_name[raw_split]
        assert it.captions == [" ".join(c.split()) for c in raw_caps]
    with_media = {i.id: i.path for i in items if i.path is not None}
    assert set(with_media) == {"video9770", "video9771"}
    assert all(p.is_file() and p.parent.name == "clips" for p in with_media.values())


@pytest.mark.parametrize(
    "protocol, counts",
    [
        ("1k-a", {"train": (9000, 180000), "test": (1000, 1000)}),
        ("9k", {"train": (9000, 180000), "test": (1000, 1000)}),
        ("7k", {"train": (7010, 140200), "test": (1000, 1000)}),
        ("miech", {"train": (6656, 133120), "test": (1000, 20000)}),
    ],
)
def test_msrvtt_protocols(msrvtt_root, protocol, counts):
    ds = msrvtt(msrvtt_root, protocol)
    assert ds.protocol == protocol
    assert _counts(ds) == counts
    train = {i.id for i in ds.items("train")}
    test = {i.id for i in ds.items("test")}
    assert not train & test


def test_msrvtt_1ka_test_is_the_jsfusion_csv(msrvtt_root):
    with open(msrvtt_root / "splits" / "MSRVTT_JSFUSION_test.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    test = msrvtt(msrvtt_root, "1k-a").items("test")
    assert [(i.id, i.captions) for i in test] == [(r["video_id"], [r["sentence"]]) for r in rows]
    assert test[0].id == "video9770" and test[0].path is not None and test[0].path.name == "video9770.mp4"
    train_9k = msrvtt(msrvtt_root, "9k").items("train")
    train_lines = (msrvtt_root / "splits" / "MSRVTT_train.9k.csv").read_text().split()[1:]
    assert [i.id for i in train_9k] == train_lines


def test_msrvtt_unknown_protocol_and_split(msrvtt_root):
    with pytest.raises(ReelsearchError, match="1k-a"):
        load_dataset("msrvtt", msrvtt_root, protocol="2k")
    ds = msrvtt(msrvtt_root, "miech")
    with pytest.raises(ReelsearchError, match="valid splits: train, test"):
        ds.items("val")


# ---- MSVD ----


@pytest.fixture(scope="module")
def msvd_root():
    return shared_path("msvd")


def test_msvd_all_captions(msvd_root):
    raw = json.loads((msvd_root / "captions_msvd.json").read_text())
    ds = load_dataset("msvd", msvd_root)
    assert ds.splits() == ["train", "val", "test"]
    assert [ds.info()["splits"][s]["items"] for s in ds.splits()] == [1200, 100, 670]
    items = ds.items()
    assert len(items) == 1970 and sum(len(i.captions) for i in items) == 80827
    for it in items:
        assert it.captions == [" ".join(c.split()) for c in raw[it.id]]
    test_ids = (msvd_root / "test_list.txt").read_text().split()
    assert [i.id for i in ds.items("test")] == test_ids


def test_msvd_five_random_captions_reproducible(msvd_root):
    full = {i.id: i.captions for i in load_dataset("msvd", msvd_root).items()}
    a = load_dataset("msvd", msvd_root, protocol="5", seed=1)
    b = load_dataset("msvd", msvd_root, protocol="5", seed=1)
    c = load_dataset("msvd", msvd_root, protocol=5, seed=2)
    assert _counts(a) == {"train": (1200, 6000), "val": (100, 500), "test": (670, 3350)}
    assert [i.captions for i in a.items()] == [i.captions for i in b.items()]
    differ = sum(x.captions != y.captions for x, y in zip(a.items(), c.items(), strict=True))
    assert differ > 1900  # with ~41 captions per clip two seeds almost never draw the same five
    for it in a.items():
        caps = full[it.id]
        rest = iter(caps)  # the draw is a subsequence of the file's captions (file order kept)
        assert len(it.captions) == 5 and all(any(x == y for y in rest) for x in it.captions)


# ---- Flickr8k ----


def test_flickr8k_official_splits():
    root = shared_path("flickr8k")
    t0 = time.process_time()
    ds = load_dataset("flickr8k", root)
    assert time.process_time() - t0 < 3.0
    assert ds.splits() == ["train", "dev"]
    assert _counts(ds) == {"train": (6000, 30000), "dev": (1000, 5000)}
    items = ds.items()
    assert all(len(i.captions) == 5 and i.path.is_file() and i.path.parent == root / "images" for i in items)
    first = (root / "captions.txt").read_text().splitlines()[0]
    image, caption = first.split("\t")
    by_id = {i.id: i for i in items}
    item = by_id[image.split("#")[0].removesuffix(".jpg")]
    assert item.captions[0] == " ".join(caption.split())
    assert [i.path.name for i in ds.items("dev")] == (root / "dev.txt").read_text().split()
