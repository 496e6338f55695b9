"""Entry points of the image-caption formats (flickr8k, flickr30k, coco): pick the token, Karpathy or COCO reader."""

from __future__ import annotations

from pathlib import Path

from reelsearch.datasets.base import Dataset, first_existing
from reelsearch.datasets.coco import ANNOTATION_DIRS, find_official_files, load_karpathy, load_official
from reelsearch.datasets.flickr import find_token_file, load_token_format
from reelsearch.errors import DataFormatError, ReelsearchError

PROTOCOLS = ["official", "karpathy"]


def _media_root(json_file: Path) -> Path:
    """Folder media paths are relative to when a JSON file is given: its folder, or above an annotations/ one."""
    folder = json_file.parent
    return folder.parent if folder.name in ("annotations", "annotation") else folder


def _check_protocol(protocol: str | None) -> str | None:
    if protocol is not None and protocol.lower() not in PROTOCOLS:
        raise ReelsearchError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    return protocol.lower() if protocol else None


def _karpathy_file(root: Path, name: str) -> Path | None:
    if root.is_file() and root.suffix == ".json":
        return root
    return first_existing(*(root / d / f"dataset_{name}.json" for d in ANNOTATION_DIRS))


def _load_flickr(name: str, root: Path, protocol: str | None) -> Dataset:
    protocol = _check_protocol(protocol)
    karpathy = _karpathy_file(root, name)
    token = None if root.is_file() else find_token_file(root)
    if protocol == "karpathy" or (protocol is None and token is None and karpathy is not None):
        if karpathy is None:
            raise DataFormatError(root, f"no Karpathy split file dataset_{name}.json")
        return load_karpathy(name, _media_root(root) if root.is_file() else root, karpathy)
    if token is None:
        raise DataFormatError(root, f"no {name} captions: need captions.txt (token format) or dataset_{name}.json")
    return load_token_format(name, root, token)


def load_flickr8k(root: Path, protocol: str | None = None) -> Dataset:
    """Flickr8k: token format + split lists (``official``), or ``dataset_flickr8k.json`` (``karpathy``)."""
    return _load_flickr("flickr8k", root, protocol)


def load_flickr30k(root: Path, protocol: str | None = None) -> Dataset:
    """Flickr30k: ``dataset_flickr30k.json`` (``karpathy``), or token format + split lists (``official``)."""
    return _load_flickr("flickr30k", root, protocol)


def load_coco(root: Path, protocol: str | None = None) -> Dataset:
    """COCO captions: ``dataset_coco.json`` (``karpathy``) or ``captions_<split><year>.json`` files (``official``).

    Without a protocol the Karpathy file wins when both are present (the usual retrieval split).
    """
    protocol = _check_protocol(protocol)
    if root.is_file():
        if root.name.startswith("captions_"):
            files = {k: v for k, v in find_official_files(root.parent).items() if v == root}
            return load_official("coco", _media_root(root), files or {"all": root})
        return load_karpathy("coco", _media_root(root), root)
    karpathy = _karpathy_file(root, "coco")
    if protocol == "karpathy" or (protocol is None and karpathy is not None):
        if karpathy is None:
            raise DataFormatError(root, "no Karpathy split file dataset_coco.json")
        return load_karpathy("coco", root, karpathy)
    files = find_official_files(root)
    if not files:
        raise DataFormatError(
            root, "no COCO captions: need dataset_coco.json or annotations/captions_<split><year>.json"
        )
    return load_official("coco", root, files)
