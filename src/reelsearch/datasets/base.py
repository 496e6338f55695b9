"""The Dataset container every reader returns, and the small file helpers the readers share."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from reelsearch.datasets.item import Item
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import numbered_lines, read_text  # noqa: F401  (re-exported for the readers)

# Well-known split names come first, in this order; any other split follows alphabetically.
_SPLIT_ORDER = ["train", "restval", "val", "dev", "validate", "test"]


def order_splits(names: Iterable[str]) -> list[str]:
    """Split names in the conventional order: train, restval, val, dev, test, then the rest by name."""
    rank = {n: i for i, n in enumerate(_SPLIT_ORDER)}
    return sorted(set(names), key=lambda n: (rank.get(n, len(rank)), n))


class Dataset:
    """Items of one dataset grouped by split, as read from its original files.

    name: the format (``msrvtt``, ``flickr8k``, ...); root: the folder (or file) it was read from;
    protocol: the split/caption protocol used, when the format has several.
    """

    def __init__(self, name: str, root: Path, splits: dict[str, list[Item]], protocol: str | None = None):
        self.name = name
        self.root = Path(root)
        self.protocol = protocol
        self._splits = {s: splits[s] for s in order_splits(splits)}

    def splits(self) -> list[str]:
        """Split names, train first and test last."""
        return list(self._splits)

    def items(self, split: str | None = None) -> list[Item]:
        """Items of ``split`` in file order; every split in turn when ``split`` is None."""
        if split is None:
            return [item for items in self._splits.values() for item in items]
        if split not in self._splits:
            raise ReelsearchError(
                f"{self.name} ({self.root}) has no split {split!r}; valid splits: {', '.join(self._splits) or 'none'}"
            )
        return list(self._splits[split])

    def info(self) -> dict:
        """``{"splits": {name: {"items": N, "captions": M}}}``."""
        return {
            "splits": {
                s: {"items": len(items), "captions": sum(len(it.captions) for it in items)}
                for s, items in self._splits.items()
            }
        }

    def info_table(self) -> str:
        """``info()`` as a table: a title line (name, root, protocol), then items and captions per split and in
        total."""
        proto = f"  protocol {self.protocol}" if self.protocol else ""
        rows = [(name, c["items"], c["captions"]) for name, c in self.info()["splits"].items()]
        rows.append(("total", sum(r[1] for r in rows), sum(r[2] for r in rows)))
        width = max(5, *(len(r[0]) for r in rows))
        lines = [f"{self.name}  {self.root}{proto}", f"{'split':<{width}}  {'items':>9}  {'captions':>9}"]
        lines += [f"{name:<{width}}  {n_items:>9,}  {n_caps:>9,}" for name, n_items, n_caps in rows]
        return "\n".join(lines)

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}={len(v)}" for s, v in self._splits.items())
        proto = f", protocol={self.protocol!r}" if self.protocol else ""
        return f"Dataset({self.name!r}, {str(self.root)!r}{proto}: {counts})"


def claim_once(owner: dict[str, tuple[Path, int]], item_id: str, path: Path, no: int, what: str = "video") -> None:
    """Record that ``path``:``no`` lists ``item_id``; a second listing anywhere is a DataFormatError naming both."""
    if item_id in owner:
        other, other_no = owner[item_id]
        raise DataFormatError(path, f"{what} {item_id} is also listed in {other.name}:{other_no}", no)
    owner[item_id] = (path, no)


def read_id_list(path: Path) -> list[tuple[int, str]]:
    """A split list: one id per line. Returns (line, id); a repeated id is a DataFormatError."""
    seen: dict[str, int] = {}
    out = []
    for no, line in numbered_lines(read_text(path)):
        name = line.strip()
        if len(name.split()) != 1:
            raise DataFormatError(path, f"expected one id per line, got {line!r}", no)
        if name in seen:
            raise DataFormatError(path, f"duplicate id {name!r} (first on line {seen[name]})", no)
        seen[name] = no
        out.append((no, name))
    return out


def _reject_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise _DuplicateKey(dup)
    return dict(pairs)


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def parse_json(text: str, source: str | Path, check_duplicate_keys: bool = False):
    """Parse JSON text; bad JSON (or a repeated object key, when asked) is a DataFormatError with its line."""
    try:
        if check_duplicate_keys:
            return json.loads(text, object_pairs_hook=_reject_duplicate_keys)
        return json.loads(text)
    except _DuplicateKey as exc:
        raise DataFormatError(source, f"duplicate key {exc.key!r}", line_of(text, exc.key, 2)) from None
    except json.JSONDecodeError as exc:
        raise DataFormatError(source, f"bad JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None


def load_json(path: Path, check_duplicate_keys: bool = False) -> tuple[object, str]:
    """(parsed JSON, its text) of a file."""
    text = read_text(path)
    return parse_json(text, path, check_duplicate_keys), text


def read_zip_member(zip_path: Path, member: str) -> str:
    """Text of one member of a zip archive."""
    try:
        with zipfile.ZipFile(zip_path) as zf:
            return zf.read(member).decode("utf-8-sig")
    except (zipfile.BadZipFile, KeyError, OSError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{zip_path}!{member}", f"cannot read from zip: {exc}") from exc


def line_of(text: str, value: object, occurrence: int = 1) -> int | None:
    """1-based line of the ``occurrence``-th appearance of JSON ``value`` in ``text`` (None when absent).

    Only for error messages: it scans ``text``.
    """
    needles = [json.dumps(value, ensure_ascii=False), json.dumps(value)]
    for needle in needles:
        pos = -1
        for _ in range(occurrence):
            pos = text.find(needle, pos + 1)
            if pos < 0:
                break
        if pos >= 0:
            return text.count("\n", 0, pos) + 1
    return None


Line = int | None | Callable[[], int | None]


def resolve_line(line: Line) -> int | None:
    """A line number given directly or computed on demand (lines of JSON values are costly to find)."""
    return line() if callable(line) else line


def clean_caption(caption: object, source: str | Path, line: Line, where: str = "") -> str:
    """A caption with its white space normalised; a non-string or empty one is a DataFormatError."""
    prefix = f"{where}: " if where else ""
    if not isinstance(caption, str):
        raise DataFormatError(
            source, f"{prefix}caption must be a string, got {type(caption).__name__}", resolve_line(line)
        )
    text = " ".join(caption.split())
    if not text:
        raise DataFormatError(source, f"{prefix}empty caption", resolve_line(line))
    return text


class MediaFinder:
    """Finds ``name`` in a list of candidate folders, listing each folder once (fast for 100k files)."""

    def __init__(self, folders: Iterable[Path]):
        self.folders = [Path(f) for f in folders]
        self._listing: dict[Path, frozenset[str]] = {}

    def _names(self, folder: Path) -> frozenset[str]:
        if folder not in self._listing:
            try:
                self._listing[folder] = frozenset(os.listdir(folder))
            except (OSError, ValueError):  # missing, unreadable, or a name no file can have (a NUL byte)
                self._listing[folder] = frozenset()
        return self._listing[folder]

    def is_empty(self) -> bool:
        """True when none of the folders holds a file."""
        return not any(self._names(f) for f in self.folders)

    def find(self, *names: str, subdir: str | None = None) -> Path | None:
        """First existing ``folder[/subdir]/name`` over the folders (in order) and names, or None."""
        for folder in self.folders:
            where = folder / subdir if subdir else folder
            listing = self._names(where)
            for name in names:
                if name in listing:
                    return where / name
        return None


def first_existing(*paths: Path) -> Path | None:
    """The first of ``paths`` that exists."""
    return next((p for p in paths if p.exists()), None)
