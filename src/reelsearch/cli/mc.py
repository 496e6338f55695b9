"""`reelsearch mc ...`: build and evaluate the 5-choice multiple-choice test (Torabi et al. 2016, section 3)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from reelsearch.errors import ReelsearchError

mc_app = typer.Typer(
    help="Multiple-choice test: 5 candidate captions per video, distractors with other activities.",
    no_args_is_help=True,
)

DATA_HELP = "Dataset as FORMAT:ROOT[:SPLIT], e.g. flickr8k:/data/flickr8k or msvd:/data/msvd:test."


def _split_of(spec_split: str | None, split: str | None) -> str:
    if split and spec_split and split != spec_split:
        raise ReelsearchError(f"two different splits given: {spec_split!r} in the data spec and --split {split!r}")
    chosen = split or spec_split
    if not chosen:
        raise ReelsearchError("name the split: --split NAME (or FORMAT:ROOT:SPLIT)")
    return chosen


@mc_app.command("build")
def build(
    data: str = typer.Argument(..., help=DATA_HELP),
    split: str | None = typer.Option(None, "--split", help="Split to build the test from (test, dev, ...)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output file (LSMDC16 multiple-choice layout, TAB-separated)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the ground-truth, distractor and answer-position draws."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol (msrvtt full|1k-a|..., msvd all|5)"),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Build one question per item of a split: its caption + 4 distractors sharing no activity word with it."""
    from reelsearch.datasets import load_dataset, parse_data_spec
    from reelsearch.mc import build_questions, write_mc_file

    fmt, root, spec_split = parse_data_spec(data)
    split = _split_of(spec_split, split)
    options = {"protocol": protocol} if protocol else {}
    items = load_dataset(fmt, root, **options).items(split)
    result = build_questions(items, seed=seed, progress=not quiet)
    for item_id, n in result.too_small:
        print(f"warning: {item_id}: only {n} eligible distractor(s), no question built", file=sys.stderr)
    for item_id in result.no_captions:
        print(f"warning: {item_id}: no caption, no question built", file=sys.stderr)
    write_mc_file(out, result.questions)
    summary = {"file": str(out), "data": f"{fmt}:{root}", "split": split, "seed": seed, "items": len(items),
               **result.summary()}
    if as_json:
        typer.echo(json.dumps(summary))
        return
    typer.echo(f"{summary['questions']:,} questions from {len(items):,} {split} items -> {out}")
    typer.echo(f"  not built: {summary['too_small']} (pool too small), {summary['no_captions']} (no caption)")
    typer.echo(f"  ground truths without an activity word (content words compared): {summary['answers_fallback']}")
    typer.echo(f"  {summary['captions']:,} captions ({summary['unique_captions']:,} unique) tagged in "
               f"{summary['tag_seconds']:.1f} s; total {summary['seconds']:.1f} s")


@mc_app.command("tag")
def tag(
    captions: list[str] = typer.Argument(..., help="Captions to tag."),
    as_json: bool = typer.Option(False, "--json", help='One JSON line per caption: {"caption", "phrases", "words"}.'),
) -> None:
    """Print the activity phrases (predicate + object) and activity words of captions."""
    from reelsearch.mc import ActivityTagger

    for caption, t in zip(captions, ActivityTagger().tag_many(captions, progress=False), strict=True):
        if as_json:
            typer.echo(json.dumps({"caption": caption, "phrases": list(t.phrases), "words": sorted(t.words),
                                   "fallback": t.fallback}))
        else:
            extra = "  (no activity word: content words)" if t.fallback else ""
            typer.echo(f"{caption}\n  phrases: {', '.join(t.phrases) or '-'}\n  words:   "
                       f"{', '.join(sorted(t.words)) or '-'}{extra}")


@mc_app.command("eval")
def evaluate(
    checkpoint: str = typer.Argument(..., help="Trained model: a model directory, a training run's folder, or "
                                     "`default` (the bundled model)."),
    mc_file: Path = typer.Argument(..., help="Multiple-choice file (from `mc build`, or LSMDC16's)."),
    data: str = typer.Option(..., "--data", help=DATA_HELP + " Maps clip ids to media and features."),
    features: Path | None = typer.Option(None, "--features", help="FeatureStore with the videos' features (default: "
                                         "the feature caches, extracted on first use with the model's recipe)."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol (as for `mc build`)."),
    choices: Path | None = typer.Option(None, "--choices", help="Write one JSON line per question here."),
    batch_size: int = typer.Option(64, "--batch-size", help="Questions scored per batch."),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda (default: GPU when present)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"accuracy": percent, "items": N, ...}.'),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Accuracy of a model: each video gets the candidate with the highest model similarity (order for Torabi)."""
    import numpy as np

    from reelsearch.features.caches import DatasetSource
    from reelsearch.io import atomic_write_text
    from reelsearch.mc import mc_accuracy, read_mc_file
    from reelsearch.mc.model_scores import model_scores
    from reelsearch.models import load_model
    from reelsearch.training.run import resolve_device

    questions = read_mc_file(mc_file)
    try:
        model = load_model(checkpoint).to(resolve_device(device))
    except ReelsearchError as exc:
        raise ReelsearchError(f"{exc} (mc eval needs a trained model: a model directory with config.json + "
                              "model.safetensors, a training run's folder holding best/, or `default`)") from exc
    options = {"protocol": protocol} if protocol else {}
    source, spec_split = DatasetSource.open(data, features, **options)
    by_id = {it.id: it for it in source.dataset.items(spec_split)}
    asked = [by_id[q.id] for q in questions if q.id in by_id]
    stores = source.stores(list({it.key: it for it in asked}.values()), model.recipes, device, progress=not quiet)
    usable, missing = [], []
    for q in questions:
        it = by_id.get(q.id)
        ok = it is not None and all(store.has(name, it.key) for store, name in stores.values())
        (usable if ok else missing).append(q)
    for q in missing:
        where = "the dataset" if q.id not in by_id else f"the features ({', '.join(stores)})"
        print(f"warning: {q.id}: not in {where}; question skipped", file=sys.stderr)
    if not usable:
        raise ReelsearchError(f"none of the {len(questions)} questions of {mc_file} has its video's features")

    def video_features(ids: list[str]) -> list[dict]:
        return [{n: np.asarray(store.get_raw(name, by_id[i].key), np.float32) for n, (store, name) in stores.items()}
                for i in ids]

    scores = model_scores(model, usable, video_features, batch_size, progress=not quiet)
    table = {(q.id, q.candidates): s for q, s in zip(usable, scores, strict=True)}
    accuracy, records = mc_accuracy(lambda qid, cands: table[qid, tuple(cands)], usable)
    if choices is not None:
        atomic_write_text(choices, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    result = {"accuracy": round(accuracy, 4), "items": len(usable), "missing": len(missing)}
    if as_json:
        typer.echo(json.dumps(result))
    else:
        typer.echo(f"accuracy {accuracy:.2f}% over {len(usable):,} questions ({len(missing)} skipped: no features)")


def register(app: typer.Typer) -> None:
    """Add the `mc` command group to ``app``."""
    app.add_typer(mc_app, name="mc")
