"""The vector-index interface and its exact chunked scan (the embedded catalog's FAISS implementation:
``reelsearch.index.embedded.vectors``).

Every index stores one vector per string id and scores by inner product; with unit-norm vectors (the joint-space
encoders' output) that is cosine similarity. ``add`` is an upsert: an id added again replaces its vector.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial

import numpy as np

from reelsearch.errors import ReelsearchError

#: score_fn(queries [Q, D], vectors [N, D]) -> scores [Q, N], higher is better (e.g. order similarity).
ScoreFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def inner_product_score(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """The exact scan's default ``ScoreFn``: q . v for every pair (cosine similarity on unit-norm vectors)."""
    return np.asarray(queries, np.float32) @ np.asarray(vectors, np.float32).T

#: Rows per block of the exact scan (16 Ki rows x 1024 dims x 4 bytes = 64 MiB).
SCAN_CHUNK_ROWS = 16384


class VectorIndexError(ReelsearchError):
    """A vector index cannot do what was asked (wrong dimension, unreadable file, unreachable server)."""


def as_matrix(vectors, dim: int, what: str = "vectors") -> np.ndarray:
    """``vectors`` as a C-contiguous float32 [N, dim] array (a single [dim] vector becomes [1, dim])."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise VectorIndexError(f"{what}: expected shape [N, {dim}], got {tuple(np.shape(vectors))}")
    if not np.isfinite(arr).all():
        raise VectorIndexError(f"{what}: contains NaN or infinite values")
    return np.ascontiguousarray(arr)


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Column indices [Q, k] and scores [Q, k] of the k largest entries per row, best first (ties: lower index)."""
    k = min(k, scores.shape[1])
    if k == 0:
        return np.empty((scores.shape[0], 0), np.int64), np.empty((scores.shape[0], 0), np.float32)
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -part_scores), axis=1)
    idx = np.take_along_axis(part, order, axis=1)
    return idx, np.take_along_axis(scores, idx, axis=1)


class VectorIndex(ABC):
    """One vector per string id; inner-product search; exact scan with any score function; persistence."""

    dim: int

    @abstractmethod
    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Insert or replace the vectors [N, D] of ``ids``."""

    @abstractmethod
    def remove(self, ids: Sequence[str]) -> int:
        """Remove ``ids`` (absent ids are ignored); returns how many were present."""

    @abstractmethod
    def search(self, queries: np.ndarray, k: int) -> tuple[list[list[str]], np.ndarray]:
        """Top-k ids per query (best first, fewer when the index is smaller) and scores [Q, k] (-inf padded)."""

    @abstractmethod
    def get(self, ids: Sequence[str]) -> np.ndarray:
        """Vectors [N, D] of ``ids`` in that order; a missing id raises KeyError."""

    @abstractmethod
    def iter_chunks(self, rows: int = SCAN_CHUNK_ROWS) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every (ids, vectors [n, D]) in blocks of at most ``rows``."""

    @abstractmethod
    def __len__(self) -> int: ...

    def save(self) -> None:  # noqa: B027 - optional hook
        """Make the current state durable (no-op where every write already is)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files and connections."""

    def __contains__(self, id_: str) -> bool:
        try:
            self.get([id_])
        except KeyError:
            return False
        return True

    def scan(
        self, queries: np.ndarray, k: int, score_fn: ScoreFn, rows: int = SCAN_CHUNK_ROWS
    ) -> tuple[list[list[str]], np.ndarray]:
        """Exact top-k under ``score_fn`` (for similarities an ANN index cannot serve, e.g. order similarity).

        Scans every stored vector in blocks of ``rows``, keeping a running top-k per query, so memory stays
        bounded by one block's scores. Same return convention as :meth:`search`.
        """
        return scan_chunks(self.iter_chunks(rows), as_matrix(queries, self.dim, "queries"), k, score_fn)


def with_biases(chunks: Iterable[tuple[list[str], np.ndarray]], biases: Callable[[list[str]], np.ndarray],
                score_fn: ScoreFn) -> tuple[Iterable[tuple[list[str], np.ndarray]], ScoreFn]:
    """(``chunks`` with each block's ``biases(ids)`` as one more column, a score function that adds it to
    ``score_fn``'s): what :func:`scan_chunks` takes to rank by score + bias."""
    return (((ids, np.column_stack([rows, biases(ids)]).astype(np.float32)) for ids, rows in chunks),
            plus_bias(score_fn))


def plus_bias(score_fn: ScoreFn) -> ScoreFn:
    """``score_fn`` of rows whose last column is their bias, plus that bias (blocks made as :func:`with_biases`
    makes them)."""
    return partial(_plus_bias, score_fn)


def _plus_bias(score_fn: ScoreFn, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``score_fn`` of rows whose last column is their bias, plus that bias."""
    return score_fn(queries, rows[:, :-1]) + rows[:, -1]


def scan_chunks(chunks: Iterable[tuple[list[str], np.ndarray]], queries: np.ndarray, k: int,
                score_fn: ScoreFn) -> tuple[list[list[str]], np.ndarray]:
    """Exact top-k of ``queries`` [Q, D] under ``score_fn`` over ``chunks`` of (ids, vectors [m, D]), keeping a running
    top-k per query (memory: one block's scores); the convention of :meth:`VectorIndex.search`."""
    q = queries
    best_scores = np.full((len(q), 0), -np.inf, np.float32)
    best_ids: list[list[str]] = [[] for _ in range(len(q))]
    for ids, block in chunks:
        s = np.asarray(score_fn(q, block), dtype=np.float32)
        if s.shape != (len(q), len(ids)):
            raise VectorIndexError(f"score_fn returned shape {s.shape}, expected {(len(q), len(ids))}")
        idx, scores = top_k(s, k)  # the block's own top-k, then merged with the running one
        merged_ids = [b + [ids[j] for j in row] for b, row in zip(best_ids, idx.tolist(), strict=True)]
        order, best_scores = top_k(np.concatenate([best_scores, scores], axis=1), k)
        best_ids = [[m[j] for j in row] for m, row in zip(merged_ids, order.tolist(), strict=True)]
    return pad_results(best_ids, best_scores, len(q), k)


def pad_results(ids: list[list[str]], scores: np.ndarray, q: int, k: int) -> tuple[list[list[str]], np.ndarray]:
    """A search's (ids, scores [q, k]): scores past the ids found padded with -inf."""
    out = np.full((q, k), -np.inf, np.float32)
    out[:, : scores.shape[1]] = scores[:, :k]
    return ids, out
