"""`reelsearch features ...`: inspect feature stores, import precomputed features, merge stores."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from reelsearch.cli.options import show_progress
from reelsearch.errors import EXIT_PARTIAL_FAILURE

app = typer.Typer(name="features", help="Feature stores: inspect them, import precomputed features, merge stores.",
                  no_args_is_help=True)
FORMAT_HELP = "npy-dir | npz | hdf5 | npy-matrix (default: from SRC: folder, .npz, .h5/.hdf5, .npy)"


@app.command("info")
def info(
    store: Path = typer.Argument(..., help="Feature store directory."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {modalities: {name: {items, dim, ...}}}."),
) -> None:
    """Show the modalities of a feature store: items, dimension, storage dtype, size."""
    from reelsearch.features.store import FeatureStore

    features = FeatureStore(store, create=False)
    typer.echo(json.dumps(features.info(), indent=2) if as_json else features.info_table())


@app.command("import")
def import_(
    src: Path = typer.Argument(..., help="Folder of <id>.npy, an .npz, an HDF5 file, or an [N, (T,) D] .npy."),
    out: Path = typer.Option(..., "--out", "-o", help="Feature store directory (created if missing)."),
    modality: str = typer.Option(..., "--modality", "-m", help="Modality name: appearance, motion, audio, ..."),
    extractor: str = typer.Option(..., "--extractor", help="What made the features (i3d, clip-vit-b32, "
                                  "resnet152, ...): recorded as their recipe; a model reading them names the same "
                                  "extractor in features.video.<modality>.extractor."),
    fmt: str = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    ids: Path = typer.Option(None, "--ids", help="Ids file (one per line): npy-matrix row order; else a filter."),
    dim: int = typer.Option(None, "--dim", help="Expected feature dimension D (default: the most common)."),
    dtype: str = typer.Option(None, "--dtype", help="Storage dtype float16 (default) or float32."),
    dataset: str = typer.Option(None, "--dataset", help="HDF5: the dataset to take from each per-id group."),
    strip_padding: bool = typer.Option(False, "--strip-zero-padding", help="Drop trailing all-zero rows."),
    finalize: bool = typer.Option(True, "--finalize/--no-finalize", help="Compact the store at the end."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Import precomputed features into a store; resumes (ids already there are skipped).

    Bad entries are listed on stderr with their file and id, the rest is imported; the exit status is then 3.
    """
    from reelsearch.features.importers import import_features

    report = import_features(
        src, out, modality, fmt=fmt, ids=ids, dim=dim, dtype=dtype, dataset=dataset,
        strip_padding=strip_padding, finalize=finalize, extractor=extractor,
    )  # fmt: skip
    for problem in report.bad:
        typer.echo(f"bad entry: {problem}", err=True)
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.line(out))
    if report.bad:
        raise typer.Exit(EXIT_PARTIAL_FAILURE)


@app.command("merge")
def merge(
    dest: Path = typer.Argument(..., help="Destination store (created if missing)."),
    sources: list[Path] = typer.Argument(..., help="Stores to merge, e.g. one per extraction rank."),
) -> None:
    """Merge feature stores (e.g. written by distributed extraction ranks) into one; resumes."""
    from reelsearch.features.store import FeatureStore

    added = FeatureStore.merge(sources, dest, progress=show_progress())
    for modality, n in added.items():
        typer.echo(f"{dest}: {modality!r}: added {n}")
