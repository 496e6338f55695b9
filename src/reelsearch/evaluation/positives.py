"""Ground truth of a ranking problem: for each query, the indices of its correct gallery items (CSR form)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from reelsearch.errors import EvaluationInputError


def _fail(problem: str) -> EvaluationInputError:
    return EvaluationInputError(problem, subject="positives")


@dataclass(frozen=True)
class Positives:
    """Correct gallery items per query: query ``q`` owns ``indices[indptr[q]:indptr[q + 1]]`` (sorted, unique)."""

    indptr: np.ndarray  # int64 [n_queries + 1]
    indices: np.ndarray  # int64 [n_pairs]
    n_gallery: int

    @property
    def n_queries(self) -> int:
        return len(self.indptr) - 1

    @property
    def counts(self) -> np.ndarray:
        """Number of correct items of each query."""
        return np.diff(self.indptr)

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(query, gallery) index arrays of every correct pair, in query order."""
        return np.repeat(np.arange(self.n_queries), self.counts), self.indices

    @classmethod
    def from_pairs(cls, queries: np.ndarray, gallery: np.ndarray, n_queries: int, n_gallery: int) -> Positives:
        """Build from (query, gallery) pairs; duplicates are dropped; every query must have one pair at least."""
        queries = np.asarray(queries, dtype=np.int64)
        gallery = np.asarray(gallery, dtype=np.int64)
        if queries.size:
            bad_q = (queries < 0) | (queries >= n_queries)
            if bad_q.any():
                i = int(np.flatnonzero(bad_q)[0])
                raise _fail(f"query index {int(queries[i])} is out of range: there are {n_queries} queries")
            bad_g = (gallery < 0) | (gallery >= n_gallery)
            if bad_g.any():
                i = int(np.flatnonzero(bad_g)[0])
                raise _fail(
                    f"query {int(queries[i])}: gallery index {int(gallery[i])} is out of range "
                    f"(gallery has {n_gallery} items, indices 0..{n_gallery - 1})"
                )
        order = np.lexsort((gallery, queries))
        queries, gallery = queries[order], gallery[order]
        keep = np.ones(len(queries), dtype=bool)
        keep[1:] = (queries[1:] != queries[:-1]) | (gallery[1:] != gallery[:-1])
        queries, gallery = queries[keep], gallery[keep]
        counts = np.bincount(queries, minlength=n_queries)
        if n_queries and (counts == 0).any():
            missing = np.flatnonzero(counts == 0)
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise _fail(f"query {int(missing[0])} has no correct gallery item{more}")
        indptr = np.zeros(n_queries + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(indptr=indptr, indices=gallery, n_gallery=n_gallery)

    @classmethod
    def from_any(cls, positives, n_queries: int | None, n_gallery: int) -> Positives:
        """Accept a list of lists, a dict (str or int query -> list), a 1-D int array (one item each) or Positives.

        ``n_queries=None`` takes it from ``positives`` (list length, or largest dict key + 1).
        """
        if isinstance(positives, Positives):
            if n_queries is not None and positives.n_queries != n_queries:
                raise _fail(f"ground truth has {positives.n_queries} queries, the scores have {n_queries}")
            if positives.n_gallery != n_gallery:
                raise _fail(f"ground truth is for {positives.n_gallery} gallery items, the scores have {n_gallery}")
            return positives
        if isinstance(positives, np.ndarray) and positives.ndim == 1:
            if not np.issubdtype(positives.dtype, np.integer):
                raise _fail(f"a 1-D positives array must hold integers, got dtype {positives.dtype}")
            n = len(positives) if n_queries is None else n_queries
            if len(positives) != n:
                raise _fail(f"positives has {len(positives)} entries, the scores have {n} queries")
            return cls.from_pairs(np.arange(len(positives)), positives, n, n_gallery)
        if isinstance(positives, Mapping):
            keys = {}
            for key in positives:
                q = _query_index(key)
                if q in keys:
                    raise _fail(f"query {q} appears twice in the ground truth (keys {keys[q]!r} and {key!r})")
                keys[q] = key
            if n_queries is None:
                n_queries = max(keys) + 1 if keys else 0
            extra = sorted(k for k in keys if k >= n_queries)
            if extra:
                raise _fail(f"query {extra[0]} in the ground truth is out of range: there are {n_queries} queries")
            missing = [q for q in range(n_queries) if q not in keys]
            if missing:
                more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
                raise _fail(f"query {missing[0]} has no entry in the ground truth{more}")
            lists = [positives[keys[q]] for q in range(n_queries)]
        elif isinstance(positives, Sequence) or isinstance(positives, np.ndarray):
            lists = list(positives)
            if n_queries is None:
                n_queries = len(lists)
            if len(lists) != n_queries:
                raise _fail(f"ground truth has {len(lists)} queries, the scores have {n_queries}")
        else:
            raise _fail(f"positives must be a list of lists, a dict or an int array, got {type(positives).__name__}")
        sizes = np.empty(n_queries, dtype=np.int64)
        flat: list[int] = []
        for q, items in enumerate(lists):
            items = _index_list(items, q)
            sizes[q] = len(items)
            flat.extend(items)
        return cls.from_pairs(np.repeat(np.arange(n_queries), sizes), np.asarray(flat, np.int64), n_queries, n_gallery)

    def transpose(self) -> Positives:
        """The same pairs with the roles swapped: gallery items become the queries."""
        q, g = self.pairs()
        return Positives.from_pairs(g, q, self.n_gallery, self.n_queries)


def _query_index(key) -> int:
    if isinstance(key, bool):
        raise _fail(f"ground-truth key {key!r} is not a query index")
    if isinstance(key, (int, np.integer)):
        return int(key)
    try:
        return int(str(key).strip())
    except ValueError:
        raise _fail(f'ground-truth key {key!r} is not a query index (expected an integer such as "0")') from None


def _index_list(items, q: int) -> list[int]:
    if isinstance(items, np.ndarray):
        items = items.tolist()
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise _fail(f"query {q}: expected a list of gallery indices, got {type(items).__name__}")
    out = []
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise _fail(f"query {q}: gallery index {x!r} is not an integer")
        out.append(int(x))
    if not out:
        raise _fail(f"query {q} has no correct gallery item")
    return out
