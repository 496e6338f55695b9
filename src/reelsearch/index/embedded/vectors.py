"""FaissIndex: the embedded catalog's vector index (``reelsearch.index.vectors.VectorIndex``), exact below a
threshold, HNSW (or, given a reader of the exact rows on disk, product-quantised IVF codes re-ranked with those rows)
above, saved as one file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.index.embedded.id_table import IdTable
from reelsearch.index.vectors import SCAN_CHUNK_ROWS, VectorIndex, VectorIndexError, as_matrix, pad_results
from reelsearch.io import atomic_path

#: rows_of(ids) -> {id: its exact float32 row [D]} of those of ``ids`` stored on disk (the others left out).
RowReader = Callable[[Sequence[str]], dict[str, np.ndarray]]
#: Dimensions per product-quantiser code byte (1,025 float32 dims: 130 bytes a row instead of 4,100).
PQ_DIMS_PER_BYTE = 8
#: Rows per read of exact rows from disk.
READ_ROWS = 4096
#: k-means iterations of the codes' training (lists and product quantiser; FAISS's default 25 took 2.5 times as long
#: for the same recall@10 after the re-rank: docs/index.md, "Memory").
KMEANS_ITERATIONS = 10
#: The fewest rows an ivfpq index is trained on (below: exact).
IVFPQ_MIN_ROWS = 1024

logger = logging.getLogger(__name__)


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

    Given ``rows_of`` (a reader of the exact rows on disk), the large structure is ``"ivfpq"`` instead of HNSW: an
    inverted file of product-quantised codes (1 byte per 8 dimensions, no float32 row in memory: docs/index.md,
    "Memory"), whose top ``rerank`` candidates (at least 4 k) are scored again with their exact rows read by
    ``rows_of``, so every score it returns is exact; ``get`` and ``iter_chunks`` read the rows alike. It is trained
    on the rows it holds when it is made, and again (rebuilt) once it holds four times as many; it searches
    ``nprobe`` of its lists (default: a 32nd of them, at least 32).

    ``bias_column``: the last column is each row's bias (the catalog's [row, bias]). The codes then hold the other
    columns only, the biases are kept apart (float32, by label), and a query's candidates are ranked by the codes'
    score plus its last value times their bias before the re-rank: a bias quantised with the row in one code byte
    cost recall (docs/index.md, "Memory").
    """

    KINDS = ("auto", "flat", "hnsw", "ivfpq")

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
        rows_of: RowReader | None = None,
        rerank: int = 100,
        nprobe: int | None = None,
        bias_column: bool = False,
    ):
        if kind not in self.KINDS:
            raise ConfigError(f"unknown FAISS index kind {kind!r}; choose one of {self.KINDS}")
        if kind == "ivfpq" and rows_of is None:
            raise ConfigError("a FAISS index of kind 'ivfpq' needs rows_of, the reader of its exact rows")
        if dim < 1 or threshold < 1 or hnsw_m < 2 or ef_construction < 1 or ef_search < 1:
            raise ConfigError("dim, threshold, ef_construction and ef_search must be >= 1 and hnsw_m >= 2")
        self.dim = int(dim)
        self.path = Path(path) if path is not None else None
        self.kind = kind
        self.threshold = int(threshold)
        self.hnsw_m, self.ef_construction, self.ef_search = int(hnsw_m), int(ef_construction), int(ef_search)
        self.single_thread_queries = int(single_thread_queries)
        self.rows_of, self.rerank, self.nprobe = rows_of, max(1, int(rerank)), nprobe
        self.bias_column = bool(bias_column)
        self._large = "ivfpq" if rows_of is not None else "hnsw"
        self._trained_on = 0  # rows the ivfpq codes were trained on
        self._building = 0  # rows a full build trained for (``train_for``), until the index holds them
        self._ids = IdTable()  # labels <-> ids
        self._bias_by_label = np.empty(0, dtype=np.float32)  # label -> bias (``bias_column``)
        self._dead: set[int] = set()  # labels masked in an HNSW graph (removed or replaced)
        self._next_label = 0
        self._index = self._new_index("hnsw" if kind == "hnsw" else "flat")
        if self.path is not None and self.path.exists():
            self._load(self.path)

    # -- structure -------------------------------------------------------------------------------------------
    @property
    def structure(self) -> str:
        """"flat" (exact), "hnsw" or "ivfpq" (approximate): what the index currently is."""
        return self._structure

    @property
    def _coded_dim(self) -> int:
        """The columns the codes hold: all, or all but the bias (``bias_column``)."""
        return self.dim - 1 if self.bias_column and self.dim > 1 else self.dim

    @property
    def _padded_dim(self) -> int:
        """The codes' width: the coded columns padded with zeros to a whole number of code bytes."""
        return -(-self._coded_dim // PQ_DIMS_PER_BYTE) * PQ_DIMS_PER_BYTE

    def _padded(self, x: np.ndarray) -> np.ndarray:
        out = np.zeros((len(x), self._padded_dim), np.float32)
        out[:, : self._coded_dim] = x[:, : self._coded_dim]
        return out

    def _new_index(self, structure: str, train: np.ndarray | None = None, rows: int | None = None):
        """An empty FAISS index of ``structure``; an ivfpq one trained on ``train`` for ``rows`` rows (default: as
        many as ``train``)."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        self._structure = structure
        if structure == "ivfpq":  # labels kept by the inverted lists themselves (no id map: they remove by label)
            n = max(len(train), rows or 0)
            nlist = max(1, min(int(4 * math.sqrt(n)), n // 39))
            index = faiss.IndexIVFPQ(faiss.IndexFlatIP(self._padded_dim), self._padded_dim, nlist,
                                     self._padded_dim // PQ_DIMS_PER_BYTE, 8, faiss.METRIC_INNER_PRODUCT)
            sample = (train if len(train) <= 50 * nlist
                      else train[np.random.default_rng(0).choice(len(train), 50 * nlist, False)])
            index.cp.niter = index.pq.cp.niter = KMEANS_ITERATIONS
            index.train(self._padded(sample))
            index.nprobe = self._probes(nlist)
            self._trained_on = n
            return index
        if structure == "flat":
            inner = faiss.IndexFlatIP(self.dim)
        else:
            inner = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.ef_construction
            inner.hnsw.efSearch = self.ef_search
        return faiss.IndexIDMap2(inner)

    def _probes(self, nlist: int) -> int:
        return max(1, min(nlist, self.nprobe or max(32, nlist // 32)))

    def _live_blocks(self, structure: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(labels [m], vectors [m, D]) of every live vector, in blocks: from FAISS, or read by ``rows_of`` from disk
        (``structure``: the index's, passed so that a rebuild can read the old one's while making the new)."""
        if structure == "ivfpq":
            labels = self._ids.labels()
            for start in range(0, len(labels), READ_ROWS):  # a row gone from disk meanwhile is left out
                ids = self._ids.ids_of(labels[start : start + READ_ROWS])
                found = self.rows_of(ids)
                keep = [j for j, i in enumerate(ids) if i in found]
                yield (labels[start : start + READ_ROWS][keep],
                       np.stack([found[ids[j]] for j in keep]) if keep else np.empty((0, self.dim), np.float32))
            return
        import faiss  # noqa: PLC0415 - optional package (index extra)

        labels = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        storage = self._storage()
        for start in range(0, len(labels), SCAN_CHUNK_ROWS):
            block = labels[start : start + SCAN_CHUNK_ROWS]
            live = self._ids.live(block)
            yield block[live], np.array(storage[start : start + SCAN_CHUNK_ROWS][live])

    def _read(self, ids: list[str]) -> np.ndarray:
        """The exact rows [len(ids), D] of ``ids`` read by ``rows_of`` (KeyError for one no longer on disk)."""
        found = self.rows_of(ids)
        missing = next((i for i in ids if i not in found), None)
        if missing is not None:
            raise KeyError(missing)
        return np.stack([found[i] for i in ids]).astype(np.float32) if ids else np.empty((0, self.dim), np.float32)

    def _rebuild(self, structure: str, extra: np.ndarray | None = None) -> None:
        """Re-create the FAISS index as ``structure`` from the live vectors (drops masked ones); an ivfpq one is
        trained on them (a sample read from disk when they are codes) and ``extra`` (the rows about to be added)."""
        old = self._structure
        from_disk = old == "ivfpq"
        blocks = self._live_blocks(old) if from_disk else list(self._live_blocks(old))  # FAISS's: before replacing
        train = None
        if structure == "ivfpq":
            if from_disk:
                labels = self._ids.labels()
                pick = np.sort(np.random.default_rng(0).choice(len(labels), min(len(labels), 100_000), False))
                found = self.rows_of(self._ids.ids_of(labels[pick]))
                train = np.stack(list(found.values())) if found else np.empty((0, self.dim), np.float32)
            else:
                train = np.concatenate([v for _, v in blocks] or [np.empty((0, self.dim), np.float32)])
            if extra is not None:
                train = np.concatenate([train, extra])
            logger.info("training the product quantiser of a vector index on %d rows", len(train))
        self._index = self._new_index(structure, train)
        self._dead.clear()
        for labels, vectors in blocks:
            if len(labels):
                self._add_rows(vectors, labels)

    def _add_rows(self, x: np.ndarray, labels: np.ndarray) -> None:
        self._index.add_with_ids(self._padded(x) if self._structure == "ivfpq" else np.ascontiguousarray(x), labels)

    def _wanted_structure(self, n_live: int) -> str:
        if self.kind in ("flat", "hnsw"):
            return self.kind
        large = "ivfpq" if self.kind == "ivfpq" else self._large
        threshold = IVFPQ_MIN_ROWS if self.kind == "ivfpq" else self.threshold
        if large == "ivfpq":  # trained on at least IVFPQ_MIN_ROWS
            threshold = max(threshold, IVFPQ_MIN_ROWS)
        if self._structure == "flat":
            return large if n_live >= threshold else "flat"
        return "flat" if n_live < threshold // 2 else large

    def _stale(self, n_live: int) -> bool:
        """Whether the structure is not the one wanted, masks too many vectors, or its codes were trained on under
        a quarter of the rows it holds. During a full build (``train_for``) the rows it is built for count: its first
        batches would want it exact, and it would grow exact and be trained again on the way."""
        n_live = max(n_live, self._building)
        return (self._wanted_structure(n_live) != self._structure
                or bool(self._dead and len(self._dead) > 0.2 * self._index.ntotal)
                or (self._structure == "ivfpq" and n_live > 4 * self._trained_on))

    def train_for(self, rows: int, sample: Callable[[int], np.ndarray]) -> bool:
        """Before a full build of ``rows`` rows into this empty index: make the structure they want now, an ivfpq one
        trained on ``sample(n)`` (n of the rows, drawn at random) so that the build adds codes straight away instead
        of growing exact and retraining on the way. Whether it trained."""
        if len(self) or self._wanted_structure(rows) != "ivfpq" or self._structure == "ivfpq":
            return False
        nlist = max(1, min(int(4 * math.sqrt(rows)), rows // 39))
        train = as_matrix(sample(min(rows, 50 * nlist)), self.dim)
        logger.info("training the product quantiser of a vector index on %d of %d rows", len(train), rows)
        self._index = self._new_index("ivfpq", train, rows)
        self._dead.clear()
        self._building = rows
        return True

    def train_like(self, other: FaissIndex) -> bool:
        """Before a full build into this empty index: ``other``'s trained, still empty ivfpq codes (its lists and
        product quantiser), for rows of the same distribution (a library's segments where each video has one: they
        are its rows), instead of training again. Whether it took them."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        if (len(self) or len(other) or other.structure != "ivfpq" or (other.dim, other.bias_column) != (
                self.dim, self.bias_column) or self._wanted_structure(other._trained_on) != "ivfpq"):
            return False
        self._index = faiss.clone_index(other._index)
        self._structure, self._trained_on, self._building = "ivfpq", other._trained_on, other._trained_on
        self._dead.clear()
        return True

    # -- interface -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        ids = [str(i) for i in ids]
        x = as_matrix(vectors, self.dim)
        if len(ids) != len(x):
            raise VectorIndexError(f"{len(ids)} ids but {len(x)} vectors")
        if len(set(ids)) != len(ids):  # last one wins, as with repeated adds
            last = {id_: i for i, id_ in enumerate(ids)}
            keep = sorted(last.values())
            ids, x = [ids[i] for i in keep], x[keep]
        self._drop(ids)
        if self._stale(len(self._ids) + len(ids)):  # the new vectors are added to the rebuilt index below
            self._rebuild(self._wanted_structure(len(self._ids) + len(ids)), extra=x)
        labels = np.arange(self._next_label, self._next_label + len(ids), dtype=np.int64)
        self._next_label += len(ids)
        self._ids.add(ids, labels)
        self._set_biases(labels, x[:, -1])
        if len(ids):
            self._add_rows(x, labels)
        if len(self._ids) >= self._building:  # a full build is done
            self._building = 0
        self._maybe_compact()

    def remove(self, ids: Sequence[str]) -> int:
        dropped = self._drop([str(i) for i in ids])
        self._building = 0
        self._maybe_compact()
        return dropped

    def _drop(self, ids: list[str]) -> int:
        """Remove those of ``ids`` stored; how many."""
        labels = self._ids.remove(ids) if ids else np.empty(0, np.int64)
        if not len(labels):
            return 0
        if self._structure != "hnsw":
            self._index.remove_ids(labels)
        else:
            self._dead.update(labels.tolist())
        return len(labels)

    def _set_biases(self, labels: np.ndarray, biases: np.ndarray) -> None:
        """With ``bias_column``, record the biases of ``labels``."""
        if not self.bias_column or not len(labels):
            return
        if labels.max() >= len(self._bias_by_label):
            grown = np.zeros(max(int(labels.max()) + 1, 2 * len(self._bias_by_label)), np.float32)
            grown[: len(self._bias_by_label)] = self._bias_by_label
            self._bias_by_label = grown
        self._bias_by_label[labels] = biases

    def _maybe_compact(self) -> None:
        if self._stale(len(self._ids)):
            self._rebuild(self._wanted_structure(len(self._ids)))

    def search(self, queries: np.ndarray, k: int) -> tuple[list[list[str]], np.ndarray]:
        import faiss  # noqa: PLC0415 - optional package (index extra)

        q = as_matrix(queries, self.dim, "queries")
        k = int(k)
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        kk = min(k, len(self))
        if kk == 0:
            return [[] for _ in range(len(q))], np.full((len(q), k), -np.inf, np.float32)
        if self._structure == "ivfpq":
            return self._reranked(q, k, kk)
        params = None
        if self._structure == "hnsw":
            sel = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.fromiter(self._dead, np.int64))) if self._dead else None
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, kk), sel=sel)
        if len(q) <= self.single_thread_queries:
            with _omp_threads(1):
                scores, labels = self._index.search(q, kk, params=params)
        else:
            scores, labels = self._index.search(q, kk, params=params)
        ids = [self._ids.ids_of(row[row >= 0]) for row in labels]
        scores = np.where(labels >= 0, scores, -np.inf).astype(np.float32)
        return pad_results(ids, scores, len(q), k)

    def _reranked(self, q: np.ndarray, k: int, kk: int) -> tuple[list[list[str]], np.ndarray]:
        """The ivfpq codes' top ``rerank`` (at least 4 k) candidates of each query, scored again with their exact
        rows read from disk: the top ``kk`` by exact score (a candidate no longer on disk is left out)."""
        wide = min(len(self), max(self.rerank, 4 * kk))
        with _omp_threads(1) if len(q) <= self.single_thread_queries else contextlib.nullcontext():
            approx, labels = self._index.search(self._padded(q), min(len(self), 2 * wide) if self.bias_column else wide)
        if self.bias_column:  # the codes' score plus the bias they leave out: the top ``wide`` of those re-ranked
            approx = approx + q[:, -1:] * self._bias_by_label[np.maximum(labels, 0)]
            approx[labels < 0] = -np.inf
            labels = np.take_along_axis(labels, np.argsort(-approx, axis=1, kind="stable")[:, :wide], axis=1)
        candidates = [self._ids.ids_of(row[self._ids.live(row)]) for row in labels]
        rows = self.rows_of(sorted({i for row in candidates for i in row}))
        ids, scores = [], np.full((len(q), kk), -np.inf, np.float32)
        for qi, row in enumerate(candidates):
            row = [i for i in row if i in rows]
            exact = (np.array([rows[i] for i in row]).astype(np.float32, copy=False) @ q[qi]) if row else \
                np.empty(0, np.float32)
            order = np.lexsort((np.arange(len(row)), -exact))[:kk]
            ids.append([row[j] for j in order.tolist()])
            scores[qi, : len(order)] = exact[order]
        return pad_results(ids, scores, len(q), k)

    def __contains__(self, id_: str) -> bool:
        return str(id_) in self._ids  # the id table: no vector reconstructed

    def get(self, ids: Sequence[str]) -> np.ndarray:
        """The vectors [len(ids), D] of ``ids`` (KeyError for one not stored), read by FAISS in one call."""
        if not len(ids):
            return np.empty((0, self.dim), np.float32)
        labels = self._ids.labels_of(ids)
        if self._structure == "ivfpq":  # codes in memory: the exact rows are read from disk
            return self._read(self._ids.ids_of(labels))
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
        """Blocks of (ids, vectors); vectors are views into the index, valid until it next changes (ivfpq: read from
        disk)."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        if self._structure == "ivfpq":
            labels = self._ids.labels()
            for start in range(0, len(labels), rows):
                ids = self._ids.ids_of(labels[start : start + rows])
                yield ids, self._read(ids)
            return
        labels = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        storage = self._storage()
        for start in range(0, len(labels), rows):
            block_labels = labels[start : start + rows]
            block = storage[start : start + rows]
            live = self._ids.live(block_labels)
            if live.all():
                yield self._ids.ids_of(block_labels), block
            elif live.any():
                yield self._ids.ids_of(block_labels[live]), block[live]

    def ids(self) -> list[str]:
        """Every stored id."""
        return self._ids.ids()

    # -- persistence -----------------------------------------------------------------------------------------
    def save(self, path: str | Path | None = None) -> None:
        """Write the index to ``path`` (default: the path it was opened with) atomically."""
        import faiss  # noqa: PLC0415 - optional package (index extra)

        path = Path(path) if path is not None else self.path
        if path is None:
            raise ConfigError("FaissIndex.save: no path given and the index was created without one")
        labels = self._ids.labels()
        ids = np.array(self._ids.ids_of(labels), dtype=np.str_) if len(labels) else np.empty(0, np.str_)
        settings = {
            "format": "reelsearch-faiss-index", "version": 2, "bias_column": self.bias_column, "dim": self.dim,
            "structure": self._structure,
            "next_label": self._next_label, "trained_on": self._trained_on,
        }
        blob = faiss.serialize_index(self._index)
        with atomic_path(path, suffix=".npz") as tmp, open(tmp, "wb") as fh:
            dead = np.fromiter(self._dead, np.int64)
            biases = self._bias_by_label[labels] if self.bias_column else np.empty(0, np.float32)
            np.savez(fh, index=blob, labels=labels, ids=ids, dead=dead, biases=biases,
                     settings=np.array(json.dumps(settings)))
        self.path = path

    def _load(self, path: Path) -> None:
        import faiss  # noqa: PLC0415 - optional package (index extra)

        try:
            with np.load(path, allow_pickle=False) as z:
                settings = json.loads(str(z["settings"]))
                labels, ids, dead = z["labels"].astype(np.int64), z["ids"], z["dead"].tolist()
                blob = z["index"]
                biases = z["biases"] if "biases" in z.files else None
            if settings.get("format") != "reelsearch-faiss-index" or int(settings["dim"]) != self.dim:
                raise DataFormatError(path, f"not a {self.dim}-dimensional reelsearch FAISS index ({settings})")
            if settings["structure"] == "ivfpq" and self.rows_of is None:
                raise ValueError("product-quantised codes, and no reader of their exact rows")
            if settings["structure"] == "ivfpq" and bool(settings.get("bias_column")) != self.bias_column:
                raise ValueError(f"product-quantised codes with bias_column={settings.get('bias_column')}, wanted "
                                 f"{self.bias_column}")
            index = faiss.deserialize_index(blob)
            if len(labels) != len(ids) or len(np.unique(ids)) != len(ids):
                raise ValueError(f"{len(labels)} labels for {len(ids)} ids, or an id twice")
            if index.ntotal < len(ids) or index.d not in (self.dim, self._padded_dim):
                raise ValueError(f"{index.ntotal} vectors of {index.d} dimensions for {len(ids)} ids")
            table = IdTable(labels, ids)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, zipfile.BadZipFile) as exc:
            raise DataFormatError(path, f"unreadable FAISS index file: {exc}") from None
        self._index = index
        self._structure = settings["structure"]
        self._next_label = int(settings["next_label"])
        self._ids = table
        self._bias_by_label = np.empty(0, dtype=np.float32)
        if self.bias_column and self._structure == "ivfpq":  # saved apart
            self._set_biases(labels, biases)
        elif self.bias_column and self._index.ntotal:  # flat and HNSW: their rows' last column (masked ones too)
            self._set_biases(faiss.vector_to_array(self._index.id_map).astype(np.int64), self._storage()[:, -1])
        self._dead = set(dead)
        self._trained_on = int(settings.get("trained_on", 0))
        if self._structure == "hnsw":
            faiss.downcast_index(self._index.index).hnsw.efSearch = self.ef_search
        elif self._structure == "ivfpq":
            ivf = faiss.extract_index_ivf(self._index)
            ivf.nprobe = self._probes(ivf.nlist)
