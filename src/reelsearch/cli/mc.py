"""`reelsearch mc ...`: build and evaluate the 5-choice multiple-choice test (Torabi et al. 2016, section 3)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from reelsearch.cli.options import QUIET_HELP, command_quiet
from reelsearch.errors import ReelsearchError

app = typer.Typer(name="mc", help="Multiple-choice test: 5 candidate captions per video, distractors with other "
                  "activities.", no_args_is_help=True)

DATA_HELP = "Dataset as FORMAT:ROOT[:SPLIT], e.g. flickr8k:/data/flickr8k or msvd:/data/msvd:test."


def _split_of(data: str, split: str | None) -> str:
    """The split that --split or the data spec names (they must agree)."""
    from reelsearch.datasets import parse_data_spec

    spec_split = parse_data_spec(data)[2]
    if split and spec_split and split != spec_split:
        raise ReelsearchError(f"two different splits given: {spec_split!r} in the data spec and --split {split!r}")
    chosen = split or spec_split
    if not chosen:
        raise ReelsearchError("name the split: --split NAME (or FORMAT:ROOT:SPLIT)")
    return chosen


@app.command("build")
def build(
    data: str = typer.Argument(..., help=DATA_HELP),
    split: str | None = typer.Option(None, "--split", help="Split to build the test from (test, dev, ...)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output file (LSMDC16 multiple-choice layout, TAB-separated)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the ground-truth, distractor and answer-position draws."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol (msrvtt full|1k-a|..., msvd all|5)"),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Build one question per item of a split: its caption + 4 distractors sharing no activity word with it."""
    from reelsearch.mc.build import build_mc_file, summary_text

    _, summary = build_mc_file(data, _split_of(data, split), out, seed=seed, protocol=protocol,
                               progress=command_quiet(quiet))
    typer.echo(json.dumps(summary) if as_json else summary_text(summary))


@app.command("tag")
def tag(
    captions: list[str] = typer.Argument(..., help="Captions to tag."),
    as_json: bool = typer.Option(False, "--json", help='One JSON line per caption: {"caption", "phrases", "words"}.'),
) -> None:
    """Print the activity phrases (predicate + object) and activity words of captions."""
    from reelsearch.mc import ActivityTagger

    for caption, t in zip(captions, ActivityTagger().tag_many(captions, progress=False), strict=True):
        typer.echo(json.dumps(t.to_json(caption)) if as_json else t.describe(caption))


@app.command("eval")
def evaluate(
    checkpoint: str = typer.Argument(..., help="Trained model: a model directory, a training run's folder, "
                                     "`default` (the bundled model) or hf:NAME_OR_DIR (a CLIP/SigLIP checkpoint)."),
    mc_file: Path = typer.Argument(..., help="Multiple-choice file (from `mc build`, or LSMDC16's)."),
    data: str = typer.Option(..., "--data", help=DATA_HELP + " Maps clip ids to media and features."),
    features: Path | None = typer.Option(None, "--features", help="FeatureStore with the videos' features (default: "
                                         "the feature caches, extracted on first use with the model's recipe)."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol (as for `mc build`)."),
    choices: Path | None = typer.Option(None, "--choices", help="Write one JSON line per question here."),
    batch_size: int = typer.Option(64, "--batch-size", help="Questions scored per batch."),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda (default: GPU when present)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"accuracy": percent, "items": N, ...}.'),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Accuracy of a model: each video gets the candidate with the highest model similarity (order for Torabi)."""
    from reelsearch.training.mc_eval import evaluate_mc

    result = evaluate_mc(checkpoint, mc_file, data, features=features, protocol=protocol, choices=choices,
                         batch_size=batch_size, device=device, progress=command_quiet(quiet))
    typer.echo(json.dumps(result.to_json()) if as_json else result.line())
