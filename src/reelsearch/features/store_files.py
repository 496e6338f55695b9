"""The FeatureStore's files: the constants of its layout, a segment and a modality's committed state as read from
them, the manifest (the commit point), the rows file, the writer's lock and the cleanup of orphans; shared by the
reader (``reelsearch.features.store``) and the writer (``reelsearch.features.store_writer``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path, atomic_write_json

MARKER = "reelsearch-store.json"
MANIFEST = "manifest.json"
SEGMENTS = "segments"
LOCK = ".lock"
FORMAT = "reelsearch-feature-store"
VERSION = 1
DTYPES = ("float16", "float32")
COPY_CHUNK_ROWS = 65536


class FeatureStoreError(ReelsearchError):
    """The store cannot do what was asked: the message names the store, modality and key."""


class FeatureNotFoundError(FeatureStoreError, KeyError):
    """A modality or key is absent from the store (also a ``KeyError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Segment:
    """One committed segment: its rows file and, per item, key, row offset, row count and meta."""

    __slots__ = ("name", "path", "rows", "keys", "offsets", "lengths", "meta")

    def __init__(self, seg_dir: Path, name: str, info: dict):
        self.name = name
        self.path = seg_dir / f"{name}.npy"
        self.keys: list[str] = info["keys"]
        self.lengths = np.asarray(info["lengths"], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.rows = int(info["rows"])
        self.meta: list[dict | None] = info.get("meta") or [None] * len(self.keys)
        if len(self.lengths) != len(self.keys) or len(self.meta) != len(self.keys) or self.lengths.sum() != self.rows:
            raise DataFormatError(seg_dir / f"{name}.json", "keys, lengths, meta and rows disagree")


class ModalityIndex:
    """The committed state of one modality as of one manifest: segments and key -> (segment, item)."""

    def __init__(self, mod_dir: Path, manifest: dict, segments: list[Segment]):
        self.dir = mod_dir
        self.dim = int(manifest["dim"])
        self.dtype = str(manifest["dtype"])
        self.generation = int(manifest.get("generation", 0))
        self.next_seq = int(manifest.get("next_seq", len(segments) + 1))
        self.finalized = bool(manifest.get("finalized", False))
        self.recipe: dict | None = manifest.get("recipe")  # reelsearch.config.ModalityRecipe as a dict, if known
        self.signature: tuple | None = None  # (inode, mtime, size) of the manifest file this index was read from
        self.segments: list[Segment] = []
        self.loc: dict[str, tuple[int, int]] = {}
        for seg in segments:
            self.append(seg)

    @classmethod
    def empty(cls, mod_dir: Path, dim: int, dtype: str, recipe: dict | None = None) -> ModalityIndex:
        return cls(mod_dir, {"dim": dim, "dtype": dtype, "generation": 0, "next_seq": 1, "recipe": recipe}, [])

    @classmethod
    def load(cls, mod_dir: Path) -> ModalityIndex | None:
        """Read the manifest and its segment indexes; None when the modality has no commit yet."""
        for _attempt in range(5):
            signature = signature_of(mod_dir)  # taken before reading: a change in between shows as a stale signature
            manifest = read_manifest(mod_dir)
            if manifest is None:
                return None
            try:
                idx = cls(mod_dir, manifest, [load_segment(mod_dir / SEGMENTS, n) for n in manifest["segments"]])
                idx.signature = signature
                return idx
            except FileNotFoundError as exc:
                if read_manifest(mod_dir) == manifest:  # not a compaction racing with us: damage
                    raise DataFormatError(exc.filename, "segment index named by the manifest is missing") from None
        raise FeatureStoreError(f"{mod_dir}: the manifest keeps changing while being read; try again")

    def append(self, seg: Segment) -> None:
        n = len(self.segments)
        self.segments.append(seg)
        for i, key in enumerate(seg.keys):
            self.loc[key] = (n, i)  # a later commit of the same key replaces the earlier one

    def manifest(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "dim": self.dim,
            "dtype": self.dtype,
            "generation": self.generation,
            "next_seq": self.next_seq,
            "finalized": self.finalized,
            "recipe": self.recipe,
            "segments": [s.name for s in self.segments],
        }


def load_segment(seg_dir: Path, name: str) -> Segment:
    info_path = seg_dir / f"{name}.json"
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(info_path, f"unreadable segment index: {exc}") from None
    return Segment(seg_dir, name, info)


def signature_of(mod_dir: Path) -> tuple | None:
    """Identity of the current manifest file: an atomic replace changes it."""
    try:
        st = (mod_dir / MANIFEST).stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_manifest(mod_dir: Path) -> dict | None:
    path = mod_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "segments" not in manifest:
        raise DataFormatError(path, f"not a {FORMAT} manifest")
    if manifest.get("version", 0) > VERSION:
        raise DataFormatError(path, f"written by a newer reelsearch (store version {manifest['version']})")
    return manifest


def fsync_dir(path: Path) -> None:
    """Make renames inside ``path`` durable (power loss); harmless where directories cannot be synced."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_rows(path: Path, dtype: str, dim: int, blocks: Iterable[np.ndarray], rows: int) -> None:
    """Write ``blocks`` (each [r, dim] of ``dtype``, ``rows`` in all) as one .npy file, atomically."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (rows, dim)}
    written = 0
    with atomic_path(path, suffix=".npy") as tmp, open(tmp, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        for block in blocks:
            fh.write(np.ascontiguousarray(block, dtype=dtype).tobytes())
            written += len(block)
    if written != rows:  # pragma: no cover - internal consistency
        raise FeatureStoreError(f"{path}: wrote {written} rows, expected {rows}")


class ModalityLock:
    """Exclusive advisory lock of one modality (released by the kernel if the process dies)."""

    def __init__(self, mod_dir: Path, what: str):
        mod_dir.mkdir(parents=True, exist_ok=True)
        self.path = mod_dir / LOCK
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise FeatureStoreError(
                f"{mod_dir}: cannot {what}: another writer (pid {holder}) has this modality open; "
                "close it first (distributed ranks should write separate stores and merge them)"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def write_manifest(mod_dir: Path, manifest: dict) -> None:
    """Replace the manifest of ``mod_dir`` (the commit point), its segments' renames made durable first."""
    fsync_dir(mod_dir / SEGMENTS)
    atomic_write_json(mod_dir / MANIFEST, manifest)
    fsync_dir(mod_dir)


def remove_orphans(idx: ModalityIndex) -> None:
    """Delete segment files the manifest does not name (left by a crash or replaced by compaction)."""
    for tmp in idx.dir.glob(f".{MANIFEST}.*"):  # a manifest rename cut short
        with contextlib.suppress(OSError):
            tmp.unlink()
    seg_dir = idx.dir / SEGMENTS
    if not seg_dir.is_dir():
        return
    named = {s.name for s in idx.segments}
    for path in seg_dir.iterdir():
        stem = path.name.split(".")[0] if not path.name.startswith(".") else None
        if stem not in named:
            with contextlib.suppress(OSError):
                path.unlink()
