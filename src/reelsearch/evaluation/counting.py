"""The inner kernel of every metric: how many gallery scores of each query reach each of its thresholds."""

from __future__ import annotations

import numpy as np

# Elements per block: a float32 block (512 KiB) and its mask stay in a core's L2 cache across the thresholds.
_BLOCK = 1 << 17
_BLOCK_COLS = 4096


def count_ge(X, T: np.ndarray, axis: int, valid_k: np.ndarray | None = None) -> np.ndarray:
    """``counts[q, j]`` = number of scores of query ``q`` in ``X`` that are >= ``T[q, j]`` (int64 [Q, K]).

    ``axis=1``: queries are the rows of ``X`` [Q, G]; ``axis=0``: queries are its columns, ``X`` is [N, Q] and the
    counts cover those N rows only (the caller sums over row chunks). ``T`` has the dtype of ``X``. ``valid_k[q]``
    (optional) says only ``T[q, :valid_k[q]]`` matter, so later thresholds may be skipped. ``X`` may be a torch
    tensor (then the counting runs on its device) or a numpy array.
    """
    if not isinstance(X, np.ndarray):
        return _count_ge_torch(X, T, axis)
    if axis == 1:
        return _count_rows(X, T, valid_k)
    return _count_cols(X, T, valid_k)


def _count_rows(X: np.ndarray, T: np.ndarray, valid_k: np.ndarray | None) -> np.ndarray:
    n, g = X.shape
    k_all = T.shape[1]
    out = np.zeros((n, k_all), dtype=np.int64)
    cb = min(g, _BLOCK_COLS)
    rb = max(1, _BLOCK // max(cb, 1))
    buf = np.empty((rb, cb), dtype=bool)
    for r0 in range(0, n, rb):
        r1 = min(n, r0 + rb)
        thr = T[r0:r1]
        kb = k_all if valid_k is None else int(valid_k[r0:r1].max())
        for c0 in range(0, g, cb):
            blk = X[r0:r1, c0 : c0 + cb]
            mask = buf[: blk.shape[0], : blk.shape[1]]
            for j in range(kb):
                np.greater_equal(blk, thr[:, j : j + 1], out=mask)
                out[r0:r1, j] += np.add.reduce(mask.view(np.uint8), axis=1, dtype=np.int32)
    return out


def _count_cols(X: np.ndarray, T: np.ndarray, valid_k: np.ndarray | None) -> np.ndarray:
    n, q = X.shape
    k_all = T.shape[1]
    Tt = np.ascontiguousarray(T.T)
    out = np.zeros((k_all, q), dtype=np.int64)
    cb = min(q, _BLOCK_COLS)
    rb = max(1, _BLOCK // max(cb, 1))
    buf = np.empty((rb, cb), dtype=bool)
    for c0 in range(0, q, cb):
        c1 = min(q, c0 + cb)
        kb = k_all if valid_k is None else int(valid_k[c0:c1].max())
        for r0 in range(0, n, rb):
            blk = X[r0 : r0 + rb, c0:c1]
            mask = buf[: blk.shape[0], : blk.shape[1]]
            for j in range(kb):
                np.greater_equal(blk, Tt[j, c0:c1], out=mask)
                out[j, c0:c1] += np.add.reduce(mask.view(np.uint8), axis=0, dtype=np.int32)
    return np.ascontiguousarray(out.T)


def _count_ge_torch(X, T: np.ndarray, axis: int) -> np.ndarray:
    import torch  # noqa: PLC0415 - torch inputs only: numpy metrics stay torch-free

    thr = torch.from_numpy(np.ascontiguousarray(T)).to(device=X.device, dtype=X.dtype)
    if axis == 1:
        cols = [(X >= thr[:, j : j + 1]).sum(1) for j in range(thr.shape[1])]
    else:
        cols = [(X >= thr[:, j][None, :]).sum(0) for j in range(thr.shape[1])]
    return torch.stack(cols, 1).cpu().numpy().astype(np.int64)
