"""Score functions for exact scans: ``fn(queries [Q, D], vectors [N, D]) -> scores [Q, N]``, higher is better.

The index is given them (``scan(..., score_fn)``, ``nearest(..., score_fn=...)``); the order similarity's is
:func:`reelsearch.similarity.order_score_fn`.
"""

from __future__ import annotations

import numpy as np


def inner_product_score(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """q . v for every pair (cosine similarity on unit-norm vectors)."""
    return np.asarray(queries, np.float32) @ np.asarray(vectors, np.float32).T
