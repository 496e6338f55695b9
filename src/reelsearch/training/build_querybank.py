"""Building a model's querybank from a dataset's training split (`reelsearch querybank`); the bank itself and its
normalisation are ``reelsearch.models.querybank``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.features.caches import DatasetSource
from reelsearch.io import atomic_write_json
from reelsearch.models import load_model
from reelsearch.models.checkpoint import derived_run
from reelsearch.models.querybank import DEFAULT_BETA, QueryBank, check_bank_model
from reelsearch.training.run import derived_report_text, evaluate_model, model_pairs

REPORT_FILE = "querybank.json"


def build_querybank(model, source, split: str = "train", beta: float = DEFAULT_BETA, max_captions: int | None = None,
                    max_videos: int | None = None, seed: int = 0, device: str | None = None,
                    progress: bool = True) -> QueryBank:
    """The bank of ``split`` of ``source`` (a DatasetSource) embedded by ``model``; ``max_captions`` /
    ``max_videos`` keep a random subset (``seed``) to bound its size."""
    check_bank_model(model)
    pairs = model_pairs(model, source, split, device, progress)
    rng = np.random.default_rng(seed)
    captions, items = list(pairs.captions), pairs.video_items()
    if max_captions is not None and len(captions) > max_captions:
        captions = [captions[i] for i in sorted(rng.choice(len(captions), max_captions, replace=False))]
    if max_videos is not None and len(items) > max_videos:
        items = [items[i] for i in sorted(rng.choice(len(items), max_videos, replace=False))]
    text = model.ann_query(model.encode_text(captions, cached=True))
    video = model.encode_video(items, frames=False, progress=progress).video
    return QueryBank(text, video, beta, model.fingerprint(), f"{source.label}:{split}")


def make_querybank(checkpoint, data: str, out: str | Path, split: str = "train", beta: float = DEFAULT_BETA,
                   max_captions: int | None = None, max_videos: int | None = None, val_split: str | None = None,
                   features: Path | None = None, seed: int = 0, device: str | None = None, progress: bool = True,
                   evaluate: bool = True, **data_options) -> dict:
    """Build the querybank of ``checkpoint`` from ``data``'s ``split`` and save the model with it in the run folder
    ``out`` (``out/best/``; ``out`` new, or the checkpoint's own run folder); return the report (also
    ``out/querybank.json``, beside the model, never in it): the bank and, with ``evaluate``, the model's raw and
    normalised metrics on ``val_split`` (default: val or dev; never the bank's split)."""
    directory, best = derived_run(checkpoint, out)
    out = Path(out)
    model = load_model(directory)
    source, _ = DatasetSource.open(data, features, **data_options)
    split = source.check_split(split)
    val_split = source.check_split(val_split) if val_split else source.default_val_split()
    if val_split == split:
        raise ReelsearchError(f"the bank's split {split!r} is the split to report on: a querybank holds training "
                              "queries (pass --val-split)")
    model.querybank = build_querybank(model, source, split, beta, max_captions, max_videos, seed, device, progress)
    model.save(best)
    report = {"model": str(checkpoint), "data": source.label, "split": split, "val_split": val_split,
              "querybank": model.querybank.describe()}
    if evaluate and val_split is not None:
        saved = load_model(best)
        report["raw"] = evaluate_model(saved, source, val_split, device, progress, querybank=False)
        report["normalised"] = evaluate_model(saved, source, val_split, device, progress)
    atomic_write_json(out / REPORT_FILE, report)
    return report


def report_text(report: dict, out: str | Path) -> str:
    """:func:`make_querybank`'s report in a few lines: the bank, the raw and the normalised metrics."""
    bank = report["querybank"]
    head = (f"querybank: {bank['captions']} captions, {bank['videos']} videos of {bank['source']}, "
            f"beta {bank['beta']:g}")
    return derived_report_text(head, report, ("raw", "normalised"), Path(out), REPORT_FILE)
