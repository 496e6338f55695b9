"""LSMDC 2016 (Rohrbach et al.): tab-separated annotation files, one sentence per row.

Row: ``<CLIP_ID>\\t<START_ALIGNED>\\t<END_ALIGNED>\\t<START_EXTRACTED>\\t<END_EXTRACTED>\\t<SENTENCE>`` with time
stamps ``hh.mm.ss.mmm`` (``01.02.27.034``); extra columns (fill-in-the-blank, paraphrase files) are ignored.
Files (ROOT or ROOT/annotations/): ``LSMDC16_annos_training.csv`` -> train (101,079 rows),
``LSMDC16_annos_val.csv`` -> val (7,408), ``LSMDC16_annos_test.csv`` (public test) -> test (10,053),
``LSMDC16_annos_blindtest.csv`` -> blindtest (no sentences), ``LSMDC16_challenge_1000_publictect.csv`` (sic) ->
test1k; ``*_someone.csv`` variants are used when the plain file is absent.

A clip id names ``<movie>_<start>-<end>``; rows that repeat a clip id add captions to that clip. Media: the clip
``ROOT/clips/<movie>/<clip>.avi`` (or ``ROOT/<movie>/<clip>.avi``) when present; else a whole movie
``ROOT/movies/<movie>.{mp4,avi,mkv}`` with ``start``/``end`` the extracted clip's seconds; else None.
"""

from __future__ import annotations

import re
from pathlib import Path

from reelsearch.datasets.base import Dataset, MediaFinder, first_existing, numbered_lines, read_text
from reelsearch.datasets.item import Item
from reelsearch.errors import DataFormatError

SPLIT_FILES = {
    "train": "LSMDC16_annos_training",
    "val": "LSMDC16_annos_val",
    "test": "LSMDC16_annos_test",
    "blindtest": "LSMDC16_annos_blindtest",
    "test1k": "LSMDC16_challenge_1000_publictect",
}
ANNOTATION_DIRS = [".", "annotations", "annotation"]
_STAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{2})\.(\d{1,3})$")
_CLIP = re.compile(r"^(?P<movie>.+)_\d+\.\d{2}\.\d{2}\.\d+-\d+\.\d{2}\.\d{2}\.\d+$")


def parse_stamp(stamp: str) -> float | None:
    """``hh.mm.ss.mmm`` -> seconds (None when malformed)."""
    m = _STAMP.match(stamp.strip())
    if not m:
        return None
    h, mi, s, ms = m.groups()
    return int(h) * 3600 + int(mi) * 60 + int(s) + int(ms.ljust(3, "0")) / 1000


def movie_of(clip_id: str) -> str:
    """Movie folder of a clip id: ``0001_American_Beauty_00.00.51.926-00.00.54.557`` -> ``0001_American_Beauty``."""
    m = _CLIP.match(clip_id)
    return m.group("movie") if m else clip_id


def find_split_files(root: Path) -> dict[str, Path]:
    """Split -> annotation file present under ``root``."""
    found = {}
    for split, stem in SPLIT_FILES.items():
        p = first_existing(*(root / d / f"{stem}{tail}.csv" for tail in ("", "_someone") for d in ANNOTATION_DIRS))
        if p is not None:
            found[split] = p
    return found


class _MediaIndex:
    """Clip files under clips/<movie>/ or <movie>/, movies under movies/."""

    def __init__(self, root: Path):
        self.root = root
        self.clips = MediaFinder([root / "clips", root])
        self.movies = MediaFinder([root / "movies"])

    def find(
        self, clip_id: str, movie: str, start: float, end: float
    ) -> tuple[Path | None, float | None, float | None]:
        clip = self.clips.find(f"{clip_id}.avi", f"{clip_id}.mp4", subdir=movie)
        if clip is not None:
            return clip, None, None
        whole = self.movies.find(f"{movie}.mp4", f"{movie}.avi", f"{movie}.mkv")
        return (whole, start, end) if whole is not None else (None, None, None)


def read_annotation_file(path: Path, split: str, media: _MediaIndex) -> list[Item]:
    """Clips of one annotation file in order of first appearance; repeated clip ids gather captions."""
    blind = split == "blindtest"
    items: dict[str, Item] = {}
    for no, line in numbered_lines(read_text(path)):
        cols = line.rstrip("\r\n").split("\t")
        if len(cols) < (5 if blind else 6):
            raise DataFormatError(
                path, f"expected 6 tab-separated columns (clip, 4 time stamps, sentence), got {len(cols)}", no
            )
        clip_id = cols[0].strip()
        stamps = [parse_stamp(c) for c in cols[1:5]]
        if not clip_id or any(s is None for s in stamps):
            bad = next((c for c, s in zip(cols[1:5], stamps, strict=True) if s is None), clip_id)
            raise DataFormatError(path, f"bad clip id or time stamp {bad!r} (expected hh.mm.ss.mmm)", no)
        sentence = " ".join(cols[5].split()) if len(cols) > 5 else ""
        if not sentence and not blind:
            raise DataFormatError(path, "empty caption", no)
        if clip_id in items:
            if sentence:
                items[clip_id].captions.append(sentence)
            continue
        movie = movie_of(clip_id)
        clip_path, start, end = media.find(clip_id, movie, stamps[2], stamps[3])
        meta = {"movie": movie, "aligned": (stamps[0], stamps[1]), "extracted": (stamps[2], stamps[3]), "line": no}
        items[clip_id] = Item(
            clip_id, clip_path, [sentence] if sentence else [], split, start=start, end=end, meta=meta
        )
    return list(items.values())


def load_lsmdc(root: Path) -> Dataset:
    """Every LSMDC16 annotation file found under ``root``."""
    files = find_split_files(root)
    if not files:
        names = ", ".join(f"{s}.csv" for s in SPLIT_FILES.values())
        raise DataFormatError(root, f"no LSMDC16 annotation files found (expected {names})")
    media = _MediaIndex(root)
    return Dataset("lsmdc", root, {split: read_annotation_file(p, split, media) for split, p in files.items()})
