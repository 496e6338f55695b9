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
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from reelsearch.config.recipe import ModalityRecipe, check_compatible, check_feature_name
from reelsearch.config.typed import from_dict
from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.features.store_files import (
    DTYPES,
    FORMAT,
    MANIFEST,
    MARKER,
    SEGMENTS,
    VERSION,
    FeatureNotFoundError,
    FeatureStoreError,
    ModalityIndex,
    Segment,
    read_manifest,
    signature_of,
)
from reelsearch.features.store_writer import StoreWriting
from reelsearch.io import atomic_write_json

_OPEN_SEGMENTS = 64  # memory maps kept open per store (each holds a file descriptor)


class FeatureStore(StoreWriting):
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
        self._indexes: dict[str, ModalityIndex] = {}
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

    # ---- internals -----------------------------------------------------------------------------------------------
    def _mod_dir(self, modality: str) -> Path:
        try:
            return self.root / check_feature_name(modality, str(self.root), reserved=(SEGMENTS,))
        except ConfigError as exc:
            raise FeatureStoreError(str(exc)) from None

    def _index(self, modality: str) -> ModalityIndex:
        idx = self._indexes.get(modality)
        if idx is None:
            idx = ModalityIndex.load(self._mod_dir(modality))
            if idx is None:
                known = ", ".join(self.modalities()) or "none"
                raise FeatureNotFoundError(f"{self.root}: no modality {modality!r} (modalities: {known})")
            self._indexes[modality] = idx
        return idx

    def _locate(self, modality: str, key: str) -> tuple[int, int] | None:
        idx = self._index(modality)
        loc = idx.loc.get(key)
        if loc is None and modality not in self._writing and signature_of(idx.dir) != idx.signature:
            manifest = read_manifest(idx.dir)
            if manifest is not None and manifest.get("generation") != idx.generation:
                self.refresh(modality)
                loc = self._index(modality).loc.get(key)
        return loc

    def _require(self, modality: str, key: str) -> tuple[ModalityIndex, tuple[int, int]]:
        loc = self._locate(modality, key)
        if loc is None:
            raise FeatureNotFoundError(f"{self.root}: no {modality!r} features for key {key!r}")
        return self._indexes[modality], loc

    def _open(self, seg: Segment, idx: ModalityIndex) -> np.ndarray:
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


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux MemAvailable), or None when unknown."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None
