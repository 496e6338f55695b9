"""`reelsearch data ...`: inspect datasets in their original formats."""

from __future__ import annotations

import json

import typer

data_app = typer.Typer(
    help="Inspect datasets (Flickr8k, COCO, MSR-VTT, MSVD, LSMDC, JSONL manifests).", no_args_is_help=True
)


@data_app.command("info")
def info(
    format: str = typer.Argument(..., help="flickr8k, flickr30k, coco, msrvtt, msvd, lsmdc or manifest."),
    root: str = typer.Argument(..., help="Dataset folder (or manifest / JSON file)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"splits": {name: {"items": N, "captions": M}}}.'),
    protocol: str | None = typer.Option(
        None, help="Split/caption protocol: msrvtt full|1k-a|9k|7k|miech; msvd all|5; coco/flickr official|karpathy."
    ),
    seed: int | None = typer.Option(None, help="Seed of random caption sampling (msvd --protocol 5)."),
) -> None:
    """Count the items and captions of every split of a dataset."""
    from reelsearch.datasets import load_dataset

    ds = load_dataset(format, root, protocol=protocol, seed=seed)
    summary = ds.info()
    if as_json:
        typer.echo(json.dumps(summary))
        return
    proto = f"  protocol {ds.protocol}" if ds.protocol else ""
    typer.echo(f"{ds.name}  {ds.root}{proto}")
    rows = [(name, c["items"], c["captions"]) for name, c in summary["splits"].items()]
    rows.append(("total", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    width = max(5, *(len(r[0]) for r in rows))
    typer.echo(f"{'split':<{width}}  {'items':>9}  {'captions':>9}")
    for name, n_items, n_caps in rows:
        typer.echo(f"{name:<{width}}  {n_items:>9,}  {n_caps:>9,}")


def register(app: typer.Typer) -> None:
    """Add the `data` command group to ``app``."""
    app.add_typer(data_app, name="data")
