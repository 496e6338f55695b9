"""MSR-VTT (Xu et al. 2016) from its original annotation files, under the common split protocols.

Annotations: ``train_val_videodatainfo.json`` + ``test_videodatainfo.json`` (in ROOT, ROOT/annotation(s)/, or read
straight from ``train_val_annotation.zip`` / ``test_videodatainfo.json.zip``), or a combined ``MSRVTT_data.json``.
Each holds ``{"videos": [{"video_id", "split", ...}], "sentences": [{"video_id", "caption", "sen_id"}]}``.

Protocols (split lists in ROOT/splits/ or ROOT):

- ``full``: the json's own split field: train 6,513 / val 497 / test 2,990 videos, 20 captions each.
- ``1k-a`` (JSFusion, Yu et al. 2018): train = the 9k list, test = ``MSRVTT_JSFUSION_test.csv``: 1,000 videos
  with ONE caption each, the csv's sentence.
- ``9k`` / ``7k``: train = ``MSRVTT_train.9k.csv`` / ``MSRVTT_train.7k.csv``, test = the 1k-A test.
- ``miech`` (1k-B, Miech et al. 2018): ``train_list_miech.txt`` / ``test_list_miech.txt``, all 20 captions.

Media: ``ROOT/{clips,videos,videos/all,TrainValVideo,TestVideo}/<id>.mp4`` when it exists, else None.
"""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

from reelsearch.datasets.base import (
    Dataset,
    MediaFinder,
    claim_once,
    clean_caption,
    first_existing,
    line_of,
    parse_json,
    read_id_list,
    read_text,
    read_zip_member,
)
from reelsearch.datasets.item import Item
from reelsearch.errors import DataFormatError, ReelsearchError

PROTOCOLS = ["full", "1k-a", "9k", "7k", "miech"]
VIDEO_DIRS = ["clips", "videos", "videos/all", "TrainValVideo", "TestVideo"]
ANNOTATION_DIRS = [".", "annotation", "annotations"]
SPLIT_DIRS = ["splits", "."]
_JSON_SPLIT = {"train": "train", "validate": "val", "val": "val", "test": "test"}
_TRAIN_FILES = {
    "1k-a": ["MSRVTT_train.9k.csv", "train_list_jsfusion.txt"],
    "9k": ["MSRVTT_train.9k.csv", "train_list_jsfusion.txt"],
    "7k": ["MSRVTT_train.7k.csv"],
}
JSFUSION_TEST = "MSRVTT_JSFUSION_test.csv"


class _Video:
    __slots__ = ("id", "split", "captions", "meta")

    def __init__(self, vid: str, split: str, meta: dict):
        self.id, self.split, self.captions, self.meta = vid, split, [], meta


def _annotation_texts(root: Path) -> list[tuple[str, str]]:
    """(source name, json text) of every annotation file found, train/val first."""
    for sub in ANNOTATION_DIRS:
        combined = root / sub / "MSRVTT_data.json"
        if combined.is_file():
            return [(str(combined), read_text(combined))]
    out = []
    for wanted, zip_name in (
        ("train_val_videodatainfo.json", "train_val_annotation.zip"),
        ("test_videodatainfo.json", "test_videodatainfo.json.zip"),
    ):
        plain = first_existing(*(root / sub / wanted for sub in ANNOTATION_DIRS))
        if plain is not None:
            out.append((str(plain), read_text(plain)))
            continue
        archive = first_existing(*(root / sub / zip_name for sub in ANNOTATION_DIRS))
        if archive is None:
            raise DataFormatError(
                root, f"MSR-VTT annotations not found: need {wanted} (or {zip_name}, or MSRVTT_data.json) here"
            )
        try:
            with zipfile.ZipFile(archive) as zf:
                member = next((n for n in zf.namelist() if n.rsplit("/", 1)[-1] == wanted), None)
        except (zipfile.BadZipFile, OSError) as exc:
            raise DataFormatError(archive, f"not a readable zip file: {exc}") from exc
        if member is None:
            raise DataFormatError(archive, f"zip holds no {wanted}")
        out.append((f"{archive}!{member}", read_zip_member(archive, member)))
    return out


def read_annotations(root: Path) -> dict[str, _Video]:
    """Every video with its captions (file order) and json split, from whichever files ``root`` holds."""
    videos: dict[str, _Video] = {}
    for source, text in _annotation_texts(root):
        data = parse_json(text, source)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("videos"), list)
            or not isinstance(data.get("sentences"), list)
        ):
            raise DataFormatError(source, 'expected an object with "videos" and "sentences" lists', 1)
        for i, v in enumerate(data["videos"]):
            vid = v.get("video_id") if isinstance(v, dict) else None
            if not isinstance(vid, str) or not vid:
                raise DataFormatError(source, f"videos[{i}]: missing video_id")
            split = _JSON_SPLIT.get(v.get("split"))
            if split is None:
                raise DataFormatError(
                    source, f"videos[{i}] ({vid}): unknown split {v.get('split')!r}", line_of(text, vid)
                )
            if vid in videos:
                raise DataFormatError(source, f"videos[{i}]: duplicate video_id {vid}", line_of(text, vid, 2))
            meta = {"category": v.get("category"), "url": v.get("url")}
            meta.update(source_start=v.get("start time"), source_end=v.get("end time"))
            videos[vid] = _Video(vid, split, meta)
        for j, s in enumerate(data["sentences"]):
            vid = s.get("video_id") if isinstance(s, dict) else None
            where = f"sentences[{j}] (sen_id {s.get('sen_id') if isinstance(s, dict) else None})"
            if vid not in videos:
                raise DataFormatError(source, f"{where}: unknown video_id {vid!r}")
            cap = s.get("caption")
            videos[vid].captions.append(clean_caption(cap, source, lambda c=cap, t=text: line_of(t, c), where))
    return videos


def _split_file(root: Path, names: list[str]) -> Path:
    for name in names:
        p = first_existing(*(root / d / name for d in SPLIT_DIRS))
        if p is not None:
            return p
    raise DataFormatError(root, f"split file not found: {' or '.join(names)} (looked in {root}/splits/ and {root})")


def _csv_rows(path: Path, columns: list[str]) -> list[tuple[int, dict]]:
    """(line, row) of a csv file with a header holding ``columns``."""
    reader = csv.DictReader(io.StringIO(read_text(path)))
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise DataFormatError(path, f"header lacks column(s) {', '.join(missing)}; got {reader.fieldnames}", 1)
    rows = []
    for row in reader:
        if None in row or any(row[c] is None for c in columns):
            raise DataFormatError(path, f"expected {len(reader.fieldnames)} columns", reader.line_num)
        rows.append((reader.line_num, row))
    return rows


def _list_ids(path: Path) -> list[tuple[int, str]]:
    """(line, video id) from a ``.txt`` list or a csv with a ``video_id`` column; repeats are errors."""
    if path.suffix != ".csv":
        return read_id_list(path)
    out, seen = [], {}
    for no, row in _csv_rows(path, ["video_id"]):
        vid = row["video_id"].strip()
        if vid in seen:
            raise DataFormatError(path, f"duplicate video_id {vid} (first on line {seen[vid]})", no)
        seen[vid] = no
        out.append((no, vid))
    return out


def load_msrvtt(root: Path, protocol: str = "full") -> Dataset:
    """MSR-VTT under ``protocol`` (full, 1k-a, 9k, 7k, miech)."""
    protocol = protocol.lower()
    if protocol not in PROTOCOLS:
        raise ReelsearchError(f"unknown MSR-VTT protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    videos = read_annotations(root)
    finder = MediaFinder(root / d for d in VIDEO_DIRS)

    def item(vid: str, split: str, captions: list[str] | None = None) -> Item:
        v = videos[vid]
        path = finder.find(f"{vid}.mp4")
        return Item(vid, path, list(v.captions) if captions is None else captions, split, meta=dict(v.meta))

    owner: dict[str, tuple[Path, int]] = {}

    def claim(vid: str, path: Path, no: int) -> None:
        if vid not in videos:
            raise DataFormatError(path, f"unknown video {vid!r} (not in the MSR-VTT annotations)", no)
        claim_once(owner, vid, path, no)

    def from_list(path: Path, split: str) -> list[Item]:
        out = []
        for no, vid in _list_ids(path):
            claim(vid, path, no)
            out.append(item(vid, split))
        return out

    splits: dict[str, list[Item]] = {}
    if protocol == "full":
        for vid, v in videos.items():
            splits.setdefault(v.split, []).append(item(vid, v.split))
    elif protocol == "miech":
        splits["train"] = from_list(_split_file(root, ["train_list_miech.txt"]), "train")
        splits["test"] = from_list(_split_file(root, ["test_list_miech.txt"]), "test")
    else:
        splits["train"] = from_list(_split_file(root, _TRAIN_FILES[protocol]), "train")
        test_csv = _split_file(root, [JSFUSION_TEST])
        test = []
        for no, row in _csv_rows(test_csv, ["video_id", "sentence"]):
            vid = row["video_id"].strip()
            claim(vid, test_csv, no)
            test.append(item(vid, "test", [clean_caption(row["sentence"], test_csv, no)]))
        splits["test"] = test
    return Dataset("msrvtt", root, splits, protocol=protocol)
