"""`reelsearch train`, `eval`, `fuse`, `tune-cnn`, `tune-text`, `querybank`, `distill-text` and `calibrate`: train a
named model on a dataset; evaluate a checkpoint; fuse experts; tune a model's frame CNN or its text tower; give a
model a querybank or a fast text encoder (static, student); calibrate its confidence."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from reelsearch.cli.options import set_threads, show_progress, text_encoder_option
from reelsearch.errors import ReelsearchError

app = typer.Typer()


@app.command("train")
def train(
    config: str = typer.Argument(..., help="A named model (torabi-m2, scde, ...; `reelsearch models`) or a YAML "
                                 "config (configs/)."),
    data: list[str] = typer.Option(..., "--data", help="Dataset as FORMAT:ROOT[:SPLIT], e.g. "
                                   "flickr8k:../shared/data/flickr8k; repeat it to train on several together "
                                   "(images and videos, Torabi §5.1); the first is validated on."),
    out: Path = typer.Option(..., "--out", help="Run directory (best/, last/, log.csv, curves.png)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config key, repeatable: --set train.epochs=5 "
                                   "--set train.lr=1e-4 --set train.precision=bf16 --set "
                                   "model.video.projection.dim=1024 (values read as YAML; an unknown key is an "
                                   "error)."),
    features: list[Path] | None = typer.Option(None, "--features", help="FeatureStore with the features "
                                               "(default: the feature caches, extracted on first use); once per "
                                               "--data when several. Its recipe must match the model's."),
    train_split: str | None = typer.Option(None, "--train-split", help="Default: train."),
    val_split: str | None = typer.Option(None, "--val-split", help="Default: val or dev when present."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol (msrvtt: full, 1k-a, ...)."),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:1 (default: GPU when present)."),
    text_encoder: Path | None = typer.Option(None, "--text-encoder", help="An adapted MiniLM folder from "
                                             "`reelsearch adapt-text`, for models reading MiniLM token features."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's; "
                                       "1 is fastest on a busy machine)."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Train a model; resumes automatically from OUT/last after an interruption. Run under `torchrun
    --nproc_per_node N` for data-parallel training (negatives gathered across ranks)."""
    from reelsearch.training.run import train as run

    set_threads(threads)
    opts = {"protocol": protocol} if protocol else {}
    summary = run(config, data, out, features=features, overrides=list(set_), device=device,
                  train_split=train_split, val_split=val_split, text_encoder=text_encoder, **opts)
    typer.echo(json.dumps(summary, indent=2, default=str) if json_out else f"done: best model in {out}/best")


@app.command("eval")
def evaluate(
    checkpoint: str = typer.Argument(..., help="A model directory, a training run directory, `default` (the "
                                     "bundled model) or hf:NAME_OR_DIR (a CLIP/SigLIP checkpoint)."),
    data: str = typer.Option(..., "--data", help="Dataset as FORMAT:ROOT[:SPLIT]."),
    split: str | None = typer.Option(None, "--split", help="Split to evaluate (default: val/dev, else test)."),
    features: Path | None = typer.Option(None, "--features", help="FeatureStore (default: the feature caches, "
                                         "extracted on first use with the model's recipe)."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol."),
    device: str | None = typer.Option(None, "--device"),
    out: Path | None = typer.Option(None, "--out", help="Write the metrics JSON here (default: "
                                    "./eval-MODEL-FORMAT-SPLIT.json in the current directory)."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
    json_out: bool = typer.Option(False, "--json", help="Print the metrics as JSON."),
    text_encoder: str = text_encoder_option("float32", "What encodes the captions: float32 MiniLM (as trained; "
                                            "the default), int8 MiniLM, static (the model's static text encoder, "
                                            "`reelsearch distill-text`), student (its text tower cut short, "
                                            "`reelsearch distill-text --student`), or auto (what `serve` runs)."),
    querybank: bool = typer.Option(True, "--querybank/--no-querybank", help="Apply the model's querybank "
                                   "normalisation when it has one (`reelsearch querybank`); --no-querybank "
                                   "ranks by its raw scores."),
) -> None:
    """Retrieval metrics of a checkpoint in both directions (R@1/5/10, MedR, MeanR, mAP, RSum)."""
    from reelsearch.evaluation import format_table
    from reelsearch.evaluation.report import result_file_name
    from reelsearch.io import atomic_write_json
    from reelsearch.training.run import evaluate as run

    set_threads(threads)
    opts = {"protocol": protocol} if protocol else {}
    res = run(checkpoint, data, split=split, features=features, device=device, progress=show_progress(not json_out),
              text_encoder=text_encoder, querybank=querybank, **opts)
    target = out or Path(result_file_name(res, querybank))
    try:
        atomic_write_json(target, res)
    except OSError as exc:  # a read-only folder still gets the metrics printed
        typer.echo(f"note: could not save {target}: {exc.strerror or exc}", err=True)
    typer.echo(json.dumps(res) if json_out else format_table(res))


@app.command("fuse")
def fuse(
    checkpoints: list[str] = typer.Argument(..., help="Two or more model or run directories, `default` or "
                                    "hf:NAME_OR_DIR checkpoints (the experts)."),
    out: Path = typer.Option(..., "--out", help="Run folder: the mixture goes to OUT/best/, the "
                             "report to OUT/fusion.json."),
    kind: str = typer.Option("score", "--kind", help="score (weighted sum, Mithun Eq. 4) or rank fusion."),
    weights: str | None = typer.Option(None, "--weights", help="Comma-separated, one per expert "
                                       "(default 1 each; a nested mixture keeps its own)."),
    normalize: str = typer.Option("none", "--normalize", help="Score fusion only: none (the paper) or zscore "
                                  "(experts scoring on different scales)."),
    data: str | None = typer.Option(None, "--data", help="FORMAT:ROOT to evaluate (and tune) on."),
    split: str | None = typer.Option(None, "--split", help="Split to evaluate on (default: val/dev)."),
    features: Path | None = typer.Option(None, "--features", help="FeatureStore (default: the feature caches, "
                                         "extracted on first use with each expert's recipe)."),
    tune: bool = typer.Option(False, "--tune", help="Grid-search the weights (first expert fixed at 1) for "
                              "the best RSum on the split."),
    protocol: str | None = typer.Option(None, "--protocol", help="Dataset protocol."),
    device: str | None = typer.Option(None, "--device"),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Fuse separately trained models into one mixture of experts (Mithun et al. §3.5); with --data, report
    each expert alone and the fusion, optionally tuning the weights."""
    from reelsearch.training import fuse as fusing

    set_threads(threads)
    try:
        w = [float(x) for x in weights.split(",")] if weights else None
    except ValueError as exc:
        raise ReelsearchError(f"--weights: expected numbers separated by commas, got {weights!r}") from exc
    if kind not in ("score", "rank") or normalize not in ("none", "zscore"):
        raise ReelsearchError("--kind is score or rank; --normalize is none or zscore")
    opts = {"protocol": protocol} if protocol else {}
    rep = fusing.fuse(checkpoints, out, kind=kind, weights=w, normalize=normalize, data=data, split=split,
                      features=features, tune=tune, device=device, progress=show_progress(not json_out), **opts)
    typer.echo(json.dumps(rep) if json_out else fusing.report_text(rep, out))


@app.command("tune-cnn")
def tune_cnn(
    checkpoint: str = typer.Argument(..., help="A model or run directory, or `default` (the bundled model)."),
    data: str = typer.Option(..., "--data", help="Images with captions as FORMAT:ROOT, e.g. "
                             "flickr8k:../shared/data/flickr8k."),
    out: Path = typer.Option(..., "--out", help="Run directory: best/ (the tuned model), last/, log.csv, "
                             "summary.json; a mixture's experts are tuned in experts/NAME/. An interrupted run "
                             "resumes."),
    expert: list[str] = typer.Option([], "--expert", help="A mixture's expert to tune, repeatable (default: "
                                     "every expert over EfficientNet-Lite features)."),
    set_: list[str] = typer.Option([], "--set", help="Override a tune key, repeatable: --set tune.epochs=16 "
                                   "--set tune.views=4 --set tune.lr_cnn=1e-4 --set tune.lr=1e-4 --set "
                                   "tune.early_stopping=4 --set tune.from_block=14 --set tune.batch_size=128 "
                                   "(values read as YAML; an unknown key is an error; docs/training.md)."),
    train_split: str = typer.Option("train", "--train-split"),
    val_split: str | None = typer.Option(None, "--val-split", help="Default: val or dev."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Fine-tune the last blocks of a model's frame CNN with its projections, on a CPU: the frozen part's
    activations are computed once per view and cached; the tuned weights travel in the saved model."""
    from reelsearch.training import cnn_tail

    set_threads(threads)
    rep = cnn_tail.tune_cnn(checkpoint, data, out, experts=list(expert) or None, overrides=list(set_),
                            train_split=train_split, val_split=val_split, progress=show_progress(not json_out))
    typer.echo(json.dumps(rep, default=str) if json_out else cnn_tail.report_text(rep, out))


@app.command("tune-text")
def tune_text(
    checkpoint: str = typer.Argument(..., help="A model or run directory, or `default` (the bundled model)."),
    data: str = typer.Option(..., "--data", help="Videos or images with captions as FORMAT:ROOT, e.g. "
                             "flickr8k:../shared/data/flickr8k."),
    out: Path = typer.Option(..., "--out", help="Run directory: best/ (the tuned model), last/, log.csv, "
                             "summary.json. An interrupted run resumes."),
    set_: list[str] = typer.Option([], "--set", help="Override a tune_text key, repeatable: --set "
                                   "tune_text.layers=2 --set tune_text.epochs=12 --set tune_text.lr_text=2e-5 "
                                   "--set tune_text.lr=1e-4 --set tune_text.video=false --set "
                                   "tune_text.store=float32 (values read as YAML; an unknown key is an error; "
                                   "docs/training.md)."),
    train_split: str = typer.Option("train", "--train-split"),
    val_split: str | None = typer.Option(None, "--val-split", help="Default: val or dev."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Fine-tune the top layers of a model's text tower (MiniLM) with its projections, on a CPU: the states
    below them are computed once per caption and cached; the tuned layers travel in the saved model (a
    mixture's experts share them) and run in ONNX Runtime at query time."""
    from reelsearch.training import text_tail

    set_threads(threads)
    rep = text_tail.tune_text(checkpoint, data, out, overrides=list(set_), train_split=train_split,
                              val_split=val_split, progress=show_progress(not json_out))
    typer.echo(json.dumps(rep, default=str) if json_out else text_tail.report_text(rep, out))


@app.command("querybank", short_help="Normalise the model's scores by a bank of training captions (querybank).")
def querybank(
    checkpoint: str = typer.Argument(..., help="A model or run directory, `default` (the bundled model) "
                                    "or hf:NAME_OR_DIR (a CLIP/SigLIP checkpoint)."),
    data: str = typer.Option(..., "--data", help="The training data as FORMAT:ROOT, e.g. "
                             "flickr8k:../shared/data/flickr8k."),
    out: Path = typer.Option(..., "--out", help="Run folder: the model with its querybank goes to OUT/best/, "
                             "the report to OUT/querybank.json (a new folder, or CHECKPOINT's own run)."),
    split: str = typer.Option("train", "--split", help="The split whose captions and videos form the bank "
                              "(training queries: never the split you report on)."),
    beta: float = typer.Option(20.0, "--beta", help="Inverse temperature of the inverted softmax (20: the "
                               "paper's)."),
    max_captions: int | None = typer.Option(None, "--max-captions", help="Keep at most this many captions "
                                            "(a random subset; default: all)."),
    max_videos: int | None = typer.Option(None, "--max-videos", help="Keep at most this many videos."),
    val_split: str | None = typer.Option(None, "--val-split", help="Split to report raw and normalised "
                                         "metrics on (default: val or dev)."),
    features: Path | None = typer.Option(None, "--features", help="FeatureStore (default: the feature "
                                         "caches, extracted on first use)."),
    seed: int = typer.Option(0, "--seed"),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Querybank normalisation (Bogolin et al. 2022): embed a bank of training captions and videos, save it
    with the model, and report the raw and the normalised metrics; `eval` then ranks by the inverted
    softmax over the bank."""
    from reelsearch.training import build_querybank as bank

    set_threads(threads)
    rep = bank.make_querybank(checkpoint, data, out, split=split, beta=beta, max_captions=max_captions,
                              max_videos=max_videos, val_split=val_split, features=features, seed=seed,
                              progress=show_progress(not json_out))
    typer.echo(json.dumps(rep, default=str) if json_out else bank.report_text(rep, out))


@app.command("distill-text")
def distill_text(
    checkpoint: str = typer.Argument(..., help="A model or run directory, or `default` (the bundled model)."),
    data: str = typer.Option(..., "--data", help="The training data as FORMAT:ROOT, e.g. "
                             "flickr8k:../shared/data/flickr8k (with --student: the data to measure it on)."),
    out: Path = typer.Option(..., "--out", help="Run folder: the model with its new text encoder goes to "
                             "OUT/best/, the report to OUT/static-text.json or OUT/student-text.json (a new folder, "
                             "or CHECKPOINT's own run)."),
    student: Path | None = typer.Option(None, "--student", help="Instead of a static encoder, give the model this "
                                        "student: a model or run folder that `reelsearch tune-text CHECKPOINT --set "
                                        "tune_text.depth=N --set tune_text.teacher=CHECKPOINT --set "
                                        "tune_text.video=false` made (its text tower cut short)."),
    store: str | None = typer.Option(None, "--store", help="With --student: how its weights are stored in the "
                                     "model folder, float16 (the default: half the bytes; read back to float32), "
                                     "int8 (the tuned layers' matrices as int8 rows: a quarter) or float32; the "
                                     "RSum measured is of the student as stored."),
    split: str = typer.Option("train", "--split", help="The split whose captions the static encoder is re-fitted on "
                              "(token frequencies and the map)."),
    dims: int = typer.Option(256, "--dims", min=1, help="PCA dimensions of the static encoder's token rows."),
    sif: float = typer.Option(0.0, "--sif", min=0.0, help="SIF frequency weighting a / (a + p(token)) of the "
                              "token rows, p from the training captions (0: none, the default; docs/search.md)."),
    val_split: str | None = typer.Option(None, "--val-split", help="Split to report float32 MiniLM's and the new "
                                         "encoder's metrics on (default: val or dev)."),
    features: Path | None = typer.Option(None, "--features", help="FeatureStore (default: the feature "
                                         "caches, extracted on first use)."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Give the model a fast text encoder, saved with it, and report its metrics beside float32 MiniLM's: a
    static one distilled from the model's own text tower (Model2Vec's recipe, re-fitted to the model's joint
    space on the training captions; `--text-encoder static`), or with --student the text tower cut short that
    `tune-text` distilled from it (`--text-encoder student`). `serve` runs the fastest one within 3 dev RSum of
    float32 by default (docs/search.md, "Choosing the text encoder")."""
    from reelsearch.models.student_text import STORES
    from reelsearch.training import distill_text as distilling

    set_threads(threads)
    progress = show_progress(not json_out)
    if student is not None:
        if (split, dims, sif) != ("train", 256, 0.0):
            raise typer.BadParameter("--split, --dims and --sif shape a static encoder; a --student is made as it is")
        if store not in (None, *STORES):
            raise typer.BadParameter(f"--store is one of {', '.join(STORES)}, not {store!r}")
        rep = distilling.make_student_text(checkpoint, student, data, out, val_split=val_split, features=features,
                                           progress=progress, store=store or STORES[0])
    elif store is not None:
        raise typer.BadParameter("--store is how a --student is stored; a static encoder stores int8 token rows")
    else:
        rep = distilling.make_static_text(checkpoint, data, out, split=split, dims=dims, sif=sif,
                                          val_split=val_split, features=features, progress=progress)
    typer.echo(json.dumps(rep, default=str) if json_out else distilling.report_text(rep, out))


@app.command("calibrate")
def calibrate(
    checkpoint: str = typer.Argument(..., help="A model or run directory, `default` (the bundled model) "
                                    "or hf:NAME_OR_DIR (a CLIP/SigLIP checkpoint)."),
    data: str = typer.Option(..., "--data", help="Development data as FORMAT:ROOT, e.g. "
                             "flickr8k:../shared/data/flickr8k."),
    out: Path = typer.Option(..., "--out", help="Run folder: the model with its calibration goes to OUT/best/, "
                             "the report to OUT/calibration.json (a new folder, or CHECKPOINT's own run)."),
    split: str = typer.Option("dev", "--split", help="The split whose captions are the development queries "
                              "(over all its videos)."),
    hits: int = typer.Option(10, "--hits", min=1, max=1000, help="Hits per query counted (a search's top k)."),
    features: Path | None = typer.Option(None, "--features", help="FeatureStore (default: the feature "
                                         "caches, extracted on first use)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the held-out check's halves."),
    text_encoder: str = typer.Option("float32", "--text-encoder", help="Whose scores are calibrated: float32 "
                                     "MiniLM's (the model's calibration; int8 and static read it too) or the "
                                     "model's student text encoder's (saved with it: a search by the student reads "
                                     "it)."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Calibrate the model's confidence: map a hit's score to the share of development hits at that score that
    were right (isotonic regression), save the curve with the model, and report a held-out reliability check;
    `search` then gives every hit a confidence and says when nothing matches well (docs/search.md). A student text
    encoder has a calibration of its own (--text-encoder student)."""
    from reelsearch.training import calibrate as cal

    set_threads(threads)
    rep = cal.make_calibration(checkpoint, data, out, split=split, hits=hits, seed=seed, features=features,
                               progress=show_progress(not json_out), text_encoder=text_encoder)
    typer.echo(json.dumps(rep, default=str) if json_out else cal.report_text(rep, out))
