"""`reelsearch metrics`: retrieval metrics of a stored similarity matrix against a ground-truth file."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer()


@app.command("metrics")
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
    from reelsearch.evaluation import format_table
    from reelsearch.evaluation.files import file_metrics

    result = file_metrics(sims, gt, chunk_size, memory_mb, device=device)
    typer.echo(json.dumps(result) if as_json else format_table(result))
