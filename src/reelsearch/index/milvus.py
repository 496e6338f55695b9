"""The vector-index interface on Milvus: Milvus Lite for a local file URI, a Milvus server or cluster for a URL.

``MilvusIndex("./vectors.db", ...)`` runs Milvus Lite embedded in this process (one process per file);
``MilvusIndex("http://host:19530", token=...)`` talks to a server. The code path is the same (pymilvus
``MilvusClient``); only the URI differs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError
from reelsearch.index.vectors import SCAN_CHUNK_ROWS, VectorIndex, VectorIndexError, _pad, as_matrix

_REMOTE = re.compile(r"^(https?|tcp|grpc|unix)://", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
#: Max id length (VARCHAR primary key).
MAX_ID_LENGTH = 512
_BATCH_BYTES = 16 << 20  # stay well below Milvus' 64 MB per insert / query


def is_remote_uri(uri: str) -> bool:
    """True for a server URL (http://, https://, tcp://, ...), False for a Milvus Lite file path."""
    return bool(_REMOTE.match(str(uri)))


class MilvusIndex(VectorIndex):
    """One Milvus collection ``{id: VARCHAR primary key, vec: FLOAT_VECTOR(dim)}`` searched by inner product.

    ``index_type`` is any Milvus vector index ("HNSW" by default, with ``M`` / ``efConstruction`` and search
    ``ef`` as in :class:`FaissIndex`; "FLAT" for exact search; "IVF_FLAT", "AUTOINDEX" on a cluster). Writes use
    strong consistency, so a search right after ``add`` sees the new vectors. An existing collection of another
    dimension raises :class:`VectorIndexError` unless ``recreate=True``.
    """

    def __init__(
        self,
        uri: str | Path,
        collection: str = "reelsearch",
        dim: int = 0,
        *,
        token: str | None = None,
        index_type: str = "HNSW",
        hnsw_m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 128,
        nlist: int = 1024,
        nprobe: int = 32,
        recreate: bool = False,
    ):
        try:
            from pymilvus import DataType, MilvusClient  # noqa: PLC0415 - optional package (index extra)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise VectorIndexError(f"the Milvus backend needs pymilvus (and milvus-lite for a file): {exc}") from None
        if not _NAME.match(collection):
            raise ConfigError(f"Milvus collection name {collection!r}: letters, digits and _ only, not a digit first")
        if dim < 1:
            raise ConfigError(f"dim must be >= 1, got {dim}")
        self.uri = str(uri)
        self.collection = collection
        self.dim = int(dim)
        self.index_type = index_type.upper()
        self._batch_rows = max(1, _BATCH_BYTES // (4 * self.dim + MAX_ID_LENGTH))
        self._search_params = {"metric_type": "IP", "params": {}}
        if self.index_type == "HNSW":
            self._search_params["params"] = {"ef": int(ef_search)}
        elif self.index_type.startswith("IVF"):
            self._search_params["params"] = {"nprobe": int(nprobe)}
        if not is_remote_uri(self.uri):
            Path(self.uri).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.uri = str(Path(self.uri).expanduser())
        try:
            self._client = MilvusClient(uri=self.uri, token=token or "")
        except Exception as exc:  # pymilvus raises its own exception types; milvus-lite may fail to start
            raise VectorIndexError(f"cannot open Milvus at {self.uri}: {exc}") from None
        if self._client.has_collection(collection):
            have = self._collection_dim()
            if have != self.dim and not recreate:
                raise VectorIndexError(
                    f"Milvus collection {collection!r} at {self.uri} holds {have}-dimensional vectors, not {self.dim}"
                )
            if recreate:
                self._client.drop_collection(collection)
        if not self._client.has_collection(collection):
            schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
            schema.add_field("vec", DataType.FLOAT_VECTOR, dim=self.dim)
            params = self._client.prepare_index_params()
            build = {}
            if self.index_type == "HNSW":
                build = {"M": int(hnsw_m), "efConstruction": int(ef_construction)}
            elif self.index_type.startswith("IVF"):
                build = {"nlist": int(nlist)}
            params.add_index(field_name="vec", index_type=self.index_type, metric_type="IP", params=build)
            self._client.create_collection(collection, schema=schema, index_params=params, consistency_level="Strong")
        else:
            self._client.load_collection(collection)

    def _collection_dim(self) -> int:
        info = self._client.describe_collection(self.collection)
        for field in info.get("fields", []):
            if field.get("name") == "vec":
                return int(field.get("params", {}).get("dim", 0))
        return 0

    def _batches(self, n: int) -> Iterator[slice]:
        step = self._batch_rows
        for start in range(0, n, step):
            yield slice(start, min(n, start + step))

    def __len__(self) -> int:
        res = self._client.query(self.collection, filter="", output_fields=["count(*)"])
        return int(res[0]["count(*)"])

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        ids = [str(i) for i in ids]
        x = as_matrix(vectors, self.dim)
        if len(ids) != len(x):
            raise VectorIndexError(f"{len(ids)} ids but {len(x)} vectors")
        too_long = [i for i in ids if len(i.encode()) > MAX_ID_LENGTH]
        if too_long:
            raise VectorIndexError(f"ids longer than {MAX_ID_LENGTH} bytes: {too_long[:3]}")
        last = {id_: i for i, id_ in enumerate(ids)}  # an id repeated in one call: the last vector wins
        keep = sorted(last.values())
        for sl in self._batches(len(keep)):
            rows = [{"id": ids[i], "vec": x[i]} for i in keep[sl]]
            self._client.upsert(self.collection, rows)

    def remove(self, ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(str(i) for i in ids))
        removed = 0
        for sl in self._batches(len(ids)):
            present = self._client.query(self.collection, ids=ids[sl], output_fields=["id"])
            if present:
                self._client.delete(self.collection, ids=[r["id"] for r in present])
                removed += len(present)
        return removed

    def search(self, queries: np.ndarray, k: int) -> tuple[list[list[str]], np.ndarray]:
        q = as_matrix(queries, self.dim, "queries")
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        res = self._client.search(
            self.collection, data=list(q), limit=int(k), output_fields=[], search_params=self._search_params
        )
        ids = [[str(hit["id"]) for hit in hits] for hits in res]
        scores = np.full((len(q), k), -np.inf, np.float32)
        for row, hits in enumerate(res):
            scores[row, : len(hits)] = [hit["distance"] for hit in hits]
        return _pad(ids, scores, len(q), k)

    def get(self, ids: Sequence[str]) -> np.ndarray:
        ids = [str(i) for i in ids]
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(ids))
        for sl in self._batches(len(unique)):
            for row in self._client.query(self.collection, ids=unique[sl], output_fields=["id", "vec"]):
                found[row["id"]] = np.asarray(row["vec"], np.float32)
        missing = [i for i in ids if i not in found]
        if missing:
            raise KeyError(missing[0])
        return np.stack([found[i] for i in ids]) if ids else np.empty((0, self.dim), np.float32)

    def iter_chunks(self, rows: int = SCAN_CHUNK_ROWS) -> Iterator[tuple[list[str], np.ndarray]]:
        batch = min(rows, self._batch_rows)
        it = self._client.query_iterator(self.collection, batch_size=batch, output_fields=["id", "vec"])
        try:
            while True:
                block = it.next()
                if not block:
                    return
                yield [r["id"] for r in block], np.asarray([r["vec"] for r in block], np.float32)
        finally:
            it.close()

    def ids(self) -> list[str]:
        """Every stored id."""
        out: list[str] = []
        it = self._client.query_iterator(self.collection, batch_size=16384, output_fields=["id"])
        try:
            while block := it.next():
                out.extend(r["id"] for r in block)
        finally:
            it.close()
        return out

    def save(self) -> None:
        self._client.flush(self.collection)

    def wait_indexed(self, timeout: float = 600.0) -> bool:
        """Flush and wait until Milvus has built the vector index over every row (True), or ``timeout`` s passed.

        Rows not yet indexed are searched by brute force, which is exact but slow at scale.
        """
        self.save()
        deadline = time.monotonic() + timeout
        while True:
            info = self._client.describe_index(self.collection, "vec")
            if int(info.get("pending_index_rows", 0)) == 0 and int(info.get("indexed_rows", 0)) >= int(
                    info.get("total_rows", 0)):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)

    def drop(self) -> None:
        """Delete the whole collection (irreversible)."""
        self._client.drop_collection(self.collection)

    def close(self) -> None:
        self._client.close()
