"""`reelsearch features ...`: inspect feature stores, import precomputed features, merge stores."""

from __future__ import annotations

import json
from pathlib import Path

import typer

FORMAT_HELP = "npy-dir | npz | hdf5 | npy-matrix (default: from SRC: folder, .npz, .h5/.hdf5, .npy)"


def register(app: typer.Typer) -> None:
    """Add the `features` command group to ``app``."""
    features = typer.Typer(
        help="Feature stores: inspect them, import precomputed features, merge stores.", no_args_is_help=True
    )
    app.add_typer(features, name="features")

    @features.command("info")
    def info(
        store: Path = typer.Argument(..., help="Feature store directory."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON: {modalities: {name: {items, dim, ...}}}."),
    ) -> None:
        """Show the modalities of a feature store: items, dimension, storage dtype, size."""
        from reelsearch.features.store import FeatureStore

        data = FeatureStore(store, create=False).info()
        if as_json:
            typer.echo(json.dumps(data, indent=2))
            return
        typer.echo(_table(store, data["modalities"]))

    @features.command("import")
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
        if as_json:
            summary = {
                "modality": report.modality,
                "dim": report.dim,
                "total": report.total,
                "imported": report.imported,
                "skipped": report.skipped,
                "bad": [{"source": p.source, "id": p.id, "problem": p.problem} for p in report.bad],
            }
            typer.echo(json.dumps(summary, indent=2))
        else:
            typer.echo(
                f"{out}: {modality!r} [T, {report.dim}]: imported {report.imported}, "
                f"already there {report.skipped}, bad {len(report.bad)}"
            )
        if report.bad:
            from reelsearch.errors import EXIT_PARTIAL_FAILURE

            raise typer.Exit(EXIT_PARTIAL_FAILURE)

    @features.command("merge")
    def merge(
        dest: Path = typer.Argument(..., help="Destination store (created if missing)."),
        sources: list[Path] = typer.Argument(..., help="Stores to merge, e.g. one per extraction rank."),
    ) -> None:
        """Merge feature stores (e.g. written by distributed extraction ranks) into one; resumes."""
        from reelsearch.features.store import FeatureStore

        added = FeatureStore.merge(sources, dest, progress=True)
        for modality, n in added.items():
            typer.echo(f"{dest}: {modality!r}: added {n}")


def _made_by(recipe: dict | None) -> str:
    """A feature recipe in a few words (or "unrecorded")."""
    if not recipe:
        return "unrecorded"
    from reelsearch.config.recipe import ModalityRecipe
    from reelsearch.config.typed import from_dict

    return from_dict(ModalityRecipe, recipe).describe()


def _table(store: Path, modalities: dict) -> str:
    if not modalities:
        return f"{store}: no modalities"
    head = ("modality", "items", "dim", "dtype", "rows", "segments", "MiB", "finalized", "made by")
    rows = [
        (name, m["items"], m["dim"], m["dtype"], m["rows"], m["segments"], f"{m['bytes'] / 2**20:.1f}",
         "yes" if m["finalized"] else "no", _made_by(m.get("recipe")))
        for name, m in modalities.items()
    ]  # fmt: skip
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"{store}"] + [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]
    ]
    return "\n".join(lines)
