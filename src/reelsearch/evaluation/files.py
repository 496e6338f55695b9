"""Metrics of stored files: a similarity matrix (.npy, read memory-mapped) and its ground truth (JSON), each checked
with errors naming the file (``reelsearch metrics``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from reelsearch.errors import DataFormatError, EvaluationInputError
from reelsearch.evaluation.positives import Positives
from reelsearch.evaluation.ranking import rank_metrics


def file_metrics(sims: Path, gt: Path, chunk_size: int | None = None, memory_mb: float = 512.0,
                 device: str | None = None) -> dict:
    """``rank_metrics`` of the matrix at ``sims`` against the ground truth at ``gt``; bad input is a DataFormatError
    naming the file at fault."""
    matrix = load_sims(sims)
    positives = load_gt(gt, matrix.shape)
    try:
        return rank_metrics(matrix, positives, chunk_size, memory_mb, device=device)
    except EvaluationInputError as exc:
        raise DataFormatError(gt if exc.subject == "positives" else sims, exc.problem) from None


def load_sims(path: Path) -> np.ndarray:
    """The similarity matrix of ``path`` (memory-mapped), checked to be a 2-D numeric matrix."""
    if not path.is_file():
        raise DataFormatError(path, "file not found")
    with open(path, "rb") as fh:
        if fh.read(6) != b"\x93NUMPY":
            raise DataFormatError(path, "not a .npy file (it lacks the NUMPY header; save it with numpy.save)")
    try:
        matrix = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataFormatError(path, f"not a readable .npy matrix ({exc})") from None
    if not isinstance(matrix, np.ndarray):
        raise DataFormatError(path, "expected a .npy matrix, got an archive (.npz)")
    if matrix.ndim != 2:
        raise DataFormatError(path, f"expected a 2-D [queries x gallery] matrix, got shape {matrix.shape}")
    if matrix.dtype.kind not in "fiub":
        raise DataFormatError(path, f"expected numbers, got dtype {matrix.dtype}")
    if 0 in matrix.shape:
        raise DataFormatError(path, f"the matrix is empty (shape {matrix.shape})")
    return matrix


def load_gt(path: Path, shape: tuple[int, int]) -> Positives:
    """The ground truth of ``path`` as ``Positives`` for a [queries x gallery] matrix of ``shape``."""
    if not path.is_file():
        raise DataFormatError(path, "file not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, f"not UTF-8 text: {exc}") from None
    if not isinstance(data, dict):
        raise DataFormatError(path, f"expected a JSON object mapping query index -> list, got {type(data).__name__}")
    try:
        return Positives.from_any(data, n_queries=shape[0], n_gallery=shape[1])
    except EvaluationInputError as exc:
        raise DataFormatError(path, f"{exc.problem} (the similarity matrix is {shape[0]} x {shape[1]})") from None
