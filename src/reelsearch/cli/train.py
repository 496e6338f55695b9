"""`reelsearch train` and `reelsearch eval`: train a named model on a dataset; evaluate a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add `train` and `eval` to ``app``."""

    @app.command("train")
    def train(
        config: str = typer.Argument(..., help="A named model (torabi-m2, scde, ...) or a YAML config (configs/)."),
        data: list[str] = typer.Option(..., "--data", help="Dataset as FORMAT:ROOT[:SPLIT], e.g. "
                                       "flickr8k:../shared/data/flickr8k; repeat it to train on several together "
                                       "(images and videos, Torabi §5.1); the first is validated on."),
        out: Path = typer.Option(..., "--out", help="Run directory (best/, last/, log.csv, curves.png)."),
        epochs: int | None = typer.Option(None, "--epochs", help="Override the config's number of epochs."),
        features: list[Path] | None = typer.Option(None, "--features", help="FeatureStore with the features "
                                                   "(default: a per-dataset cache, extracted on first use); "
                                                   "once per --data when several."),
        train_split: str | None = typer.Option(None, "--train-split", help="Default: train."),
        val_split: str | None = typer.Option(None, "--val-split", help="Default: val or dev when present."),
        protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol (msrvtt: full, 1k-a, ...)."),
        seed: int | None = typer.Option(None, "--seed", help="Random seed (default: the config's, else 0)."),
        device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:1 (default: GPU when present)."),
        loss: str | None = typer.Option(None, "--loss", help="Replace the config's loss preset (vse, vse++, "
                                        "torabi-pairwise, annotation, mithun-weighted, infonce)."),
        warmup_epochs: int | None = typer.Option(None, "--warmup-epochs", help="Train the first N epochs with the "
                                                 "sum-of-hinges loss (same margin) before the config's loss; "
                                                 "hardest-negative losses can collapse from a random start. "
                                                 "Default: the config's (1 for mithun-* and scde*, 0 = the "
                                                 "papers' schedule)."),
        text_encoder: Path | None = typer.Option(None, "--text-encoder", help="An adapted MiniLM folder from "
                                                 "`reelsearch adapt-text`, for models reading MiniLM token features."),
        threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's; "
                                           "1 is fastest on a busy machine)."),
        json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ) -> None:
        """Train a model; resumes automatically from OUT/last after an interruption. Run under `torchrun
        --nproc_per_node N` for data-parallel training (negatives gathered across ranks)."""
        from reelsearch.train.session import train as run

        _set_threads(threads)
        opts = {"protocol": protocol} if protocol else {}
        summary = run(config, data, out, features=features, epochs=epochs, device=device, train_split=train_split,
                      val_split=val_split, seed=seed, loss=loss, warmup_epochs=warmup_epochs,
                      text_encoder=text_encoder, **opts)
        if json_out:
            typer.echo(json.dumps(summary, indent=2, default=str))
        else:
            typer.echo(f"done: best model in {out}/best")

    @app.command("eval")
    def evaluate(
        checkpoint: str = typer.Argument(..., help="A model directory or training run directory."),
        data: str = typer.Option(..., "--data", help="Dataset as FORMAT:ROOT[:SPLIT]."),
        split: str | None = typer.Option(None, "--split", help="Split to evaluate (default: val/dev, else test)."),
        features: Path | None = typer.Option(None, "--features", help="FeatureStore (default: the dataset cache)."),
        protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol."),
        device: str | None = typer.Option(None, "--device"),
        out: Path | None = typer.Option(None, "--out", help="Write the metrics JSON here "
                                        "(default: CHECKPOINT/eval-FORMAT-SPLIT.json)."),
        threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
        json_out: bool = typer.Option(False, "--json", help="Print the metrics as JSON."),
    ) -> None:
        """Retrieval metrics of a checkpoint in both directions (R@1/5/10, MedR, MeanR, mAP, RSum)."""
        from reelsearch.evaluation import format_table
        from reelsearch.io import atomic_write_json
        from reelsearch.models import resolve_checkpoint
        from reelsearch.train.session import evaluate as run

        _set_threads(threads)
        opts = {"protocol": protocol} if protocol else {}
        res = run(checkpoint, data, split=split, features=features, device=device, progress=not json_out, **opts)
        fmt = res["data"].split(":", 1)[0]
        target = out or resolve_checkpoint(checkpoint) / f"eval-{fmt}-{res['split']}.json"
        try:
            atomic_write_json(target, res)
        except OSError as exc:  # a read-only checkpoint (e.g. the bundled one) still prints its metrics
            typer.echo(f"note: could not save {target}: {exc}", err=True)
        if json_out:
            typer.echo(json.dumps(res))
        else:
            typer.echo(format_table(res))


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)
