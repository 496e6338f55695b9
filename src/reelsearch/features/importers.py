"""Import precomputed features (I3D, ResNet-152, Places365, CLIP dumps, ...) into a FeatureStore.

Formats:
  npy-dir     a folder of ``<id>.npy``, each ``[T, D]`` or ``[D]`` (one row)
  npz         one ``.npz`` with one array per id
  hdf5        one HDF5 file with one dataset per id, or one group per id holding one dataset (``dataset`` picks it
              when a group holds several); groups holding several datasets (e.g. ``train/``) are walked into
  npy-matrix  one ``[N, D]`` or ``[N, T, D]`` ``.npy`` plus an ids text file of N lines, row i = line i

Arrays are normalised to ``[T, D]``: ``[D]`` becomes ``[1, D]``; singleton axes around ``[T, D]`` (``[1, T, D]``,
``[T, D, 1, 1]``) are dropped. A bad entry (unreadable, wrong shape or dim, NaN, float16 overflow) is reported with
its file and id and the rest is imported. Ids already in the store are skipped, so an interrupted import resumes.
"""

from __future__ import annotations

import collections
import contextlib
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from reelsearch.config.recipe import ModalityRecipe
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.features.store import FeatureStore, FeatureStoreError

FORMATS = ("npy-dir", "npz", "hdf5", "npy-matrix")
_HDF5_SUFFIXES = {".h5", ".hdf5", ".hdf", ".he5"}


@dataclass
class ImportEntry:
    """One item of a source: its id, where it lives (for messages), its shape when cheap to know, a loader."""

    id: str
    source: str
    shape: tuple[int, ...] | None
    load: Callable[[], np.ndarray]


@dataclass
class ImportProblem:
    """A source entry that was not imported."""

    source: str
    id: str
    problem: str

    def __str__(self) -> str:
        return f"{self.source}: id {self.id!r}: {self.problem}"


@dataclass
class ImportReport:
    """What an import did: items imported, already present (skipped), and the problems."""

    modality: str
    dim: int
    total: int
    imported: int = 0
    skipped: int = 0
    bad: list[ImportProblem] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"modality": self.modality, "dim": self.dim, "total": self.total, "imported": self.imported,
                "skipped": self.skipped, "bad": [{"source": p.source, "id": p.id, "problem": p.problem}
                                                 for p in self.bad]}

    def line(self, store: str | Path) -> str:
        """One line: what was imported into ``store``."""
        return (f"{store}: {self.modality!r} [T, {self.dim}]: imported {self.imported}, already there "
                f"{self.skipped}, bad {len(self.bad)}")


def detect_format(src: str | Path) -> str:
    """The format of ``src`` from its kind: folder -> npy-dir, .npz, .h5/.hdf5 -> hdf5, .npy -> npy-matrix."""
    src = Path(src)
    if src.is_dir():
        return "npy-dir"
    suffix = src.suffix.lower()
    if suffix == ".npz":
        return "npz"
    if suffix in _HDF5_SUFFIXES:
        return "hdf5"
    if suffix == ".npy":
        return "npy-matrix"
    raise DataFormatError(src, f"cannot tell the feature format from the name; pass one of {', '.join(FORMATS)}")


def read_ids(path: str | Path) -> list[str]:
    """Ids, one per line (surrounding whitespace stripped, blank lines skipped); a repeated id is an error."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"cannot read ids: {exc}") from None
    ids, seen = [], {}
    for n, line in enumerate(lines, 1):
        item = line.strip()
        if not item:
            continue
        if item in seen:
            raise DataFormatError(path, f"id {item!r} repeats line {seen[item]}", line=n)
        seen[item] = n
        ids.append(item)
    return ids


def normalized_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The ``[T, D]`` shape an array of ``shape`` is imported as; ValueError when there is none."""
    out = tuple(int(n) for n in shape)
    if len(out) == 1:
        out = (1, *out)
    while len(out) > 2 and out[0] == 1:
        out = out[1:]
    while len(out) > 2 and out[-1] == 1:
        out = out[:-1]
    if len(out) != 2:
        raise ValueError(f"expected [T, D] or [D] features, got shape {tuple(shape)}")
    return out


def normalize(arr: np.ndarray) -> np.ndarray:
    """``[D]`` -> ``[1, D]``; drop singleton axes around ``[T, D]``; ValueError for other shapes."""
    arr = np.asarray(arr)
    return arr.reshape(normalized_shape(arr.shape))


def _feature_dim(shape: tuple[int, ...] | None) -> int | None:
    if shape is None:
        return None
    try:
        return normalized_shape(shape)[1]
    except ValueError:
        return None


def _npy_shape(fh) -> tuple[int, ...] | None:
    """Shape from an .npy header without reading the data (None if the header is unusual or damaged)."""
    with contextlib.suppress(Exception):
        version = np.lib.format.read_magic(fh)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        return tuple(reader(fh)[0])
    return None


@contextlib.contextmanager
def open_entries(src: str | Path, fmt: str, ids: list[str] | None = None, dataset: str | None = None):
    """Yield the entries of ``src`` in ``fmt`` (files stay open inside the ``with``)."""
    src = Path(src)
    if fmt not in FORMATS:
        raise ReelsearchError(f"unknown feature format {fmt!r}; known: {', '.join(FORMATS)}")
    if not src.exists():
        raise DataFormatError(src, "does not exist")
    if fmt == "npy-dir":
        yield _npy_dir(src)
    elif fmt == "npz":
        yield from _npz(src)
    elif fmt == "hdf5":
        yield from _hdf5(src, dataset)
    else:
        if ids is None:
            raise ReelsearchError(f"{src}: an npy-matrix import needs an ids file (one id per row)")
        yield _npy_matrix(src, ids)


def _npy_dir(src: Path) -> list[ImportEntry]:
    if not src.is_dir():
        raise DataFormatError(src, "npy-dir format needs a folder of <id>.npy files")
    files = sorted(p for p in src.iterdir() if p.suffix == ".npy" and p.is_file())
    if not files:
        raise DataFormatError(src, "no .npy files in this folder")
    entries = []
    for path in files:
        with open(path, "rb") as fh:
            shape = _npy_shape(fh)
        entries.append(ImportEntry(path.stem, str(path), shape, lambda p=path: np.load(p, allow_pickle=False)))
    return entries


def _npz(src: Path) -> Iterator[list[ImportEntry]]:
    try:
        archive = np.load(src, allow_pickle=False)
        zf = zipfile.ZipFile(src)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataFormatError(src, f"not a readable .npz: {exc}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataFormatError(src, "not an .npz archive")
    with archive, zf:
        entries = []
        for name in archive.files:
            shape = None
            with contextlib.suppress(KeyError, OSError, zipfile.BadZipFile), zf.open(f"{name}.npy") as fh:
                shape = _npy_shape(fh)
            entries.append(ImportEntry(name, f"{src}[{name}]", shape, lambda n=name: archive[n]))
        yield entries


def _hdf5(src: Path, dataset: str | None) -> Iterator[list[ImportEntry]]:
    try:
        h5 = h5py.File(src, "r")
    except OSError as exc:
        raise DataFormatError(src, f"not a readable HDF5 file: {exc}") from None

    def entry(item_id: str, ds) -> ImportEntry:
        return ImportEntry(item_id, f"{src}:{ds.name}", tuple(ds.shape), lambda: ds[()])

    def broken(item_id: str, where: str, problem: str) -> ImportEntry:
        def fail():
            raise ValueError(problem)

        return ImportEntry(item_id, f"{src}:{where}", None, fail)

    def walk(group) -> Iterator[ImportEntry]:
        for name, obj in group.items():
            if isinstance(obj, h5py.Dataset):
                yield entry(name, obj)
                continue
            if not isinstance(obj, h5py.Group):
                continue
            members = dict(obj.items())
            datasets = [v for v in members.values() if isinstance(v, h5py.Dataset)]
            has_groups = any(isinstance(v, h5py.Group) for v in members.values())
            if dataset is not None and isinstance(members.get(dataset), h5py.Dataset):
                yield entry(name, members[dataset])
            elif dataset is None and len(datasets) == 1 and not has_groups:
                yield entry(name, datasets[0])  # one group per id, one dataset inside
            elif dataset is not None and not has_groups:
                have = ", ".join(sorted(members)) or "nothing"
                yield broken(name, obj.name, f"group has no dataset {dataset!r} (has: {have})")
            else:
                yield from walk(obj)  # a container such as train/ or features/

    with h5:
        yield list(walk(h5))


def _npy_matrix(src: Path, ids: list[str]) -> list[ImportEntry]:
    try:
        matrix = np.load(src, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataFormatError(src, f"not a readable .npy: {exc}") from None
    if matrix.ndim not in (2, 3):
        raise DataFormatError(src, f"npy-matrix must be [N, D] or [N, T, D], got shape {matrix.shape}")
    if len(ids) != len(matrix):
        raise DataFormatError(src, f"has {len(matrix)} rows but the ids file lists {len(ids)} ids")
    return [ImportEntry(i, f"{src}[{n}]", matrix.shape[1:], lambda n=n: matrix[n]) for n, i in enumerate(ids)]


def strip_zero_rows(arr: np.ndarray) -> np.ndarray:
    """Drop trailing all-zero rows (padding), keeping at least one row."""
    nonzero = np.flatnonzero(np.any(arr != 0, axis=1))
    return arr[: max(1, int(nonzero[-1]) + 1 if len(nonzero) else 1)]


def import_features(
    src: str | Path,
    out: str | Path | FeatureStore,
    modality: str,
    fmt: str | None = None,
    ids: str | Path | None = None,
    dim: int | None = None,
    dtype: str | None = None,
    dataset: str | None = None,
    strip_padding: bool = False,
    finalize: bool = True,
    progress: bool = True,
    commit_every: int = 256,
    extractor: str = "imported",
) -> ImportReport:
    """Import the features in ``src`` into modality ``modality`` of the store ``out``.

    ``ids``: an ids text file; required for npy-matrix (row order), otherwise it selects and orders the ids to import
    (ids it lists that the source lacks are reported). ``dim``: expected D (default: the store's, else the most common
    in the source). ``strip_padding``: drop trailing all-zero rows. ``finalize``: compact the store at the end.
    ``extractor``: what made the features (``i3d``, ``clip-vit-b32``, ...), recorded as their recipe; a model reading
    them names the same extractor in its feature recipe (``features.video.<modality>``).
    """
    fmt = fmt or detect_format(src)
    wanted = read_ids(ids) if ids is not None else None
    with open_entries(src, fmt, ids=wanted, dataset=dataset) as entries:
        store = out if isinstance(out, FeatureStore) else FeatureStore(out)
        problems: list[ImportProblem] = []
        unique: dict[str, ImportEntry] = {}
        for e in entries:
            if e.id in unique:
                problems.append(ImportProblem(e.source, e.id, f"duplicate id (first at {unique[e.id].source})"))
            else:
                unique[e.id] = e
        if wanted is not None and fmt != "npy-matrix":
            chosen = [unique[i] for i in wanted if i in unique]
            problems += [
                ImportProblem(str(src), i, "listed in the ids file but not in the source")
                for i in wanted
                if i not in unique
            ]
        else:
            chosen = list(unique.values())
        if not chosen:
            raise DataFormatError(src, "no features to import")
        dim = _choose_dim(store, modality, dim, chosen)
        report = ImportReport(modality, dim, len(chosen), bad=problems)
        with store.writer(modality, dim, dtype, commit_every=commit_every, recipe=imported_recipe(extractor, dim)) as w:
            for e in tqdm(chosen, desc=f"import {modality}", unit="item", disable=not progress):
                if w.done(e.id):
                    report.skipped += 1
                    continue
                problem = _add(w, e, strip_padding)
                if problem:
                    report.bad.append(ImportProblem(e.source, e.id, problem))
                else:
                    report.imported += 1
    if finalize and report.imported:
        store.finalize(modality, progress=progress)
    return report


def imported_recipe(extractor: str, dim: int):
    """The recipe of features made outside reelsearch: the extractor's name and their size, nothing else known."""
    return ModalityRecipe(extractor, int(dim), sampling=None, max_frames=None, short_side=None)


def _choose_dim(store: FeatureStore, modality: str, dim: int | None, entries: list[ImportEntry]) -> int:
    if modality in store.modalities():
        stored = store.dim(modality)
        if dim is not None and dim != stored:
            raise FeatureStoreError(f"{store.root}: {modality!r} holds D={stored}, not the requested D={dim}")
        return stored
    if dim is not None:
        return dim
    counts = collections.Counter(d for d in (_feature_dim(e.shape) for e in entries) if d is not None)
    if counts:
        return counts.most_common(1)[0][0]
    for e in entries:  # no shape known cheaply: the first entry that loads decides
        with contextlib.suppress(Exception):
            return int(normalize(e.load()).shape[1])
    raise DataFormatError(entries[0].source, "no entry could be read to learn the feature dimension")


def _add(w, e: ImportEntry, strip_padding: bool) -> str | None:
    """Add one entry; the problem as text when it cannot be."""
    try:
        arr = normalize(e.load())
    except Exception as exc:  # noqa: BLE001 - any unreadable entry is reported, the rest go on
        return f"cannot read: {exc}"
    if arr.dtype.kind not in "fiu":
        return f"features must be numbers, got dtype {arr.dtype}"
    if arr.shape[1] != w.dim:
        return f"feature dimension {arr.shape[1]} (shape {arr.shape}), expected {w.dim}"
    if arr.shape[0] < 1:
        return "no rows (T = 0)"
    if strip_padding:
        arr = strip_zero_rows(arr)
    try:
        w.add(e.id, arr)
    except FeatureStoreError as exc:
        return str(exc).split(f"item {e.id!r}: ", 1)[-1]
    return None
