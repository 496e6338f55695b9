"""A JSONL manifest for a user's own videos: one object per line.

``{"id": "clip1", "path": "videos/clip1.mp4", "captions": ["a dog runs"], "split": "train"}``

- ``id`` (required, unique) and ``path`` (required; relative to the manifest's folder, or absolute; ``null`` for an
  item known only by its precomputed features).
- ``captions``: a list of strings, may be empty or absent (unlabeled data to search); ``split`` defaults to ``all``.
- optional ``features_key``, ``start`` / ``end`` (seconds inside ``path``); any other key goes to ``Item.meta``.

ROOT is the ``.jsonl`` file itself or a folder holding ``manifest.jsonl``. Every referenced file must exist.
"""

from __future__ import annotations

import json
from pathlib import Path

from reelsearch.datasets.base import Dataset, clean_caption, numbered_lines, read_text
from reelsearch.datasets.item import Item
from reelsearch.errors import DataFormatError

MANIFEST_NAME = "manifest.jsonl"
DEFAULT_SPLIT = "all"
_KNOWN = {"id", "path", "captions", "split", "features_key", "start", "end"}


def find_manifest(root: Path) -> Path:
    """The manifest file: ``root`` itself or ``root/manifest.jsonl``."""
    if root.is_file():
        return root
    if (root / MANIFEST_NAME).is_file():
        return root / MANIFEST_NAME
    raise DataFormatError(root, f"no manifest: give a .jsonl file or a folder holding {MANIFEST_NAME}")


def _seconds(obj: dict, key: str, path: Path, no: int) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise DataFormatError(path, f"{key} must be a non-negative number of seconds, got {value!r}", no)
    return float(value)


def parse_manifest_line(obj: object, manifest: Path, no: int) -> Item:
    """One manifest object -> Item; every problem names the manifest line."""
    if not isinstance(obj, dict):
        raise DataFormatError(manifest, f"expected a JSON object, got {type(obj).__name__}", no)
    item_id = obj.get("id")
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        item_id = str(item_id)
    if not isinstance(item_id, str) or not item_id.strip():
        raise DataFormatError(manifest, 'missing or empty "id"', no)
    if "path" not in obj:
        raise DataFormatError(manifest, f'{item_id}: missing "path" (use null for an item with features only)', no)
    media = obj["path"]
    if media is not None:
        if not isinstance(media, str) or not media:
            raise DataFormatError(manifest, f'{item_id}: "path" must be a non-empty string or null', no)
        media = Path(media).expanduser()
        media = media if media.is_absolute() else manifest.parent / media
        if not media.is_file():
            raise DataFormatError(manifest, f"{item_id}: media file does not exist: {media}", no)
    captions = obj.get("captions", [])
    if isinstance(captions, str):
        captions = [captions]
    if not isinstance(captions, list):
        raise DataFormatError(manifest, f'{item_id}: "captions" must be a list of strings', no)
    captions = [clean_caption(c, manifest, no, f"{item_id} captions[{i}]") for i, c in enumerate(captions)]
    split = obj.get("split", DEFAULT_SPLIT)
    if not isinstance(split, str) or not split.strip():
        raise DataFormatError(manifest, f'{item_id}: "split" must be a non-empty string', no)
    key = obj.get("features_key")
    if key is not None and (not isinstance(key, str) or not key):
        raise DataFormatError(manifest, f'{item_id}: "features_key" must be a non-empty string', no)
    start, end = _seconds(obj, "start", manifest, no), _seconds(obj, "end", manifest, no)
    if start is not None and end is not None and end <= start:
        raise DataFormatError(manifest, f"{item_id}: end ({end}) must be after start ({start})", no)
    meta = {k: v for k, v in obj.items() if k not in _KNOWN}
    return Item(item_id.strip(), media, captions, split.strip(), key, start, end, meta)


def load_manifest(root: Path) -> Dataset:
    """Read a JSONL manifest; blank lines are skipped."""
    manifest = find_manifest(root)
    seen: dict[str, int] = {}
    splits: dict[str, list[Item]] = {}
    for no, line in numbered_lines(read_text(manifest)):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(manifest, f"bad JSON: {exc.msg} (column {exc.colno})", no) from None
        item = parse_manifest_line(obj, manifest, no)
        if item.id in seen:
            raise DataFormatError(manifest, f"duplicate id {item.id!r} (first on line {seen[item.id]})", no)
        seen[item.id] = no
        splits.setdefault(item.split, []).append(item)
    if not seen:
        raise DataFormatError(manifest, "manifest holds no items")
    return Dataset("manifest", root, splits)
