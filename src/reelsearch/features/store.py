"""FeatureStore: variable-length ``[T, D]`` feature sequences per item and modality, in a directory.

Layout (one folder per modality, every file immutable once it has its final name)::

    ROOT/reelsearch-store.json                  marker: format and version
    ROOT/<modality>/manifest.json               committed state: dim, dtype, generation, segment names
    ROOT/<modality>/segments/<seq>-<tag>.npy    rows of one commit, concatenated: [R, D]
    ROOT/<modality>/segments/<seq>-<tag>.json   that commit's keys, row counts and item meta
    ROOT/<modality>/.lock                       flock held by the one writer of the modality

A commit writes its segment (``.npy`` then ``.json``, each by atomic rename) and only then replaces the manifest
atomically; the manifest is the commit point. A ``kill -9`` at any moment therefore loses at most the uncommitted
items: files the manifest does not name are orphans that the next writer deletes. Readers memory-map the segments
and see the snapshot of the manifest they loaded; :meth:`FeatureStore.finalize` compacts all segments into one.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.config.recipe import ModalityRecipe, check_compatible, check_feature_name
from reelsearch.config.typed import from_dict, to_dict
from reelsearch.errors import ConfigError, DataFormatError, ReelsearchError
from reelsearch.io import atomic_path, atomic_write_json

MARKER = "reelsearch-store.json"
MANIFEST = "manifest.json"
SEGMENTS = "segments"
LOCK = ".lock"
FORMAT = "reelsearch-feature-store"
VERSION = 1
DTYPES = ("float16", "float32")
_OPEN_SEGMENTS = 64  # memory maps kept open per store (each holds a file descriptor)
_COPY_CHUNK_ROWS = 65536


class FeatureStoreError(ReelsearchError):
    """The store cannot do what was asked: the message names the store, modality and key."""


class FeatureNotFoundError(FeatureStoreError, KeyError):
    """A modality or key is absent from the store (also a ``KeyError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class _Segment:
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


class _ModalityIndex:
    """The committed state of one modality as of one manifest: segments and key -> (segment, item)."""

    def __init__(self, mod_dir: Path, manifest: dict, segments: list[_Segment]):
        self.dir = mod_dir
        self.dim = int(manifest["dim"])
        self.dtype = str(manifest["dtype"])
        self.generation = int(manifest.get("generation", 0))
        self.next_seq = int(manifest.get("next_seq", len(segments) + 1))
        self.finalized = bool(manifest.get("finalized", False))
        self.recipe: dict | None = manifest.get("recipe")  # reelsearch.config.ModalityRecipe as a dict, if known
        self.signature: tuple | None = None  # (inode, mtime, size) of the manifest file this index was read from
        self.segments: list[_Segment] = []
        self.loc: dict[str, tuple[int, int]] = {}
        for seg in segments:
            self.append(seg)

    @classmethod
    def empty(cls, mod_dir: Path, dim: int, dtype: str, recipe: dict | None = None) -> _ModalityIndex:
        return cls(mod_dir, {"dim": dim, "dtype": dtype, "generation": 0, "next_seq": 1, "recipe": recipe}, [])

    @classmethod
    def load(cls, mod_dir: Path) -> _ModalityIndex | None:
        """Read the manifest and its segment indexes; None when the modality has no commit yet."""
        for _attempt in range(5):
            signature = _signature(mod_dir)  # taken before reading: a change in between shows as a stale signature
            manifest = _read_manifest(mod_dir)
            if manifest is None:
                return None
            try:
                idx = cls(mod_dir, manifest, [_load_segment(mod_dir / SEGMENTS, n) for n in manifest["segments"]])
                idx.signature = signature
                return idx
            except FileNotFoundError as exc:
                if _read_manifest(mod_dir) == manifest:  # not a compaction racing with us: damage
                    raise DataFormatError(exc.filename, "segment index named by the manifest is missing") from None
        raise FeatureStoreError(f"{mod_dir}: the manifest keeps changing while being read; try again")

    def append(self, seg: _Segment) -> None:
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


def _load_segment(seg_dir: Path, name: str) -> _Segment:
    info_path = seg_dir / f"{name}.json"
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(info_path, f"unreadable segment index: {exc}") from None
    return _Segment(seg_dir, name, info)


def _signature(mod_dir: Path) -> tuple | None:
    """Identity of the current manifest file: an atomic replace changes it."""
    try:
        st = (mod_dir / MANIFEST).stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read_manifest(mod_dir: Path) -> dict | None:
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


def _fsync_dir(path: Path) -> None:
    """Make renames inside ``path`` durable (power loss); harmless where directories cannot be synced."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _json_meta(meta: dict | None, where: str) -> dict | None:
    """Meta as plain JSON (numpy scalars and arrays become numbers and lists); None when empty."""
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise FeatureStoreError(f"{where}: meta must be a dict, got {type(meta).__name__}")

    def plain(obj):
        if isinstance(obj, (np.generic, np.ndarray)):
            return obj.tolist()
        if isinstance(obj, Path):
            return str(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")

    try:
        return json.loads(json.dumps(meta, default=plain, allow_nan=False)) or None
    except (TypeError, ValueError) as exc:
        raise FeatureStoreError(f"{where}: meta is not JSON-able: {exc}") from None


def _write_rows(path: Path, dtype: str, dim: int, blocks: Iterable[np.ndarray], rows: int) -> None:
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


class _ModalityLock:
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


class FeatureStore:
    """A directory of per-modality ``[T, D]`` feature sequences keyed by item id.

    ``FeatureStore(root)`` opens the store at ``root`` or creates it (``create=False``: it must exist).
    Reads return float32 copies; storage is float16 by default. Each modality is read as the snapshot of its
    last commit when first used; :meth:`refresh` (or a lookup of a key the snapshot lacks) picks up newer commits.
    """

    def __init__(self, root: str | Path, create: bool = True):
        self.root = Path(root)
        marker = self.root / MARKER
        if self.root.exists() and not self.root.is_dir():
            raise FeatureStoreError(f"{self.root}: is a file, not a feature store directory")
        if not marker.exists():  # an existing folder may become a store (e.g. one that already holds rank-*/ shards)
            if not create:
                raise FeatureStoreError(f"{self.root}: no feature store here")
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_json(marker, {"format": FORMAT, "version": VERSION})
        self._indexes: dict[str, _ModalityIndex] = {}
        self._maps: OrderedDict[Path, np.ndarray] = OrderedDict()
        self._writing: set[str] = set()

    def __repr__(self) -> str:
        return f"FeatureStore({str(self.root)!r})"

    # ---- reading -------------------------------------------------------------------------------------------------
    def modalities(self) -> list[str]:
        """Names of the modalities with at least one commit, sorted."""
        return sorted(p.parent.name for p in self.root.glob(f"*/{MANIFEST}"))

    def info(self) -> dict:
        """``{"modalities": {name: {"items", "dim", "dtype", "rows", "segments", "bytes", "finalized"}}}``."""
        out = {}
        for name in self.modalities():
            idx = self._index(name)
            live_rows = sum(int(idx.segments[s].lengths[i]) for s, i in idx.loc.values())
            out[name] = {
                "items": len(idx.loc),
                "dim": idx.dim,
                "dtype": idx.dtype,
                "rows": live_rows,
                "segments": len(idx.segments),
                "bytes": sum(s.path.stat().st_size for s in idx.segments if s.path.exists()),
                "finalized": idx.finalized,
                "recipe": idx.recipe,
            }
        return {"modalities": out}

    def info_table(self) -> str:
        """``info()`` as a table: per modality its items, dim, storage dtype, rows, segments, MiB, whether finalized,
        and what made the features (their recipe in a few words, or "unrecorded")."""
        modalities = self.info()["modalities"]
        if not modalities:
            return f"{self.root}: no modalities"
        head = ("modality", "items", "dim", "dtype", "rows", "segments", "MiB", "finalized", "made by")
        rows = [
            (name, m["items"], m["dim"], m["dtype"], m["rows"], m["segments"], f"{m['bytes'] / 2**20:.1f}",
             "yes" if m["finalized"] else "no", self.recipe(name).describe() if m.get("recipe") else "unrecorded")
            for name, m in modalities.items()
        ]  # fmt: skip
        widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
        lines = [str(self.root)] + [
            "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]
        ]
        return "\n".join(lines)

    def recipe(self, modality: str):
        """The ``ModalityRecipe`` the ``modality`` features were made with (None when not recorded)."""
        data = self._index(modality).recipe
        return None if data is None else from_dict(ModalityRecipe, data, f"{self.root / modality / MANIFEST}: recipe")

    def check_recipe(self, modality: str, recipe) -> None:
        """ConfigError when the store already holds ``modality`` features made by another recipe than ``recipe``
        (or by an unrecorded one): features of two recipes never mix under one name."""
        if not (self.root / modality / MANIFEST).exists():
            return
        check_compatible(recipe, self.recipe(modality), modality, str(self.root))

    def keys(self, modality: str) -> list[str]:
        """Item keys of ``modality`` in commit order."""
        return list(self._index(modality).loc)

    def has(self, modality: str, key: str) -> bool:
        """Whether ``key`` has ``modality`` features (False for an unknown modality)."""
        if modality not in self._indexes and not (self.root / modality / MANIFEST).exists():
            return False
        return self._locate(modality, key) is not None

    def dim(self, modality: str) -> int:
        """Feature dimension D of ``modality``."""
        return self._index(modality).dim

    def get(self, modality: str, key: str) -> np.ndarray:
        """Features of ``key``: float32 ``[T, D]``."""
        return np.array(self.get_raw(modality, key), dtype=np.float32)

    def get_many(self, modality: str, keys: Iterable[str]) -> list[np.ndarray]:
        """Features of each key, in order (float32 ``[T_i, D]``)."""
        return [self.get(modality, k) for k in keys]

    def get_raw(self, modality: str, key: str) -> np.ndarray:
        """Read-only view of the stored rows of ``key`` in the stored dtype (no copy)."""
        for attempt in range(2):
            idx, loc = self._require(modality, key)
            seg = idx.segments[loc[0]]
            try:
                rows = self._open(seg, idx)
            except FileNotFoundError:  # compacted away by a writer since our snapshot: reload once
                if attempt:
                    raise DataFormatError(seg.path, "segment named by the manifest is missing") from None
                self.refresh(modality)
                continue
            start = int(seg.offsets[loc[1]])
            return rows[start : start + int(seg.lengths[loc[1]])]
        raise AssertionError("unreachable")

    def length(self, modality: str, key: str) -> int:
        """Number of rows T of ``key`` without reading them."""
        idx, (s, i) = self._require(modality, key)
        return int(idx.segments[s].lengths[i])

    def get_meta(self, modality: str, key: str) -> dict:
        """The meta dict stored with ``key`` (empty when none)."""
        idx, (s, i) = self._require(modality, key)
        return copy.deepcopy(idx.segments[s].meta[i] or {})

    def load_all(
        self,
        modality: str,
        keys: Sequence[str] | None = None,
        dtype: str = "float32",
        max_len: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """All features of ``keys`` (default: every key) as one zero-padded ``[N, Tmax, D]`` array plus lengths [N].

        ``max_len`` caps Tmax: longer sequences are sampled at ``max_len`` uniformly spaced rows. Before allocating,
        the size is checked against available memory; the error suggests ``dtype="float16"`` or ``max_len``.
        """
        if dtype not in DTYPES:
            raise FeatureStoreError(f"{self.root}: load_all dtype must be one of {DTYPES}, got {dtype!r}")
        idx = self._index(modality)
        keys = list(idx.loc) if keys is None else list(keys)
        lengths = np.array([self.length(modality, k) for k in keys], dtype=np.int64)
        t_max = int(lengths.max()) if len(keys) else 0
        if max_len is not None:
            if max_len < 1:
                raise FeatureStoreError(f"{self.root}: max_len must be >= 1, got {max_len}")
            t_max = min(t_max, max_len)
        need = len(keys) * t_max * idx.dim * np.dtype(dtype).itemsize
        avail = _available_memory()
        if avail is not None and need > 0.8 * avail:
            raise FeatureStoreError(
                f"{self.root}: loading {len(keys)} {modality!r} items as [{len(keys)}, {t_max}, {idx.dim}] {dtype} "
                f"needs {need / 2**30:.2f} GiB but only {avail / 2**30:.2f} GiB is available; "
                "use dtype='float16', a smaller max_len, fewer keys, or get() per batch"
            )
        out = np.zeros((len(keys), t_max, idx.dim), dtype=dtype)
        for n, key in enumerate(keys):
            rows = self.get_raw(modality, key)
            if len(rows) > t_max:
                rows = rows[np.linspace(0, len(rows) - 1, t_max).round().astype(np.int64)]
            out[n, : len(rows)] = rows
        return out, np.minimum(lengths, t_max)

    def refresh(self, modality: str | None = None) -> None:
        """Forget the snapshot of ``modality`` (default: all) so the next read loads the latest commit."""
        for name in [modality] if modality else list(self._indexes):
            if name in self._writing:
                continue  # our own writer keeps this index current
            self._indexes.pop(name, None)
            for path in [p for p in self._maps if p.parent.parent.name == name]:
                del self._maps[path]

    # ---- writing -------------------------------------------------------------------------------------------------
    def writer(
        self,
        modality: str,
        dim: int,
        dtype: str | None = None,
        commit_every: int = 256,
        max_buffer_bytes: int = 256 * 2**20,
        recipe=None,
    ) -> FeatureWriter:
        """A writer that appends ``modality`` items; use as a context manager (commits on exit).

        ``dtype`` is the storage dtype, "float16" (default for a new modality) or "float32"; for an existing modality
        it must match. ``recipe`` (a ``ModalityRecipe``) records how the features are made; an existing modality made
        by another recipe is refused. A commit happens every ``commit_every`` items and whenever the buffer exceeds
        ``max_buffer_bytes``. One writer per modality at a time (across processes).
        """
        return FeatureWriter(self, modality, dim, dtype, commit_every, max_buffer_bytes, recipe)

    def finalize(self, modality: str | None = None, progress: bool = False) -> None:
        """Compact each modality (default: all) into one segment, dropping replaced rows; atomic."""
        for name in [modality] if modality else self.modalities():
            mod_dir = self._mod_dir(name)
            if name in self._writing:
                raise FeatureStoreError(f"{mod_dir}: close the open writer before finalize")
            lock = _ModalityLock(mod_dir, "finalize")
            try:
                idx = _ModalityIndex.load(mod_dir)
                if idx is None:
                    raise FeatureNotFoundError(f"{self.root}: no modality {name!r}")
                live = {(s, i) for s, i in idx.loc.values()}
                clean = len(idx.segments) == 1 and len(live) == len(idx.segments[0].keys)
                if clean or not idx.segments:
                    if not idx.finalized:
                        idx.finalized = True
                        idx.generation += 1
                        self._commit_manifest(idx)
                else:
                    self._compact(
                        idx, live, tqdm(total=len(idx.segments), desc=f"finalize {name}", disable=not progress)
                    )
                _remove_orphans(idx)
            finally:
                lock.release()
            self.refresh(name)

    def _compact(self, idx: _ModalityIndex, live: set[tuple[int, int]], bar) -> None:
        keys, lengths, meta = [], [], []
        for s, seg in enumerate(idx.segments):
            for i, key in enumerate(seg.keys):
                if (s, i) in live:
                    keys.append(key)
                    lengths.append(int(seg.lengths[i]))
                    meta.append(seg.meta[i])

        def blocks() -> Iterator[np.ndarray]:
            for s, seg in enumerate(idx.segments):
                rows = np.load(seg.path, mmap_mode="r")
                if all((s, i) in live for i in range(len(seg.keys))):
                    for start in range(0, len(rows), _COPY_CHUNK_ROWS):
                        yield rows[start : start + _COPY_CHUNK_ROWS]
                else:
                    for i in range(len(seg.keys)):
                        if (s, i) in live:
                            yield rows[seg.offsets[i] : seg.offsets[i] + seg.lengths[i]]
                del rows
                bar.update(1)
            bar.close()

        name = f"{idx.next_seq:06d}-{uuid.uuid4().hex[:8]}"
        seg_dir = idx.dir / SEGMENTS
        _write_rows(seg_dir / f"{name}.npy", idx.dtype, idx.dim, blocks(), int(sum(lengths)))
        info = {"rows": int(sum(lengths)), "dim": idx.dim, "dtype": idx.dtype, "keys": keys, "lengths": lengths}
        if any(m for m in meta):
            info["meta"] = meta
        atomic_write_json(seg_dir / f"{name}.json", info, indent=None)
        idx.segments, idx.loc = [], {}
        idx.append(_Segment(seg_dir, name, info))
        idx.next_seq += 1
        idx.generation += 1
        idx.finalized = True
        self._commit_manifest(idx)

    def _commit_manifest(self, idx: _ModalityIndex) -> None:
        self._write_manifest(idx.dir, idx.manifest())

    @staticmethod
    def _write_manifest(mod_dir: Path, manifest: dict) -> None:
        _fsync_dir(mod_dir / SEGMENTS)
        atomic_write_json(mod_dir / MANIFEST, manifest)
        _fsync_dir(mod_dir)

    @staticmethod
    def merge(sources: Sequence[str | Path], dest: str | Path, progress: bool = False) -> dict[str, int]:
        """Merge the stores ``sources`` (e.g. one per extraction rank) into ``dest``; returns items added per modality.

        Keys already in ``dest`` are skipped (a merge resumes). A key in two sources is an error, as is a modality
        whose dim or dtype differs between stores. ``dest`` is finalized (compacted) at the end.
        """
        dest_path = Path(dest).resolve()
        stores = []
        for src in sources:
            if Path(src).resolve() == dest_path:
                raise FeatureStoreError(f"{dest}: a merge source cannot also be the destination")
            stores.append(FeatureStore(src, create=False))
        out = FeatureStore(dest)
        added: dict[str, int] = {}
        for modality in sorted({m for s in stores for m in s.modalities()}):
            having = [s for s in stores if modality in s.modalities()]
            first = having[0]._index(modality)
            owner: dict[str, Path] = {}
            for s in having:
                idx = s._index(modality)
                if (idx.dim, idx.dtype, idx.recipe) != (first.dim, first.dtype, first.recipe):
                    raise FeatureStoreError(
                        f"{s.root}: {modality!r} is [T, {idx.dim}] {idx.dtype} ({idx.recipe}) but {having[0].root} has "
                        f"[T, {first.dim}] {first.dtype} ({first.recipe}); cannot merge"
                    )
                for key in idx.loc:
                    if key in owner:
                        raise FeatureStoreError(f"{modality!r} key {key!r} is in both {owner[key]} and {s.root}")
                    owner[key] = s.root
            added[modality] = 0
            total = len(owner)
            recipe = having[0].recipe(modality)
            with out.writer(modality, first.dim, first.dtype, commit_every=4096, recipe=recipe) as w:
                bar = tqdm(total=total, desc=f"merge {modality}", unit="item", disable=not progress)
                for s in having:
                    for key in s.keys(modality):
                        if not w.done(key):
                            w.add(key, s.get_raw(modality, key), s.get_meta(modality, key) or None)
                            added[modality] += 1
                        bar.update(1)
                bar.close()
            out.finalize(modality)
        return added

    # ---- internals -----------------------------------------------------------------------------------------------
    def _mod_dir(self, modality: str) -> Path:
        try:
            return self.root / check_feature_name(modality, str(self.root), reserved=(SEGMENTS,))
        except ConfigError as exc:
            raise FeatureStoreError(str(exc)) from None

    def _index(self, modality: str) -> _ModalityIndex:
        idx = self._indexes.get(modality)
        if idx is None:
            idx = _ModalityIndex.load(self._mod_dir(modality))
            if idx is None:
                known = ", ".join(self.modalities()) or "none"
                raise FeatureNotFoundError(f"{self.root}: no modality {modality!r} (modalities: {known})")
            self._indexes[modality] = idx
        return idx

    def _locate(self, modality: str, key: str) -> tuple[int, int] | None:
        idx = self._index(modality)
        loc = idx.loc.get(key)
        if loc is None and modality not in self._writing and _signature(idx.dir) != idx.signature:
            manifest = _read_manifest(idx.dir)
            if manifest is not None and manifest.get("generation") != idx.generation:
                self.refresh(modality)
                loc = self._index(modality).loc.get(key)
        return loc

    def _require(self, modality: str, key: str) -> tuple[_ModalityIndex, tuple[int, int]]:
        loc = self._locate(modality, key)
        if loc is None:
            raise FeatureNotFoundError(f"{self.root}: no {modality!r} features for key {key!r}")
        return self._indexes[modality], loc

    def _open(self, seg: _Segment, idx: _ModalityIndex) -> np.ndarray:
        rows = self._maps.get(seg.path)
        if rows is not None:
            self._maps.move_to_end(seg.path)
            return rows
        try:
            rows = np.load(seg.path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise
        except (ValueError, OSError) as exc:
            raise DataFormatError(seg.path, f"unreadable segment: {exc}") from None
        if rows.shape != (seg.rows, idx.dim) or rows.dtype != np.dtype(idx.dtype):
            raise DataFormatError(
                seg.path, f"segment holds {rows.shape} {rows.dtype}, index says ({seg.rows}, {idx.dim}) {idx.dtype}"
            )
        self._maps[seg.path] = rows
        if len(self._maps) > _OPEN_SEGMENTS:
            self._maps.popitem(last=False)
        return rows


def _remove_orphans(idx: _ModalityIndex) -> None:
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


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux MemAvailable), or None when unknown."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


class FeatureWriter:
    """Appends items to one modality of a FeatureStore; commits every ``commit_every`` items and on close.

    Created by :meth:`FeatureStore.writer`. Holds the modality's lock until :meth:`close` (or the ``with`` exit).
    """

    def __init__(
        self, store: FeatureStore, modality: str, dim: int, dtype: str | None, commit_every: int, max_buffer_bytes: int,
        recipe=None,
    ):
        self.store = store
        self.modality = modality
        mod_dir = store._mod_dir(modality)
        where = f"{store.root}: {modality!r}"
        if dtype is not None and dtype not in DTYPES:
            raise FeatureStoreError(f"{where}: dtype must be one of {DTYPES}, got {dtype!r}")
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or dim < 1:
            raise FeatureStoreError(f"{where}: dim must be a positive integer, got {dim!r}")
        if modality in store._writing:
            raise FeatureStoreError(f"{where}: a writer of this modality is already open in this store")
        self._lock = _ModalityLock(mod_dir, f"write {modality!r}")
        try:
            idx = _ModalityIndex.load(mod_dir)
            recorded = None
            if recipe is not None:
                recorded = to_dict(recipe.with_dtype(dtype or (idx.dtype if idx else "float16")))
            if idx is None:
                idx = _ModalityIndex.empty(mod_dir, int(dim), dtype or "float16", recorded)
            elif idx.dim != dim or (dtype is not None and idx.dtype != dtype):
                raise FeatureStoreError(
                    f"{where}: stored as [T, {idx.dim}] {idx.dtype}, cannot write [T, {dim}] {dtype or idx.dtype}"
                )
            elif recipe is not None:
                store.check_recipe(modality, recipe)
            _remove_orphans(idx)
        except BaseException:
            self._lock.release()
            raise
        self._idx = idx
        self.dim = idx.dim
        self.dtype = idx.dtype
        self.commit_every = max(1, int(commit_every))
        self.max_buffer_bytes = int(max_buffer_bytes)
        self.added = 0
        self._keys: list[str] = []
        self._arrays: list[np.ndarray] = []
        self._meta: list[dict | None] = []
        self._pending: set[str] = set()
        self._bytes = 0
        self._closed = False
        store._indexes[modality] = idx
        store._writing.add(modality)

    def __enter__(self) -> FeatureWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # keep the valid items added before the error, but let the original error through
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the first error matters more
                self._release()

    def done(self, key: str) -> bool:
        """Whether ``key`` is committed already or was added by this writer (skip it when resuming)."""
        return key in self._idx.loc or key in self._pending

    def add(self, key: str, array, meta: dict | None = None) -> None:
        """Append the ``[T, D]`` features of ``key`` (T >= 1, D = dim) with optional JSON-able ``meta``.

        Adding a key again replaces it. Values must be finite and, for float16 storage, within +-65504.
        """
        if self._closed:
            raise FeatureStoreError(f"{self.store.root}: {self.modality!r} writer is closed")
        where = f"{self.store.root}: {self.modality!r} item {key!r}"
        if not isinstance(key, str) or not key:
            raise FeatureStoreError(f"{self.store.root}: {self.modality!r} keys must be non-empty strings, got {key!r}")
        arr = np.asarray(array)
        if arr.dtype.kind not in "fiu":
            raise FeatureStoreError(f"{where}: features must be numbers, got dtype {arr.dtype}")
        if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != self.dim:
            raise FeatureStoreError(f"{where}: expected [T, {self.dim}] features with T >= 1, got shape {arr.shape}")
        if not np.isfinite(arr).all():
            raise FeatureStoreError(f"{where}: features contain NaN or infinity")
        with np.errstate(over="ignore"):
            stored = arr.astype(self.dtype)
        if not np.isfinite(stored).all():
            raise FeatureStoreError(f"{where}: values exceed the {self.dtype} range (+-65504); use dtype 'float32'")
        meta = _json_meta(meta, where)
        self._keys.append(key)
        self._arrays.append(stored)
        self._meta.append(meta)
        self._pending.add(key)
        self._bytes += stored.nbytes
        self.added += 1
        if len(self._keys) >= self.commit_every or self._bytes >= self.max_buffer_bytes:
            self.commit()

    def commit(self) -> None:
        """Make every item added so far durable and visible (one new segment, then the manifest)."""
        if not self._keys:
            return
        idx = self._idx
        seg_dir = idx.dir / SEGMENTS
        seg_dir.mkdir(parents=True, exist_ok=True)
        name = f"{idx.next_seq:06d}-{uuid.uuid4().hex[:8]}"
        lengths = [len(a) for a in self._arrays]
        _write_rows(seg_dir / f"{name}.npy", idx.dtype, idx.dim, self._arrays, sum(lengths))
        info = {"rows": sum(lengths), "dim": idx.dim, "dtype": idx.dtype, "keys": self._keys, "lengths": lengths}
        if any(m for m in self._meta):
            info["meta"] = self._meta
        atomic_write_json(seg_dir / f"{name}.json", info, indent=None)
        manifest = idx.manifest()
        manifest.update(generation=idx.generation + 1, next_seq=idx.next_seq + 1, finalized=False)
        manifest["segments"].append(name)
        self.store._write_manifest(idx.dir, manifest)  # the commit point
        idx.generation, idx.next_seq, idx.finalized = manifest["generation"], manifest["next_seq"], False
        idx.append(_Segment(seg_dir, name, info))
        self._keys, self._arrays, self._meta, self._pending, self._bytes = [], [], [], set(), 0

    def close(self) -> None:
        """Commit what is pending and release the modality."""
        if self._closed:
            return
        try:
            self.commit()
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        self.store._writing.discard(self.modality)
        self._lock.release()
