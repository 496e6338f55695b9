"""Property tests (hypothesis) of the parsers users feed files to: random bytes, random text and mutated valid files
give our clear error (a ReelsearchError that names the file or its dataset folder) or a result — never a traceback.

Covered: every dataset reader's caption files (Flickr token file and split lists, COCO Karpathy and official JSON,
MSR-VTT annotation JSON and split CSV, MSVD captions JSON, LSMDC CSV, the JSONL manifest), multiple-choice files
and the caption lists of `annotate`. Each case starts from a small valid dataset (the crafted ones of
test_datasets_formats.py), replaces one of its files by the drawn bytes and loads it as a user would.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reelsearch.datasets import load_dataset
from reelsearch.errors import ReelsearchError
from reelsearch.mc import Question, read_mc_file, write_mc_file
from reelsearch.search import read_captions
from test_datasets_formats import coco_file, flickr_root, karpathy, kimg, lsmdc_row, make_msrvtt, make_msvd, write

#: Examples per parser; REELSEARCH_FUZZ_EXAMPLES=400 makes a longer hunt (about 2 minutes; nothing found at 400).
FUZZ = settings(max_examples=int(os.environ.get("REELSEARCH_FUZZ_EXAMPLES", "25")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _mutate(data: bytes, edits: list[tuple[int, int, int, bytes]]) -> bytes:
    """Apply byte edits: (kind, position, length, bytes) with kind 0 delete, 1 insert, 2 overwrite, 3 truncate,
    4 repeat a slice (e.g. a line twice)."""
    for kind, pos, length, blob in edits:
        pos = pos % (len(data) + 1)
        if kind == 0:
            data = data[:pos] + data[pos + length:]
        elif kind == 1:
            data = data[:pos] + blob + data[pos:]
        elif kind == 2:
            data = data[:pos] + blob + data[pos + len(blob):]
        elif kind == 3:
            data = data[:pos]
        else:
            data = data[:pos] + data[pos:pos + length] * 2 + data[pos + length:]
    return data


_EDIT = st.tuples(st.integers(0, 4), st.integers(0, 10_000), st.integers(0, 40),
                  st.one_of(st.binary(max_size=8), st.sampled_from([b"\t", b"\n", b",", b'"', b"{", b"}", b"[",
                                                                    b"]", b":", b"#", b"\xff", b"\x00", b"-1",
                                                                    b"null", b"1e999", b"\r\n", b"\xef\xbb\xbf"])))


def contents(valid: bytes):
    """Random bytes, random text, or the valid file with 1-4 byte edits."""
    return st.one_of(st.binary(max_size=400), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.lists(_EDIT, min_size=1, max_size=4).map(lambda edits: _mutate(valid, edits)))


def check(load: Callable[[Path], object], root: Path, target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` (inside a copy of ``root``) and load: a result or a ReelsearchError naming it."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / root.name
        shutil.copytree(root, copy)
        victim = copy / target.relative_to(root)
        victim.write_bytes(data)
        try:
            load(copy)
        except ReelsearchError as exc:
            assert str(copy) in str(exc) or victim.name in str(exc), f"the error names no file: {exc}"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-base")


def _case(base: Path, name: str, build: Callable[[Path], Path], relative: str):
    root = base / name
    if not root.exists():
        build(root)
    return root, root / relative


# -- datasets --------------------------------------------------------------------------------------------------
def _flickr(root: Path) -> Path:
    made = flickr_root(root.parent / "tmp-flickr")
    shutil.move(made, root)
    return root


def _karpathy(root: Path) -> Path:
    write(root / "dataset_coco.json", karpathy([kimg("a.jpg", "train", ["A dog runs.", "A dog."]),
                                                kimg("b.jpg", "val", ["A cat."], "val2014")]))
    write(root / "train2014" / "a.jpg", b"x")
    return root


def _coco_official(root: Path) -> Path:
    write(root / "annotations" / "captions_val2014.json",
          coco_file([(5, "COCO_val2014_5.jpg"), (6, "x6.jpg")], [(6, 3, "E."), (5, 4, "F.")]))
    return root


def _lsmdc(root: Path) -> Path:
    c1 = "0001_American_Beauty_00.00.51.926-00.00.54.557"
    write(root / "LSMDC16_annos_training.csv", lsmdc_row(c1) + lsmdc_row(c1, "Again."))
    write(root / "LSMDC16_annos_val.csv", lsmdc_row("1010_TITANIC_01.02.27.034-01.02.29.034", "A ship."))
    return root


def _manifest(root: Path) -> Path:
    write(root / "media" / "a.mp4", b"x")
    lines = [{"id": "a", "path": "media/a.mp4", "captions": ["A dog runs."], "split": "train"},
             {"id": 7, "path": None, "features_key": "feat7", "start": 1.5, "end": 4}]
    write(root / "manifest.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    return root


DATASETS = {  # name: (format, builder, the file whose bytes are drawn)
    "flickr-tokens": ("flickr8k", _flickr, "captions.txt"),
    "flickr-split-list": ("flickr8k", _flickr, "train.txt"),
    "coco-karpathy": ("coco", _karpathy, "dataset_coco.json"),
    "coco-official": ("coco", _coco_official, "annotations/captions_val2014.json"),
    "msrvtt-json": ("msrvtt", lambda r: make_msrvtt(r, zipped=False), "annotation/train_val_videodatainfo.json"),
    "msrvtt-split-csv": ("msrvtt", lambda r: make_msrvtt(r, zipped=False), "splits/MSRVTT_JSFUSION_test.csv"),
    "msvd": ("msvd", make_msvd, "captions_msvd.json"),
    "lsmdc": ("lsmdc", _lsmdc, "LSMDC16_annos_training.csv"),
    "manifest": ("manifest", _manifest, "manifest.jsonl"),
}


@pytest.mark.parametrize("name", list(DATASETS))
@FUZZ
@given(data=st.data())
def test_dataset_files_give_a_result_or_our_error(base, name, data):
    fmt, build, relative = DATASETS[name]
    root, target = _case(base, name, build, relative)
    load_dataset(fmt, root)  # the valid one loads
    check(lambda r: load_dataset(fmt, r).info(), root, target, data.draw(contents(target.read_bytes())))


# -- multiple-choice files and annotate's caption lists --------------------------------------------------------
def _mc(root: Path) -> Path:
    root.mkdir(parents=True)
    write_mc_file(root / "mc.csv", [
        Question("clip1", ("a man runs", "a dog sits", "rain falls", "two cats", "a car"), 2,
                 ("00.00.01.000", "00.00.02.000", "00.00.01.000", "00.00.02.000")),
        Question("clip2", ("x", "y", "z", "w", "v"), 0)])
    return root


def _captions(root: Path) -> Path:
    write(root / "captions.txt", "a dog runs\n\n  a cat sleeps  \r\nsomeone cooks\n")
    return root


@pytest.mark.parametrize("name, build, relative, load", [
    ("mc", _mc, "mc.csv", lambda r: read_mc_file(r / "mc.csv")),
    ("captions", _captions, "captions.txt", lambda r: read_captions(r / "captions.txt")),
])
@FUZZ
@given(data=st.data())
def test_text_files_give_a_result_or_our_error(base, name, build, relative, load, data):
    root, target = _case(base, name, build, relative)
    load(root)
    check(load, root, target, data.draw(contents(target.read_bytes())))


def test_a_nul_byte_in_a_clip_id_is_a_result_or_our_error(tmp_path):
    """Found by the fuzzer: an LSMDC clip id holding a NUL byte made the media lookup raise ValueError."""
    root = _lsmdc(tmp_path / "lsmdc")
    write(root / "LSMDC16_annos_training.csv", "\x00\t0.00.00.0\t0.00.00.0\t0.00.00.0\t0.00.00.0\t\x00\n")
    try:
        load_dataset("lsmdc", root).info()
    except ReelsearchError:
        pass
