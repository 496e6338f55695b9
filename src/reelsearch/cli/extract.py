"""`reelsearch extract`: media files, folders or datasets -> a FeatureStore (and `extract-merge` for shards)."""

from __future__ import annotations

import typer

from reelsearch.errors import EXIT_PARTIAL_FAILURE


def extract(
    paths: list[str] = typer.Argument(..., help="Media files, folders (searched recursively) or FORMAT:ROOT[:SPLIT]."),
    out: str = typer.Option(..., "--out", "-o", help="FeatureStore folder (created; resumed when it exists)."),
    recipe: str | None = typer.Option(None, "--recipe", help="Extract exactly the features a model reads: a named "
                                      "model, a config YAML or a model directory (`default`: the bundled model). "
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
    from pathlib import Path

    from reelsearch.errors import ReelsearchError
    from reelsearch.features import extract as ex
    from reelsearch.features.sources import collect_jobs, shard

    if executor not in ("thread", "process"):
        raise ReelsearchError(f"--executor must be thread or process, got {executor!r}")
    if recipe is not None:
        pipeline = _model_pipeline(recipe, device, batch_size)
    else:
        if motion_input not in ("pairs", "sampled"):
            raise ReelsearchError(f"--motion-input must be pairs or sampled, got {motion_input!r}")
        mods = tuple(m.strip() for m in modality.split(",") if m.strip())
        bad = [m for m in mods if m not in ("appearance", "motion", "audio")]
        if not mods or bad:
            raise ReelsearchError(f"--modality: unknown {', '.join(bad) or '(none)'}; choose from "
                                  "appearance,motion,audio")
        names = {"appearance": appearance, "motion": motion, "audio": audio}
        options = {"appearance": _key_values(appearance_option, "--appearance-option")}
        pipeline = option_pipeline(mods, names, options, sampling, max_frames or None, short_side or None,
                                   motion_input, dtype, device, batch_size)
    config = ex.ExtractConfig(workers=workers, executor=executor, batch_size=batch_size, device=device,
                              commit_every=commit_every, progress=progress)
    collected = collect_jobs(paths, split=split)
    rank, world = ex.dist_env()
    root = Path(out)
    if world == 1:
        summary = ex.run_extraction(collected.jobs, root, pipeline, config, problems=collected.problems)
        typer.echo(summary.line(root / ex.ERRORS_FILE))
        if summary.failed_items:
            raise typer.Exit(EXIT_PARTIAL_FAILURE)
        return
    _extract_distributed(collected, root, pipeline, config, rank, world, merge_timeout, progress, ex, shard)


def option_pipeline(modalities, names: dict, options: dict, sampling: str, max_frames: int | None,
                    short_side: int | None, motion_input: str, dtype: str, device, batch_size):
    """The FeaturePipeline of ``reelsearch extract``'s feature options: each extractor is created once, and its
    recipe records its name, options, output size and weights' identity."""
    from reelsearch.config.recipe import ModalityRecipe
    from reelsearch.errors import ReelsearchError
    from reelsearch.features.extract import make_extractor
    from reelsearch.features.pipeline import FeaturePipeline

    if dtype not in ("float16", "float32"):
        raise ReelsearchError(f"--dtype must be float16 or float32, got {dtype!r}")
    recipes, extractors = {}, {}
    for m in modalities:
        ex = extractors[m] = make_extractor(names[m], device, batch_size, **options.get(m, {}))
        frames = getattr(ex, "input", "frames") == "frames"
        recipes[m] = ModalityRecipe(
            names[m], int(ex.dim), getattr(ex, "weights_id", None), options.get(m, {}),
            sampling=sampling if frames else None, max_frames=max_frames if frames else None,
            short_side=short_side if frames else None,
            motion_input=motion_input if getattr(ex, "modality", "") == "motion" else None, dtype=dtype)
    return FeaturePipeline(recipes, device=device, batch_size=batch_size, extractors=extractors)


def _model_pipeline(spec: str, device, batch_size):
    """The FeaturePipeline of a model's recipe: a named model, a config file or a saved model directory."""
    from pathlib import Path

    from reelsearch.features.pipeline import FeaturePipeline
    from reelsearch.models import resolve_checkpoint
    from reelsearch.models.checkpoint import DEFAULT_MODEL
    from reelsearch.models.registry import resolve_config

    if spec == DEFAULT_MODEL or (Path(spec).is_dir()):
        from reelsearch.models import load_model

        return FeaturePipeline(load_model(resolve_checkpoint(spec)).recipes, device=device, batch_size=batch_size)
    from reelsearch.errors import ReelsearchError
    from reelsearch.features.pipeline import unavailable_message

    cfg = resolve_config(spec)
    configs = cfg.experts.values() if hasattr(cfg, "experts") else [cfg]
    recipes = {}
    for c in configs:
        for m, r in c.features.video.items():
            if recipes.setdefault(m, r).key != r.key:
                raise ReelsearchError(f"--recipe {spec}: its experts read {m!r} made two ways; extract each "
                                      "expert's features into its own store")
    cannot = {m: r for m, r in recipes.items() if not r.available}
    if len(cannot) == len(recipes):
        raise ReelsearchError(f"--recipe {spec}: " + "; ".join(unavailable_message(m, r) for m, r in cannot.items()))
    for m, r in cannot.items():  # extract what can be, say what must be imported
        typer.echo(f"note: {unavailable_message(m, r)}", err=True)
    return FeaturePipeline({m: r for m, r in recipes.items() if m not in cannot}, device=device,
                           batch_size=batch_size)


def _extract_distributed(collected, root, pipeline, config, rank, world, merge_timeout, progress, ex,
                         shard) -> None:
    """One rank: its shard into STORE/rank-<r>; rank 0 then merges (gloo barrier under torchrun, else files)."""
    import contextlib

    problems = [p for i, p in enumerate(collected.problems) if i % world == rank]
    mine = shard(collected.jobs, rank, world)
    shard_root = ex.rank_dir(root, rank)
    ex._open_store(root)  # the parent store exists before any rank folder appears inside it
    with contextlib.suppress(FileNotFoundError):
        ex.shard_done_marker(root, rank).unlink()
    group = _init_process_group(merge_timeout)
    try:
        summary = ex.run_extraction(mine, shard_root, pipeline, config, problems=problems)
        ex.write_done_marker(root, rank, summary)
        typer.echo(f"rank {rank}/{world}: " + summary.line(shard_root / ex.ERRORS_FILE), err=True)
        failed = summary.failed_items
        if group is not None:
            import torch.distributed as dist

            dist.barrier()
        elif rank == 0:
            ex.wait_for_shards(root, world, merge_timeout)
        if rank == 0:
            merged = ex.merge_shards(root, world, progress=progress)
            failed = len({(e.get("id"), e.get("path")) for e in merged["errors"]})
            added = ", ".join(f"{m} {n}" for m, n in merged["added"].items())
            typer.echo(f"extract: merged {world} shards into {root} ({added}); {failed} failed"
                       + (f" (see {root / ex.ERRORS_FILE})" if failed else ""))
        if group is not None:
            import torch.distributed as dist

            dist.barrier()  # no rank exits before the merge is done
    finally:
        if group is not None:
            import torch.distributed as dist

            dist.destroy_process_group()
    if failed:
        raise typer.Exit(EXIT_PARTIAL_FAILURE)


def _init_process_group(timeout: float | None):
    """A gloo process group when torchrun set MASTER_ADDR/MASTER_PORT, else None (file rendezvous)."""
    import os

    if not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        return None
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout or 7 * 24 * 3600))
    return dist.group.WORLD


def extract_merge(
    store: str = typer.Argument(..., help="The --out STORE of a distributed extraction."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Merge the STORE/rank-<r> shards of a distributed extraction into STORE (resumes; skips merged keys)."""
    from reelsearch.features import extract as ex

    merged = ex.merge_shards(store, progress=progress)
    added = ", ".join(f"{m} {n}" for m, n in merged["added"].items()) or "nothing"
    typer.echo(f"extract-merge: {len(merged['shards'])} shards into {store}: added {added}; "
               f"{len(merged['errors'])} errors in {store}/errors.jsonl")


def register(app: typer.Typer) -> None:
    """Add `extract` and `extract-merge` to ``app``."""
    app.command("extract")(extract)
    app.command("extract-merge")(extract_merge)


def _key_values(pairs: list[str], flag: str) -> dict:
    """["arch=x", "dim=2048"] -> {"arch": "x", "dim": 2048}; values are JSON when they parse."""
    import json

    from reelsearch.errors import ReelsearchError

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
