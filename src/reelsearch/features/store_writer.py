"""Writing a FeatureStore: ``FeatureWriter`` appends one modality's items and commits them in segments, and
``StoreWriting`` (mixed into ``reelsearch.features.store.FeatureStore``) opens writers, compacts a modality
(``finalize``) and merges stores."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.config.typed import to_dict
from reelsearch.features.store_files import (
    COPY_CHUNK_ROWS,
    DTYPES,
    SEGMENTS,
    FeatureNotFoundError,
    FeatureStoreError,
    ModalityIndex,
    ModalityLock,
    Segment,
    remove_orphans,
    write_manifest,
    write_rows,
)
from reelsearch.io import atomic_write_json


class StoreWriting:
    """The writing half of ``FeatureStore`` (through its ``root``, ``_mod_dir``, ``_writing``, ``modalities``,
    ``refresh`` and reads)."""

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
            lock = ModalityLock(mod_dir, "finalize")
            try:
                idx = ModalityIndex.load(mod_dir)
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
                remove_orphans(idx)
            finally:
                lock.release()
            self.refresh(name)

    def _compact(self, idx: ModalityIndex, live: set[tuple[int, int]], bar) -> None:
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
                    for start in range(0, len(rows), COPY_CHUNK_ROWS):
                        yield rows[start : start + COPY_CHUNK_ROWS]
                else:
                    for i in range(len(seg.keys)):
                        if (s, i) in live:
                            yield rows[seg.offsets[i] : seg.offsets[i] + seg.lengths[i]]
                del rows
                bar.update(1)
            bar.close()

        name = f"{idx.next_seq:06d}-{uuid.uuid4().hex[:8]}"
        seg_dir = idx.dir / SEGMENTS
        write_rows(seg_dir / f"{name}.npy", idx.dtype, idx.dim, blocks(), int(sum(lengths)))
        info = {"rows": int(sum(lengths)), "dim": idx.dim, "dtype": idx.dtype, "keys": keys, "lengths": lengths}
        if any(m for m in meta):
            info["meta"] = meta
        atomic_write_json(seg_dir / f"{name}.json", info, indent=None)
        idx.segments, idx.loc = [], {}
        idx.append(Segment(seg_dir, name, info))
        idx.next_seq += 1
        idx.generation += 1
        idx.finalized = True
        self._commit_manifest(idx)

    def _commit_manifest(self, idx: ModalityIndex) -> None:
        write_manifest(idx.dir, idx.manifest())

    @classmethod
    def merge(cls, sources: Sequence[str | Path], dest: str | Path, progress: bool = False) -> dict[str, int]:
        """Merge the stores ``sources`` (e.g. one per extraction rank) into ``dest``; returns items added per modality.

        Keys already in ``dest`` are skipped (a merge resumes). A key in two sources is an error, as is a modality
        whose dim or dtype differs between stores. ``dest`` is finalized (compacted) at the end.
        """
        dest_path = Path(dest).resolve()
        stores = []
        for src in sources:
            if Path(src).resolve() == dest_path:
                raise FeatureStoreError(f"{dest}: a merge source cannot also be the destination")
            stores.append(cls(src, create=False))
        out = cls(dest)
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


def json_meta(meta: dict | None, where: str) -> dict | None:
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


class FeatureWriter:
    """Appends items to one modality of a FeatureStore; commits every ``commit_every`` items and on close.

    Created by :meth:`FeatureStore.writer`. Holds the modality's lock until :meth:`close` (or the ``with`` exit).
    """

    def __init__(
        self, store: StoreWriting, modality: str, dim: int, dtype: str | None, commit_every: int, max_buffer_bytes: int,
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
        self._lock = ModalityLock(mod_dir, f"write {modality!r}")
        try:
            idx = ModalityIndex.load(mod_dir)
            recorded = None
            if recipe is not None:
                recorded = to_dict(recipe.with_dtype(dtype or (idx.dtype if idx else "float16")))
            if idx is None:
                idx = ModalityIndex.empty(mod_dir, int(dim), dtype or "float16", recorded)
            elif idx.dim != dim or (dtype is not None and idx.dtype != dtype):
                raise FeatureStoreError(
                    f"{where}: stored as [T, {idx.dim}] {idx.dtype}, cannot write [T, {dim}] {dtype or idx.dtype}"
                )
            elif recipe is not None:
                store.check_recipe(modality, recipe)
            remove_orphans(idx)
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
        meta = json_meta(meta, where)
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
        write_rows(seg_dir / f"{name}.npy", idx.dtype, idx.dim, self._arrays, sum(lengths))
        info = {"rows": sum(lengths), "dim": idx.dim, "dtype": idx.dtype, "keys": self._keys, "lengths": lengths}
        if any(m for m in self._meta):
            info["meta"] = self._meta
        atomic_write_json(seg_dir / f"{name}.json", info, indent=None)
        manifest = idx.manifest()
        manifest.update(generation=idx.generation + 1, next_seq=idx.next_seq + 1, finalized=False)
        manifest["segments"].append(name)
        write_manifest(idx.dir, manifest)  # the commit point
        idx.generation, idx.next_seq, idx.finalized = manifest["generation"], manifest["next_seq"], False
        idx.append(Segment(seg_dir, name, info))
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
