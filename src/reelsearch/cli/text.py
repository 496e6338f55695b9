"""`reelsearch adapt-text`: SCDE stage 1, masked-language-model adaptation of MiniLM to a dataset's captions."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from reelsearch.cli.options import set_threads, show_progress
from reelsearch.errors import ReelsearchError

app = typer.Typer()


@app.command("adapt-text")
def adapt_text(
    data: str = typer.Option(..., "--data", help="Dataset as FORMAT:ROOT[:SPLIT], e.g. "
                             "flickr8k:../shared/data/flickr8k"),
    split: str | None = typer.Option(None, "--split", help="Split whose captions to train on (default: train)."),
    out: Path = typer.Option(..., "--out", help="Run directory: best/ (the adapted encoder, a "
                             "sentence-transformers folder), last/, log.csv, summary.json. An interrupted run "
                             "resumes."),
    set_: list[str] = typer.Option([], "--set", help="Override an mlm key, repeatable: --set mlm.epochs=1 "
                                   "--set mlm.mask_prob=0.15 --set mlm.lr=5e-5 --set mlm.batch_size=32 --set "
                                   "mlm.seed=0 --set mlm.heldout=0.05 (values read as YAML; an unknown key is an "
                                   "error; docs/training.md)."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol (msrvtt: full, 1k-a, ...)."),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda (default: GPU when present)."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Fine-tune MiniLM with BERT's masked-LM objective on a split's captions (SCDE §3.2, stage 1); train with
    it via `reelsearch train ... --text-encoder OUT`. Rerunning with the same parameters reuses OUT."""
    from reelsearch.datasets import parse_data_spec
    from reelsearch.training import adapt_text as adaptation

    set_threads(threads)
    spec_split = parse_data_spec(data)[2]
    if split and spec_split and split != spec_split:
        raise ReelsearchError(f"two different splits given: {spec_split!r} in --data and --split {split!r}")
    report = adaptation.adapt_text(data, out, split, protocol, overrides=list(set_), device=device,
                                   progress=show_progress(not json_out))
    typer.echo(json.dumps(report, indent=2) if json_out else adaptation.report_text(report, out))
