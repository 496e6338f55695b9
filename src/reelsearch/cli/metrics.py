"""`reelsearch metrics`: retrieval metrics of a stored similarity matrix against a ground-truth file."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def metrics(
    sims: Path = typer.Option(
        ..., "--sims", help="Similarity matrix, queries x gallery, as .npy (read memory-mapped)."
    ),
    gt: Path = typer.Option(
        ..., "--gt", help='JSON object: query index (a string, "0") -> list of its correct gallery indices.'
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    chunk_size: int | None = typer.Option(None, min=1, help="Queries per chunk (default: fit --memory-mb)."),
    memory_mb: float = typer.Option(512.0, min=1.0, help="Working-memory budget in MiB."),
    device: str | None = typer.Option(None, help="cpu, cuda, ... (default: a GPU when present, else cpu)."),
) -> None:
    """R@1/5/10/50, MedR, MeanR and mAP of one retrieval direction (ties count against the model)."""
    from reelsearch.errors import DataFormatError
    from reelsearch.evaluation import EvaluationInputError, format_table, rank_metrics

    matrix = load_sims(sims)
    positives = load_gt(gt, matrix.shape)
    try:
        result = rank_metrics(matrix, positives, chunk_size, memory_mb, device=device)
    except EvaluationInputError as exc:
        raise DataFormatError(gt if exc.subject == "positives" else sims, exc.problem) from None
    typer.echo(json.dumps(result) if as_json else format_table(result))


def load_sims(path: Path):
    """The similarity matrix of ``path`` (memory-mapped), checked to be a 2-D numeric matrix."""
    import numpy as np

    from reelsearch.errors import DataFormatError

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


def load_gt(path: Path, shape: tuple[int, int]):
    """The ground truth of ``path`` as ``Positives`` for a [queries x gallery] matrix of ``shape``."""
    from reelsearch.errors import DataFormatError
    from reelsearch.evaluation import EvaluationInputError, Positives

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


def register(app: typer.Typer) -> None:
    """Add the `metrics` command to ``app``."""
    app.command("metrics")(metrics)
