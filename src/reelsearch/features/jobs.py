"""What to extract: media files, folders searched recursively, or dataset items, as keyed jobs.

Keys: a dataset item's key is ``Item.key``. A file under a folder given on the command line gets the path relative
to that folder, POSIX separators, extension removed (``clips/a/video1.mp4`` under ``clips`` -> ``a/video1``); a file
given directly gets its name without extension. This matches the ids the dataset readers give (Flickr8k image stem,
MSR-VTT ``videoNNNN``). Bytes of a file name that are not UTF-8 appear as ``\\xNN`` escapes in its key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from reelsearch.datasets import load_dataset, parse_data_spec
from reelsearch.errors import ReelsearchError
from reelsearch.media.decode import AUDIO_EXTENSIONS, MEDIA_EXTENSIONS, escaped_path


@dataclass(frozen=True)
class Job:
    """One item to extract: its store key, media path (None: the dataset has no media for it), clip window."""

    key: str
    path: Path | None
    start: float | None = None
    end: float | None = None

    @property
    def shown(self) -> str:
        return escaped_path(self.path) if self.path is not None else ""


@dataclass
class Collected:
    jobs: list[Job]
    problems: list[dict]  # items that cannot even be attempted: {"id", "path", "error"}


def _key_of(rel: Path) -> str:
    stem = rel.with_suffix("") if rel.suffix.lower() in MEDIA_EXTENSIONS | AUDIO_EXTENSIONS else rel
    return escaped_path(stem.as_posix())


def _walk(folder: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.startswith(".") and Path(name).suffix.lower() in MEDIA_EXTENSIONS:
                found.append(Path(dirpath) / name)
    return found


def _looks_like_spec(source: str) -> bool:
    head = source.split(":", 1)[0]
    return ":" in source and head.replace("-", "").replace("_", "").isalnum() and not os.path.exists(source)


def collect_jobs(sources: list[str | Path], split: str | None = None) -> Collected:
    """Jobs for ``sources`` (files, folders, ``FORMAT:ROOT[:SPLIT]``), sorted by key; colliding keys reported."""
    jobs: list[Job] = []
    for source in sources:
        text = os.fsdecode(source)
        if _looks_like_spec(text):
            jobs.extend(_dataset_jobs(text, split))
            continue
        path = Path(text)
        if path.is_dir():
            jobs.extend(Job(_key_of(p.relative_to(path)), p) for p in _walk(path))
        elif path.is_file():
            jobs.append(Job(_key_of(Path(path.name)), path))
        else:
            raise ReelsearchError(f"{escaped_path(text)}: no such file, folder or dataset spec (FORMAT:ROOT[:SPLIT])")
    by_key: dict[str, list[Job]] = {}
    for job in jobs:
        by_key.setdefault(job.key, []).append(job)
    unique, problems = [], []
    for key in sorted(by_key):
        group = by_key[key]
        paths = {j.path for j in group}
        if len(paths) > 1:
            others = ", ".join(sorted(escaped_path(p) for p in paths if p is not None))
            for j in group:
                problems.append({"id": key, "path": j.shown, "error": f"key {key!r} is shared by: {others}"})
        else:
            unique.append(group[0])
    return Collected(unique, problems)


def _dataset_jobs(spec: str, split: str | None) -> list[Job]:
    fmt, root, spec_split = parse_data_spec(spec)
    dataset = load_dataset(fmt, root)
    items = dataset.items(spec_split or split)
    seen: dict[str, Job] = {}
    for item in items:  # an item in several splits (or several items of one video) is extracted once
        job = Job(item.key, Path(item.path) if item.path is not None else None, item.start, item.end)
        seen.setdefault(job.key, job)
    return list(seen.values())


def shard(jobs: list[Job], rank: int, world_size: int) -> list[Job]:
    """Rank ``rank``'s share: ``sorted(jobs)[rank::world_size]`` by key."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ReelsearchError(f"invalid rank {rank} of world size {world_size}")
    return sorted(jobs, key=lambda j: j.key)[rank::world_size]
