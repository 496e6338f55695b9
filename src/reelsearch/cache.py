"""reelsearch's one cache policy: where computed data that can always be recomputed is kept, and how it is listed
and cleared (`reelsearch cache`).

``$REELSEARCH_CACHE_DIR`` when set, else the platform's user cache folder (``~/.cache/reelsearch`` on Linux). Inside
it, one folder per kind of thing (:data:`KINDS`): ``features/`` (dataset features, one store per dataset and feature
recipe), ``text/`` (token features of captions, one store per text encoder), ``onnx/`` (ONNX exports and their
optimised graphs), ``glove/`` (the parsed GloVe table) and a few more. Deleting any of it is safe; :func:`clear_cache`
does it without pulling a file from under a process that is writing it: a FeatureStore whose writer holds its
``.lock`` is skipped, and so is an item holding an unfinished write (a ``.NAME.*`` temporary that ``io.atomic_path``
renames into place once written) younger than :data:`PARTIAL_GRACE_S`; an older one is a crashed write's leftover and
goes with its kind. Nothing outside the cache folder is removed (a kind folder or entry reached through a symbolic
link is refused; a link inside an item is removed, not followed).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from platformdirs import user_cache_dir

from reelsearch.errors import ReelsearchError

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    """The cache folder ($REELSEARCH_CACHE_DIR, else the user's cache directory for reelsearch)."""
    env = os.environ.get("REELSEARCH_CACHE_DIR")
    if env:
        return Path(env).expanduser()

    return Path(user_cache_dir("reelsearch"))


@dataclass(frozen=True)
class Kind:
    """A folder of the cache: its items lie ``depth`` levels below it; ``clearable``: whether `clear` removes them."""

    name: str
    depth: int
    what: str
    clearable: bool = True


#: The cache's kinds of things, in the order `reelsearch cache` lists them.
KINDS = {kind.name: kind for kind in (
    Kind("features", 2, "dataset features, per recipe"),
    Kind("text", 1, "caption token features"),
    Kind("onnx", 1, "ONNX exports, optimised graphs"),
    Kind("trunk", 2, "tune-cnn's frozen-trunk outputs"),
    Kind("glove", 1, "the parsed GloVe table"),
    Kind("towers", 1, "text towers unpacked from packages"),
    Kind("e5", 1, "the compiled e5 engine"),
    Kind("demo-clips", 1, "the demo's generated clips"),
    Kind("serve", 1, "running servers' adverts (kept)", clearable=False),
)}
#: Seconds an unfinished write (``.NAME.*``) is taken to be in progress; an older one is a crashed write's leftover.
PARTIAL_GRACE_S = 3600
#: What the cache holds outside :data:`KINDS` (listed, never cleared).
OTHER = "other"
_LOCK = ".lock"  # a FeatureStore modality's writer lock (reelsearch.features.store_files.LOCK)


@dataclass
class CacheItem:
    """One removable thing: a store, an export (with its optimised graphs), a file. ``last_used``: the latest access
    or modification time of its files (epoch seconds; access times as the file system keeps them: with ``relatime``
    at least daily); ``partial``: an unfinished write (``.NAME.*``); ``busy``: why it is in use, else None."""

    kind: str
    paths: list[Path]
    bytes: int = 0
    files: int = 0
    last_used: float = 0.0
    partial: bool = False
    busy: str | None = None

    @property
    def path(self) -> Path:
        return self.paths[0]

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "files": self.files,
                "last_used": _iso(self.last_used), "partial": self.partial, "busy": self.busy}


@dataclass
class ClearReport:
    """What :func:`clear_cache` removed (or, on a dry run, would remove), skipped as in use, and failed to remove."""

    removed: list[CacheItem] = field(default_factory=list)
    skipped: list[CacheItem] = field(default_factory=list)
    failed: list[tuple[CacheItem, str]] = field(default_factory=list)
    dry_run: bool = False

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.removed)

    def to_json(self) -> dict:
        return {"dry_run": self.dry_run, "removed": [i.to_json() for i in self.removed], "bytes": self.bytes,
                "skipped": [i.to_json() for i in self.skipped],
                "failed": [{**i.to_json(), "error": why} for i, why in self.failed]}


def cache_items(kinds: list[str] | None = None, root: str | Path | None = None) -> list[CacheItem]:
    """The items of ``kinds`` (default: every kind, and what lies outside them as :data:`OTHER`) in the cache folder
    ``root`` (default: :func:`cache_root`), each measured and checked for use."""
    root = Path(root) if root is not None else cache_root()
    names = check_kinds(kinds) if kinds else [*KINDS, OTHER]
    items = []
    for name in names:
        if name == OTHER:
            entries = sorted(p for p in _entries(root) if p.name not in KINDS)
        else:
            entries = _level(root / name, KINDS[name].depth)
        items += [_measure(name, paths) for paths in _grouped(entries)]
    return items


def cache_info(root: str | Path | None = None) -> dict:
    """Per kind (and :data:`OTHER`): what it holds, its items, bytes, last use (ISO time, None when empty) and
    whether `clear` removes it; ``root``: the cache folder."""
    root = Path(root) if root is not None else cache_root()
    items = cache_items(root=root)
    out = {"root": str(root), "kinds": {}}
    for name in [*KINDS, OTHER]:
        mine = [i for i in items if i.kind == name]
        kind = KINDS.get(name, Kind(OTHER, 0, "not reelsearch's (kept)", clearable=False))
        out["kinds"][name] = {"what": kind.what, "items": len(mine), "bytes": sum(i.bytes for i in mine),
                              "last_used": _iso(max((i.last_used for i in mine), default=0.0)),
                              "clearable": kind.clearable}
    return out


def info_table(info: dict) -> str:
    """:func:`cache_info` as a table: kind, items, MiB, last use, what it holds; and the total."""
    head = ("kind", "items", "MiB", "last used", "what")
    rows = [(name, k["items"], f"{k['bytes'] / 2**20:.1f}", (k["last_used"] or "-")[:16].replace("T", " "), k["what"])
            for name, k in info["kinds"].items() if k["items"] or name != OTHER]
    total = sum(k["bytes"] for k in info["kinds"].values())
    rows.append(("total", sum(k["items"] for k in info["kinds"].values()), f"{total / 2**20:.1f}", "", ""))
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"{info['root']}  ($REELSEARCH_CACHE_DIR; all of it can be recomputed)"]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    return "\n".join(lines)


def clearable_items(kinds: list[str] | None = None, older_than_days: float | None = None,
                    root: str | Path | None = None) -> tuple[list[CacheItem], list[CacheItem]]:
    """(the items `clear` would remove, those it skips as in use) of ``kinds`` (default: every clearable kind) whose
    last use is more than ``older_than_days`` ago (default: any)."""
    names = check_kinds(kinds) if kinds else [name for name, kind in KINDS.items() if kind.clearable]
    for name in names:
        if not KINDS[name].clearable:
            raise ReelsearchError(f"cache kind {name!r} is not cleared: {KINDS[name].what}")
    root = Path(root) if root is not None else cache_root()
    _check_root(root)
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400
    items = [i for i in cache_items(names, root) if cutoff is None or i.last_used < cutoff]
    return [i for i in items if i.busy is None], [i for i in items if i.busy is not None]


def remove_items(items: list[CacheItem], root: str | Path | None = None) -> ClearReport:
    """Remove ``items`` (of :func:`clearable_items`) from the cache folder ``root``: each checked again for use (a
    FeatureStore's writer locks held while it goes) and refused when it is not inside ``root``."""
    root = Path(root) if root is not None else cache_root()
    real_root = os.path.realpath(root)
    report = ClearReport()
    for item in items:
        outside = [p for p in item.paths if not _inside(p, real_root)]
        if outside:
            report.failed.append((item, f"{outside[0]} is not inside the cache folder {root}: refused"))
            continue
        with _claimed(item) as busy:
            if busy is not None:
                item.busy = busy
                report.skipped.append(item)
                continue
            try:
                for path in item.paths:
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path)
                    else:
                        path.unlink(missing_ok=True)
            except OSError as exc:
                report.failed.append((item, f"{exc.filename or item.path}: {exc.strerror or exc}"))
                continue
        report.removed.append(item)
        logger.debug("removed %s (%d bytes)", item.path, item.bytes)
        kind_dir = root / item.kind
        parent = item.path.parent
        while parent != kind_dir and kind_dir in parent.parents:  # a dataset's folder left empty
            with contextlib.suppress(OSError):
                parent.rmdir()
            parent = parent.parent
    return report


def clear_cache(kinds: list[str] | None = None, older_than_days: float | None = None, dry_run: bool = False,
                root: str | Path | None = None) -> ClearReport:
    """Remove the items of ``kinds`` (default: every clearable kind) last used more than ``older_than_days`` ago
    (default: all) from the cache folder (``root``, default :func:`cache_root`); ``dry_run``: only say what would go.
    Items in use are skipped (module docstring)."""
    free, busy = clearable_items(kinds, older_than_days, root)
    if dry_run:
        return ClearReport(removed=free, skipped=busy, dry_run=True)
    report = remove_items(free, root)
    report.skipped = busy + report.skipped
    return report


def check_kinds(kinds: list[str]) -> list[str]:
    """``kinds`` checked against :data:`KINDS` (and :data:`OTHER`), duplicates dropped; ReelsearchError naming an
    unknown one."""
    for name in kinds:
        if name not in KINDS and name != OTHER:
            raise ReelsearchError(f"unknown cache kind {name!r}: one of {', '.join(KINDS)}")
    return list(dict.fromkeys(kinds))


def _check_root(root: Path) -> None:
    real = os.path.realpath(root)
    if real in (os.path.realpath(os.sep), os.path.realpath(Path.home())):
        raise ReelsearchError(f"the cache folder is {root} ($REELSEARCH_CACHE_DIR): refusing to clear it; point "
                              "$REELSEARCH_CACHE_DIR at a folder of its own")


def _inside(path: Path, real_root: str) -> bool:
    """Whether the entry ``path`` itself lies in ``real_root`` (its folder resolved, not the entry: a link is in the
    cache if the link is)."""
    real = os.path.join(os.path.realpath(path.parent), path.name)
    return os.path.commonpath([real, real_root]) == real_root and real != real_root


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []
    except OSError:
        return []


def _level(folder: Path, depth: int) -> list[Path]:
    """The entries ``depth`` levels below ``folder`` (a file above that depth is an entry of its own)."""
    entries = sorted(_entries(folder))
    if depth <= 1:
        return entries
    out = []
    for entry in entries:
        is_dir = entry.is_dir() and not entry.is_symlink()
        out += _level(entry, depth - 1) if is_dir and not entry.name.startswith(".") else [entry]
    return out


def _grouped(entries: list[Path]) -> list[list[Path]]:
    """``entries`` as items: an ONNX export with the optimised graphs saved beside it (``NAME.opt-KEY``)."""
    names = {p.name for p in entries}
    groups: dict[Path, list[Path]] = {}
    for entry in entries:
        base, opt, _ = entry.name.partition(".opt-")
        main = entry.with_name(base) if opt and base in names else entry
        groups.setdefault(main, [main]).extend([entry] if main != entry else [])
    return list(groups.values())


def _files(path: Path):
    """(path, lstat) of ``path`` and, for a folder, everything in it (links not followed)."""
    with contextlib.suppress(OSError):
        yield path, path.lstat()
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path, onerror=lambda exc: None):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    yield Path(folder) / name, os.lstat(os.path.join(folder, name))


def _measure(kind: str, paths: list[Path]) -> CacheItem:
    """An item's size (its files' bytes, links as links), file count, last use and whether it is in use."""
    item = CacheItem(kind, paths, partial=paths[0].name.startswith("."))
    now = time.time()
    for path in paths:
        for entry, st in _files(path):
            if not os.path.isdir(entry) or os.path.islink(entry):
                item.files += 1
                item.bytes += st.st_size
                item.last_used = max(item.last_used, st.st_atime, st.st_mtime)
            if item.busy is None and entry.name.startswith(".") and entry.name != _LOCK \
                    and now - st.st_mtime < PARTIAL_GRACE_S:
                item.busy = f"being written ({entry}, modified {now - st.st_mtime:.0f} s ago)"
    if item.files == 0:
        with contextlib.suppress(OSError):
            item.last_used = paths[0].lstat().st_mtime
    if item.busy is None:
        with _claimed(item) as busy:
            item.busy = busy
    return item


@contextlib.contextmanager
def _claimed(item: CacheItem):
    """Hold the writer locks of the FeatureStores in ``item`` while in the block; yields None, or why it is in use
    (a writer holds one of them)."""
    fds = []
    try:
        for path in item.paths:
            for entry, _ in _files(path):
                if entry.name != _LOCK or entry.is_symlink():
                    continue
                try:
                    fd = os.open(entry, os.O_RDWR)
                except OSError as exc:
                    yield f"cannot check {entry} for a writer: {exc.strerror or exc}"
                    return
                fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                    yield f"a writer (pid {holder}) holds {entry}"
                    return
        yield None
    finally:
        for fd in fds:
            os.close(fd)


def _iso(seconds: float) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds)) if seconds else None
