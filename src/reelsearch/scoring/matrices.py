"""Score matrices however they are given (``ScoreSource``): an array, a memmap, a torch tensor or a row-computing
callable; and scores computed on demand from embeddings (``EmbeddingScores``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from reelsearch.errors import EvaluationInputError

RowFunction = Callable[[slice], Any]


def work_dtype(dtype) -> np.dtype:
    """The dtype scores are compared in: float32/float64 as given, half floats widened, integers as float64.

    Every conversion is exact, so no ties are created or broken.
    """
    dtype = np.dtype(dtype)
    if dtype in (np.float32, np.float64):
        return dtype
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype.kind in "biu":
        return np.dtype(np.float64)
    if dtype.kind == "f":  # longdouble
        return np.dtype(np.float64)
    raise EvaluationInputError(f"scores must be numbers, got dtype {dtype}", subject="scores")


def _torch():
    """The torch module when it is already imported (an object can only be a tensor then), else None."""
    return sys.modules.get("torch")


def _to_numpy(x) -> np.ndarray:
    """A numpy view (or copy, for torch tensors off the CPU or in bfloat16) of ``x``."""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.cpu().numpy()
    return np.asarray(x)


class ScoreSource:
    """Uniform access to score rows: ``rows(r0, r1)`` and, for stored matrices, ``gather(rows, cols)``."""

    def __init__(self, sims, n_rows: int | None = None):
        self._fn: RowFunction | None = None
        self._matrix = None
        if isinstance(sims, (list, tuple)):
            sims = np.asarray(sims)
        if callable(sims) and not (hasattr(sims, "ndim") and hasattr(sims, "__getitem__")):
            self._fn = sims
            probe = sims(slice(0, 1))
            if getattr(probe, "ndim", None) != 2 or probe.shape[0] != 1:
                raise EvaluationInputError(
                    f"a score function must return a [rows, gallery] matrix; for rows 0:1 it gave shape "
                    f"{tuple(getattr(probe, 'shape', ()))}",
                    subject="scores",
                )
            shape = getattr(sims, "shape", None)
            if shape is not None:
                n_rows = int(shape[0])
            if n_rows is None:
                raise EvaluationInputError("the number of rows of a score function is unknown", subject="scores")
            self.shape = (n_rows, int(probe.shape[1]))
            self.dtype = _dtype_of(probe)
            self.on_torch_device = _torch_device(probe)
        else:
            if getattr(sims, "ndim", None) != 2:
                raise EvaluationInputError(
                    f"scores must be a 2-D [queries x gallery] matrix, got shape {tuple(getattr(sims, 'shape', ()))}",
                    subject="scores",
                )
            self._matrix = sims
            self.shape = (int(sims.shape[0]), int(sims.shape[1]))
            self.dtype = _dtype_of(sims)
            self.on_torch_device = _torch_device(sims)
        self.work_dtype = work_dtype(self.dtype)

    @property
    def can_gather(self) -> bool:
        """True when single scores can be read without computing whole rows."""
        return self._matrix is not None

    def rows(self, r0: int, r1: int):
        """Score rows ``r0:r1`` as given by the source (numpy array or torch tensor)."""
        if self._fn is not None:
            out = self._fn(slice(r0, r1))
            if tuple(out.shape) != (r1 - r0, self.shape[1]):
                raise EvaluationInputError(
                    f"the score function gave shape {tuple(out.shape)} for rows {r0}:{r1}, "
                    f"expected {(r1 - r0, self.shape[1])}",
                    subject="scores",
                )
            return out
        return self._matrix[r0:r1]

    def gather(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Scores at (rows[i], cols[i]) as a numpy array of ``work_dtype``."""
        assert self._matrix is not None
        if self.on_torch_device is not None:
            import torch  # noqa: PLC0415 - torch inputs only: numpy metrics stay torch-free

            idx_r = torch.as_tensor(rows, device=self._matrix.device)
            idx_c = torch.as_tensor(cols, device=self._matrix.device)
            vals = _to_numpy(self._matrix[idx_r, idx_c])
        else:
            order = np.argsort(rows, kind="stable")  # row order reads a memmap front to back
            vals = np.empty(len(rows), dtype=self.dtype)
            vals[order] = np.asarray(self._matrix[rows[order], cols[order]])
        return vals.astype(self.work_dtype, copy=False)


def _dtype_of(x) -> np.dtype:
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            return np.dtype(np.float32)
        return np.dtype(str(x.dtype).removeprefix("torch."))
    return np.dtype(x.dtype)


def _torch_device(x):
    """The torch device of ``x`` when it is a torch tensor, else None."""
    torch = _torch()
    return x.device if torch is not None and isinstance(x, torch.Tensor) else None


class EmbeddingScores:
    """Score rows computed on demand from embeddings: ``rows -> queries[rows] @ gallery.T`` (a dot product).

    With L2-normalised embeddings (as the joint models produce) this is the cosine similarity. Works on numpy
    arrays or torch tensors (on any device); nothing of size queries x gallery is ever held.
    """

    def __init__(self, queries, gallery):
        if queries.ndim != 2 or gallery.ndim != 2 or queries.shape[1] != gallery.shape[1]:
            raise EvaluationInputError(
                f"embeddings must be [n, dim] with the same dim, got {tuple(queries.shape)} and {tuple(gallery.shape)}",
                subject="scores",
            )
        self.queries = queries
        # numpy's BLAS call is several times faster on a C-contiguous [dim, n] operand than on a transposed view
        self.gallery_t = np.ascontiguousarray(gallery.T) if isinstance(gallery, np.ndarray) else gallery.T
        self.shape = (int(queries.shape[0]), int(gallery.shape[0]))

    def __call__(self, rows: slice):
        return self.queries[rows] @ self.gallery_t

    def transposed(self) -> EmbeddingScores:
        """The scores of the transposed problem (gallery items as queries)."""
        return EmbeddingScores(self.gallery_t.T, self.queries)


def to_work_array(x, dtype: np.dtype, device=None):
    """Rows from a source as a numpy array in ``dtype`` (device None) or a torch tensor on ``device``."""
    if device is None:
        return _to_numpy(x).astype(dtype, copy=False)
    import torch  # noqa: PLC0415 - torch inputs only: numpy metrics stay torch-free

    if not isinstance(x, torch.Tensor):
        x = torch.from_numpy(np.ascontiguousarray(np.asarray(x)))
    return x.to(device=device, dtype=getattr(torch, dtype.name))
