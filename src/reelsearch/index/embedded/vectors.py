"""FaissIndex: the embedded catalog's vector index (``reelsearch.index.vectors.VectorIndex``), exact below a
threshold, HNSW above, saved as one file.
"""

from __future__ import annotations

import contextlib
import json
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.index.vectors import SCAN_CHUNK_ROWS, VectorIndex, VectorIndexError, as_matrix, pad_results
from reelsearch.io import atomic_path


@contextlib.contextmanager
def _omp_threads(n: int) -> Iterator[None]:
    """Run FAISS with ``n`` OpenMP threads inside the block (OpenMP keeps this per calling thread; restored after)."""
    import faiss  # noqa: PLC0415 - optional package (index extra)

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


class FaissIndex(VectorIndex):
    """Embedded FAISS index: exact (flat inner product) below ``threshold`` vectors, HNSW above.

    The index switches to HNSW when an ``add`` takes it to ``threshold`` vectors and back to exact when removals
    take it below ``threshold // 2`` (hysteresis, so a catalog near the threshold does not flip back and forth).
    ``kind="flat"`` or ``"hnsw"`` pins one. HNSW cannot delete: removed and replaced vectors are masked by an id
    selector at search time (and saved as such) and dropped by a rebuild once they exceed 20 % of the graph.
    ``save`` writes one
    file atomically (``.npz``: the serialised FAISS index, the id table and settings).

    A search of at most ``single_thread_queries`` queries runs on one OpenMP thread: FAISS parallelises over
    queries, so more threads only add synchronisation, which on a loaded machine costs far more than the search
    (measured: exact search of 10,000 x 1024 took 56 ms p50 on 2 threads vs 6 ms on 1; see docs/index.md).
    Concurrent requests get their parallelism from the server's threads instead, and a batch of them (``serve``'s
    index stage: at most ``--batch`` 32 searches) stays on one thread beside the query encoder's.
    """

    KINDS = ("auto", "flat", "hnsw")

    def __init__(
        self,
        dim: int,
        path: str | Path | None = None,
        *,
        kind: str = "auto",
        threshold: int = 20_000,
        hnsw_m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 128,
        single_thread_queries: int = 32,
    ):
        if kind not in self.KINDS:
            raise ConfigError(f"unknown FAISS index kind {kind!r}; choose one of {self.KINDS}")
        if dim < 1 or threshold < 1 or hnsw_m < 2 or ef_construction < 1 or ef_search < 1:
            raise ConfigError("dim, threshold, ef_construction and ef_search must be >= 1 and hnsw_m >= 2")
        self.dim = int(dim)
        self.path = Path(path) if path is not None else None
        self.kind = kind
        self.threshold = int(threshold)
        self.hnsw_m, self.ef_construction, self.ef_search = int(hnsw_m), int(ef_construction), int(ef_search)
        self.single_thread_queries = int(single_thread_queries)
        self._label_of: dict[str, int] = {}
        self._id_of: dict[int, str] = {}
        self._id_by_label = np.empty(0, dtype=object)  # label -> id, None where removed (vectorised lookups)
        self._dead: set[int] = set()  # labels masked in an HNSW graph (removed or replaced)
        self._next_label = 0
        self._index = self._new_index("flat" if kind != "hnsw" else "hnsw")
        if self.path is not None and self.path.exists():
            self._load(self.path)

    # -- structure -------------------------------------------------------------------------------------------
    @property
    def structure(self) -> str:
        """"flat" (exact) or "hnsw" (approximate): what the index currently is."""
        return self._structure

    def _new_index(self, structure: str):
        import faiss  # noqa: PLC0415 - optional package (index extra)

        self._structure = structure
        if structure == "flat":
            inner = faiss.IndexFlatIP(self.dim)
        else:
            inner = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.ef_construction
            inner.hnsw.efSearch = self.ef_search
        return faiss.IndexIDMap2(inner)

    def _stored(self) -> tuple[np.ndarray, np.ndarray]:
        """(labels [n], vectors [n, D]) of every vector in the FAISS index, masked ones included."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        labels = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        n = len(labels)
        vectors = self._index.index.reconstruct_n(0, n) if n else np.empty((0, self.dim), np.float32)
        return labels, vectors

    def _rebuild(self, structure: str) -> None:
        """Re-create the FAISS index as ``structure`` from the live vectors (drops masked ones)."""
        labels, vectors = self._stored()
        live = np.array([lab in self._id_of for lab in labels.tolist()], dtype=bool)
        self._index = self._new_index(structure)
        self._dead.clear()
        if live.any():
            self._index.add_with_ids(np.ascontiguousarray(vectors[live]), labels[live])

    def _wanted_structure(self, n_live: int) -> str:
        if self.kind != "auto":
            return self.kind
        if self._structure == "flat":
            return "hnsw" if n_live >= self.threshold else "flat"
        return "flat" if n_live < self.threshold // 2 else "hnsw"

    # -- interface -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._label_of)

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        ids = [str(i) for i in ids]
        x = as_matrix(vectors, self.dim)
        if len(ids) != len(x):
            raise VectorIndexError(f"{len(ids)} ids but {len(x)} vectors")
        if len(set(ids)) != len(ids):  # last one wins, as with repeated adds
            last = {id_: i for i, id_ in enumerate(ids)}
            keep = sorted(last.values())
            ids, x = [ids[i] for i in keep], x[keep]
        self._drop([i for i in ids if i in self._label_of])
        labels = np.arange(self._next_label, self._next_label + len(ids), dtype=np.int64)
        self._next_label += len(ids)
        for id_, lab in zip(ids, labels.tolist(), strict=True):
            self._label_of[id_] = lab
            self._id_of[lab] = id_
        self._set_id_labels(labels, ids)
        want = self._wanted_structure(len(self._label_of))
        if want != self._structure:
            self._rebuild(want)  # the new vectors are added to the rebuilt index below
        if len(ids):
            self._index.add_with_ids(x, labels)
        self._maybe_compact()

    def remove(self, ids: Sequence[str]) -> int:
        present = [str(i) for i in ids if str(i) in self._label_of]
        self._drop(present)
        self._maybe_compact()
        return len(present)

    def _drop(self, ids: list[str]) -> None:
        if not ids:
            return
        labels = np.array([self._label_of.pop(i) for i in ids], dtype=np.int64)
        for lab in labels.tolist():
            del self._id_of[lab]
        self._id_by_label[labels] = None
        if self._structure == "flat":
            self._index.remove_ids(labels)
        else:
            self._dead.update(labels.tolist())

    def _set_id_labels(self, labels: np.ndarray, ids: list[str]) -> None:
        if len(labels) and labels.max() >= len(self._id_by_label):
            grown = np.empty(max(int(labels.max()) + 1, 2 * len(self._id_by_label)), dtype=object)
            grown[: len(self._id_by_label)] = self._id_by_label
            self._id_by_label = grown
        if len(labels):
            self._id_by_label[labels] = np.array(ids, dtype=object)

    def _maybe_compact(self) -> None:
        want = self._wanted_structure(len(self._label_of))
        if want != self._structure or (self._dead and len(self._dead) > 0.2 * self._index.ntotal):
            self._rebuild(want)

    def search(self, queries: np.ndarray, k: int) -> tuple[list[list[str]], np.ndarray]:
        import faiss  # noqa: PLC0415 - optional package (index extra)

        q = as_matrix(queries, self.dim, "queries")
        k = int(k)
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        kk = min(k, len(self))
        if kk == 0:
            return [[] for _ in range(len(q))], np.full((len(q), k), -np.inf, np.float32)
        params = None
        if self._structure == "hnsw":
            sel = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.fromiter(self._dead, np.int64))) if self._dead else None
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, kk), sel=sel)
        if len(q) <= self.single_thread_queries:
            with _omp_threads(1):
                scores, labels = self._index.search(q, kk, params=params)
        else:
            scores, labels = self._index.search(q, kk, params=params)
        ids = [[self._id_of[lab] for lab in row if lab >= 0] for row in labels.tolist()]
        scores = np.where(labels >= 0, scores, -np.inf).astype(np.float32)
        return pad_results(ids, scores, len(q), k)

    def __contains__(self, id_: str) -> bool:
        return str(id_) in self._label_of  # the id table: no vector reconstructed

    def get(self, ids: Sequence[str]) -> np.ndarray:
        """The vectors [len(ids), D] of ``ids`` (KeyError for one not stored), read by FAISS in one call."""
        label_of = self._label_of
        try:
            labels = np.fromiter((label_of[i] for i in ids), np.int64, len(ids))
        except KeyError:  # an id not stored, or ids not given as strings
            missing = next((i for i in ids if str(i) not in label_of), None)
            if missing is not None:
                raise KeyError(missing) from None
            labels = np.fromiter((label_of[str(i)] for i in ids), np.int64, len(ids))
        if not len(labels):
            return np.empty((0, self.dim), np.float32)
        return self._index.reconstruct_batch(labels)

    def _storage(self) -> np.ndarray:
        """Read-only view [ntotal, D] of the vectors FAISS holds (position order, masked ones included)."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        inner = faiss.downcast_index(self._index.index)
        flat = inner if self._structure == "flat" else faiss.downcast_index(inner.storage)
        n = flat.ntotal
        if n == 0:
            return np.empty((0, self.dim), np.float32)
        view = faiss.rev_swig_ptr(flat.get_xb(), n * self.dim).reshape(n, self.dim)
        view.flags.writeable = False
        return view

    def iter_chunks(self, rows: int = SCAN_CHUNK_ROWS) -> Iterator[tuple[list[str], np.ndarray]]:
        """Blocks of (ids, vectors); vectors are views into the index, valid until it next changes."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        labels = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        storage = self._storage()
        for start in range(0, len(labels), rows):
            ids = self._id_by_label[labels[start : start + rows]]
            block = storage[start : start + rows]
            live = np.not_equal(ids, None)
            if live.all():
                yield ids.tolist(), block
            elif live.any():
                yield ids[live].tolist(), block[live]

    def ids(self) -> list[str]:
        """Every stored id."""
        return list(self._label_of)

    # -- persistence -----------------------------------------------------------------------------------------
    def save(self, path: str | Path | None = None) -> None:
        """Write the index to ``path`` (default: the path it was opened with) atomically."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        path = Path(path) if path is not None else self.path
        if path is None:
            raise ConfigError("FaissIndex.save: no path given and the index was created without one")
        labels = np.fromiter(self._id_of.keys(), np.int64, len(self._id_of))
        ids = np.array(list(self._id_of.values()), dtype=np.str_) if len(labels) else np.empty(0, np.str_)
        settings = {
            "format": "reelsearch-faiss-index", "version": 1, "dim": self.dim, "structure": self._structure,
            "next_label": self._next_label,
        }
        blob = faiss.serialize_index(self._index)
        with atomic_path(path, suffix=".npz") as tmp, open(tmp, "wb") as fh:
            dead = np.fromiter(self._dead, np.int64)
            np.savez(fh, index=blob, labels=labels, ids=ids, dead=dead, settings=np.array(json.dumps(settings)))
        self.path = path

    def _load(self, path: Path) -> None:
        import faiss  # noqa: PLC0415 - optional package (index extra)

        try:
            with np.load(path, allow_pickle=False) as z:
                settings = json.loads(str(z["settings"]))
                labels, ids, dead = z["labels"], z["ids"].tolist(), z["dead"].tolist()
                blob = z["index"]
            if settings.get("format") != "reelsearch-faiss-index" or int(settings["dim"]) != self.dim:
                raise DataFormatError(path, f"not a {self.dim}-dimensional reelsearch FAISS index ({settings})")
            index = faiss.deserialize_index(blob)
            id_of = dict(zip(labels.tolist(), ids, strict=True))
            if index.ntotal < len(id_of) or index.d != self.dim:
                raise ValueError(f"{index.ntotal} vectors of {index.d} dimensions for {len(id_of)} ids")
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, zipfile.BadZipFile) as exc:
            raise DataFormatError(path, f"unreadable FAISS index file: {exc}") from None
        self._index = index
        self._structure = settings["structure"]
        self._next_label = int(settings["next_label"])
        self._id_of = id_of
        self._label_of = {v: k for k, v in self._id_of.items()}
        self._id_by_label = np.empty(0, dtype=object)
        self._set_id_labels(labels.astype(np.int64), ids)
        self._dead = set(dead)
        if self._structure == "hnsw":
            faiss.downcast_index(self._index.index).hnsw.efSearch = self.ef_search
