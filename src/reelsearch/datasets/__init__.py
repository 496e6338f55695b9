"""Dataset readers: each turns a dataset's original files into ``Item``s grouped by split.

``load_dataset(format, root, **options) -> Dataset`` is the one entry point; ``FORMATS`` maps each format name to
its reader; ``parse_data_spec("FORMAT:ROOT[:SPLIT]")`` reads the compact form the CLI commands accept.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

from reelsearch.datasets.base import Dataset
from reelsearch.datasets.images import load_coco, load_flickr8k, load_flickr30k
from reelsearch.datasets.item import Item
from reelsearch.datasets.lsmdc import load_lsmdc
from reelsearch.datasets.manifest import load_manifest
from reelsearch.datasets.msrvtt import load_msrvtt
from reelsearch.datasets.msvd import load_msvd
from reelsearch.errors import ReelsearchError

FORMATS: dict[str, Callable[..., Dataset]] = {
    "flickr8k": load_flickr8k,
    "flickr30k": load_flickr30k,
    "coco": load_coco,
    "msrvtt": load_msrvtt,
    "msvd": load_msvd,
    "lsmdc": load_lsmdc,
    "manifest": load_manifest,
}

__all__ = ["FORMATS", "Dataset", "Item", "format_options", "load_dataset", "parse_data_spec"]


def _reader(fmt: str) -> Callable[..., Dataset]:
    reader = FORMATS.get(str(fmt).lower())
    if reader is None:
        raise ReelsearchError(f"unknown dataset format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    return reader


def format_options(fmt: str) -> list[str]:
    """Names of the options (``protocol``, ``seed``, ...) a format accepts."""
    return [p for p in inspect.signature(_reader(fmt)).parameters if p != "root"]


def load_dataset(format: str, root: str | Path, **options) -> Dataset:
    """Read dataset ``format`` (see FORMATS) from ``root``; options (``protocol=``, ``seed=``) go to its reader.

    Options given as None are left at the reader's default. Unknown formats, options, protocols and missing or
    malformed files raise ReelsearchError (DataFormatError names the file and line).
    """
    reader = _reader(format)
    root = Path(root).expanduser()
    if not root.exists():
        raise ReelsearchError(f"dataset root does not exist: {root}")
    options = {k: v for k, v in options.items() if v is not None}
    valid = format_options(format)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ReelsearchError(
            f"format {format} takes no option {', '.join(unknown)}; valid options: {', '.join(valid) or 'none'}"
        )
    return reader(root, **options)


def parse_data_spec(spec: str) -> tuple[str, Path, str | None]:
    """``"FORMAT:ROOT[:SPLIT]"`` -> (format, Path(root), split or None).

    The format is the text before the first ``:``; a last ``:``-separated part is the split when one more ``:``
    follows ROOT (so ROOT itself must not hold a ``:``). ``msvd:/data/msvd:test`` -> ("msvd", /data/msvd, "test").
    """
    fmt, sep, rest = str(spec).partition(":")
    fmt = fmt.strip().lower()
    if not sep or not fmt or not rest:
        raise ReelsearchError(
            f"bad data spec {spec!r}: expected FORMAT:ROOT[:SPLIT], FORMAT one of {', '.join(FORMATS)}"
        )
    _reader(fmt)
    root, sep, split = rest.rpartition(":") if ":" in rest else (rest, "", "")
    if not root:
        raise ReelsearchError(f"bad data spec {spec!r}: empty ROOT")
    return fmt, Path(root), split.strip() or None
