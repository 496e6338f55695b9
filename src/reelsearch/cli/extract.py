"""`reelsearch extract`: media files, folders or datasets -> a FeatureStore (and `extract-merge` for shards)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from reelsearch.cli.options import show_progress
from reelsearch.errors import EXIT_PARTIAL_FAILURE, ReelsearchError

app = typer.Typer()


@app.command("extract")
def extract(
    paths: list[str] = typer.Argument(..., help="Media files, folders (searched recursively) or FORMAT:ROOT[:SPLIT]."),
    out: str = typer.Option(..., "--out", "-o", help="FeatureStore folder (created; resumed when it exists)."),
    recipe: str | None = typer.Option(None, "--recipe", help="Extract exactly the features a model reads: a named "
                                      "model, a config YAML, a model directory (`default`: the bundled model) or "
                                      "hf:NAME_OR_DIR. "
                                      "Replaces the feature options below."),
    modality: str = typer.Option("appearance", "--modality", "-m", help="Comma list: appearance,motion,audio."),
    sampling: str = typer.Option("interval:0.5", help="Frames to keep: every:N | interval:SECONDS | uniform:K | all."),
    max_frames: int | None = typer.Option(64, help="Cap on frames per video (spread uniformly); 0 = no cap."),
    short_side: int = typer.Option(256, help="Resize decoded frames so the short side is at most this; 0 = keep."),
    appearance: str = typer.Option("efficientnet-lite0", help="Appearance extractor name (efficientnet-lite0, "
                                   "efficientnet-lite2, backbone)."),
    appearance_option: list[str] = typer.Option([], "--appearance-option", help="KEY=VALUE for the appearance "
                                                "extractor, repeatable; e.g. for `--appearance backbone`: "
                                                "arch=torchvision:resnet152 weights=PATH dim=2048 (values are JSON "
                                                "when they parse, else text)."),
    motion: str = typer.Option("hof-mbh", help="Motion extractor name."),
    motion_input: str = typer.Option("pairs", help="Motion from each sampled frame and the next decoded frame "
                                                   "(pairs) or between consecutive sampled frames (sampled)."),
    audio: str = typer.Option("soundnet8", help="Audio extractor name."),
    dtype: str = typer.Option("float16", help="Stored dtype: float16 | float32."),
    workers: int = typer.Option(2, help="Parallel decode workers (0 = decode in the main thread)."),
    executor: str = typer.Option("thread", help="Decode workers: thread | process."),
    batch_size: int | None = typer.Option(None, help="Frames per model forward pass (default: the extractor's)."),
    device: str | None = typer.Option(None, help="cpu | cuda | auto (default: the extractor's)."),
    commit_every: int = typer.Option(256, help="Items per store commit (a killed run loses at most these)."),
    split: str | None = typer.Option(None, help="Only this split of a dataset spec without :SPLIT."),
    merge_timeout: float | None = typer.Option(None, help="Distributed: seconds rank 0 waits for the others."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
) -> None:
    """Extract features into a FeatureStore, each stored with its recipe; resumable; failures go to
    STORE/errors.jsonl.

    Exit status 0 when every item succeeded, 3 when some failed (the rest are stored). Under torchrun (or with
    RANK / WORLD_SIZE set) rank r extracts every WORLD_SIZE-th item of the key-sorted list, starting at item r,
    into STORE/rank-<r>, and rank 0 merges the shards into STORE at the end.
    """
    from reelsearch.features.distributed_extract import dist_env, extract_distributed
    from reelsearch.features.extract import ERRORS_FILE, ExtractConfig, run_extraction
    from reelsearch.features.jobs import collect_jobs

    if executor not in ("thread", "process"):
        raise ReelsearchError(f"--executor must be thread or process, got {executor!r}")
    pipeline = _pipeline(recipe, modality, appearance, motion, audio, appearance_option, sampling, max_frames,
                         short_side, motion_input, dtype, device, batch_size)
    config = ExtractConfig(workers=workers, executor=executor, batch_size=batch_size, device=device,
                           commit_every=commit_every, progress=show_progress(progress))
    collected = collect_jobs(paths, split=split)
    root = Path(out)
    rank, world = dist_env()
    if world == 1:
        summary = run_extraction(collected.jobs, root, pipeline, config, problems=collected.problems)
        typer.echo(summary.line(root / ERRORS_FILE))
        failed = summary.failed_items
    else:
        run = extract_distributed(collected, root, pipeline, config, rank, world, merge_timeout,
                                  on_shard=lambda shard: typer.echo(shard.shard_line(), err=True))
        if run.merged is not None:
            typer.echo(run.merge_line())
        failed = run.failed
    if failed:
        raise typer.Exit(EXIT_PARTIAL_FAILURE)


@app.command("extract-merge")
def extract_merge(
    store: str = typer.Argument(..., help="The --out STORE of a distributed extraction."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Merge the STORE/rank-<r> shards of a distributed extraction into STORE (resumes; skips merged keys)."""
    from reelsearch.features.distributed_extract import merge_shards

    merged = merge_shards(store, progress=show_progress(progress))
    added = ", ".join(f"{m} {n}" for m, n in merged["added"].items()) or "nothing"
    typer.echo(f"extract-merge: {len(merged['shards'])} shards into {store}: added {added}; "
               f"{len(merged['errors'])} errors in {store}/errors.jsonl")


def _pipeline(recipe, modality, appearance, motion, audio, appearance_option, sampling, max_frames, short_side,
              motion_input, dtype, device, batch_size):
    """The FeaturePipeline of `extract`'s options: a model's recipe (--recipe), else the feature options."""
    from reelsearch.features.pipeline import FeaturePipeline
    from reelsearch.models.recipes import recipe_pipeline

    if recipe is not None:
        return recipe_pipeline(recipe, device, batch_size)
    if motion_input not in ("pairs", "sampled"):
        raise ReelsearchError(f"--motion-input must be pairs or sampled, got {motion_input!r}")
    mods = tuple(m.strip() for m in modality.split(",") if m.strip())
    bad = [m for m in mods if m not in ("appearance", "motion", "audio")]
    if not mods or bad:
        raise ReelsearchError(f"--modality: unknown {', '.join(bad) or '(none)'}; choose from appearance,motion,audio")
    options = {"appearance": _key_values(appearance_option, "--appearance-option")}
    if dtype not in ("float16", "float32"):
        raise ReelsearchError(f"--dtype must be float16 or float32, got {dtype!r}")
    names = {"appearance": appearance, "motion": motion, "audio": audio}
    return FeaturePipeline.from_extractors({m: names[m] for m in mods}, options, sampling=sampling,
                                           max_frames=max_frames or None, short_side=short_side or None,
                                           motion_input=motion_input, dtype=dtype, device=device,
                                           batch_size=batch_size)


def _key_values(pairs: list[str], flag: str) -> dict:
    """["arch=x", "dim=2048"] -> {"arch": "x", "dim": 2048}; values are JSON when they parse."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ReelsearchError(f"{flag}: expected KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out
