"""Score functions for exact scans: ``fn(queries [Q, D], vectors [N, D]) -> scores [Q, N]``, higher is better."""

from __future__ import annotations

import warnings

import numpy as np

from reelsearch.index.vectors import ScoreFn


def inner_product_score(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """q . v for every pair (cosine similarity on unit-norm vectors)."""
    return np.asarray(queries, np.float32) @ np.asarray(vectors, np.float32).T


def order_score_fn(chunk_size: int | None = None, single_thread_queries: int = 4) -> ScoreFn:
    """Order-violation similarity -||max(0, q - v)||^2 (Torabi et al. 2016, eq. 3), queries being captions.

    Uses :func:`reelsearch.models.similarity.order_similarity` (tiled, bounded memory) without gradients. Up to
    ``single_thread_queries`` queries are scored on one torch thread: the tiles of a single query are too small
    to share, and on a loaded 2-core machine two threads took 715 ms where one took 15 ms (10,000 x 1024).
    torch's thread count is process-wide: it is set for the call and restored, so concurrent callers in other
    threads may briefly see one thread.
    """
    import torch

    from reelsearch.models.similarity import DEFAULT_CHUNK_ELEMENTS, order_similarity

    size = chunk_size or DEFAULT_CHUNK_ELEMENTS

    def score(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():  # read-only views of the index are only read here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            q = torch.from_numpy(np.ascontiguousarray(queries, np.float32))
            v = torch.from_numpy(np.ascontiguousarray(vectors, np.float32))
        before = torch.get_num_threads()
        if len(q) <= single_thread_queries:
            torch.set_num_threads(1)
        try:
            with torch.no_grad():
                return order_similarity(q, v, chunk_size=size).numpy()
        finally:
            torch.set_num_threads(before)

    return score
