"""`reelsearch data ...`: inspect datasets in their original formats."""

from __future__ import annotations

import json

import typer

app = typer.Typer(name="data", help="Inspect datasets (Flickr8k, COCO, MSR-VTT, MSVD, LSMDC, JSONL manifests).",
                  short_help="Inspect datasets: items and captions of each split.",
                  no_args_is_help=True)


@app.command("info")
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
    typer.echo(json.dumps(ds.info()) if as_json else ds.info_table())
