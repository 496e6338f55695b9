"""MSVD (Chen & Dolan 2011): ``captions_msvd.json`` (clip id -> captions) plus ``<split>_list.txt`` files.

The standard split (Venugopalan et al. 2015) is train 1,200 / val 100 / test 670 clips. Protocols:

- ``all``: every English caption of a clip (about 41 on average; 80,827 in all), as JMET / Mithun et al. use.
- ``5`` (or any positive integer N): N captions per clip drawn at random, as LJRV (Otani et al. 2016) and
  SCDE (Zhao et al. 2020) do; the draw depends only on ``seed`` and the clip id, so it is reproducible and does
  not change with the split being read. Kept captions stay in file order.

Media: ``ROOT/{videos,YouTubeClips,clips}/<id>.avi|.mp4`` when present, else None.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from reelsearch.datasets.base import (
    Dataset,
    MediaFinder,
    claim_once,
    clean_caption,
    line_of,
    load_json,
    read_id_list,
)
from reelsearch.datasets.item import Item
from reelsearch.errors import DataFormatError, ReelsearchError

CAPTION_FILES = ["captions_msvd.json"]
VIDEO_DIRS = ["videos", "YouTubeClips", "clips"]
_LIST = re.compile(r"^(\w+)_list\.txt$")


def sample_captions(captions: list[str], k: int, seed: int, video_id: str) -> list[str]:
    """``k`` of ``captions`` drawn with a generator seeded by (seed, video id); all when there are at most k."""
    if len(captions) <= k:
        return list(captions)
    rng = random.Random(f"{seed}/{video_id}")
    return [captions[i] for i in sorted(rng.sample(range(len(captions)), k))]


def _protocol_k(protocol: str | int) -> int | None:
    """None for ``all``, else the number of captions per clip."""
    text = str(protocol).strip().lower()
    if text == "all":
        return None
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ReelsearchError(f"unknown MSVD protocol {protocol!r}; valid: all, 5 (or any positive number of captions)")


def load_msvd(root: Path, protocol: str | int = "all", seed: int = 0) -> Dataset:
    """MSVD with every caption (``all``) or ``N`` seeded random captions per clip."""
    k = _protocol_k(protocol)
    cap_file = next((root / n for n in CAPTION_FILES if (root / n).is_file()), None)
    if cap_file is None:
        raise DataFormatError(root, f"MSVD captions not found: need {' or '.join(CAPTION_FILES)}")
    data, text = load_json(cap_file, check_duplicate_keys=True)
    if not isinstance(data, dict):
        raise DataFormatError(cap_file, "expected an object: clip id -> list of captions", 1)
    captions: dict[str, list[str]] = {}
    for vid, caps in data.items():
        if not isinstance(caps, list):
            raise DataFormatError(cap_file, f"{vid}: expected a list of captions", line_of(text, vid))
        captions[vid] = [clean_caption(c, cap_file, lambda c=c: line_of(text, c), vid) for c in caps]
    lists = {m.group(1): p for p in sorted(root.glob("*_list.txt")) if (m := _LIST.match(p.name))}
    if not lists:
        raise DataFormatError(root, "no MSVD split lists (<split>_list.txt, e.g. train_list.txt) found")
    finder = MediaFinder(root / d for d in VIDEO_DIRS)
    owner: dict[str, tuple[Path, int]] = {}
    splits: dict[str, list[Item]] = {}
    for split, list_file in lists.items():
        items = []
        for no, vid in read_id_list(list_file):
            if vid not in captions:
                raise DataFormatError(list_file, f"unknown clip {vid!r} (not in {cap_file.name})", no)
            claim_once(owner, vid, list_file, no, "clip")
            caps = captions[vid] if k is None else sample_captions(captions[vid], k, seed, vid)
            items.append(Item(vid, finder.find(f"{vid}.avi", f"{vid}.mp4"), caps, split))
        splits[split] = items
    return Dataset("msvd", root, splits, protocol="all" if k is None else str(k))
