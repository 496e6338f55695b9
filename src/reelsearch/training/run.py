"""From a config and a dataset to a trained, evaluated checkpoint: what `reelsearch train` and `eval` run.

Features come from the feature caches or a given store (``reelsearch.features.caches``), found or extracted on
demand, so a command works on a cold cache; the model's config (with its feature recipe) travels into every saved
checkpoint.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reelsearch.config import AnyConfig, MixtureConfig, ModelConfig, apply_overrides, config_to_dict
from reelsearch.config.recipe import file_identity
from reelsearch.errors import ReelsearchError
from reelsearch.evaluation.evaluator import RetrievalEvaluator
from reelsearch.features.caches import DatasetSource
from reelsearch.features.pairs import PairData
from reelsearch.io import atomic_write_json
from reelsearch.losses import train_losses
from reelsearch.models import MixtureOfExperts, create_model, load_model, text_processor_for
from reelsearch.models.registry import resolve_config
from reelsearch.training.distributed import init_distributed, shutdown
from reelsearch.training.joint_task import JointTask
from reelsearch.training.trainer import Trainer

logger = logging.getLogger(__name__)


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and python so model initialisation (and all else) is reproducible."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def with_text_encoder(cfg: AnyConfig, text_encoder: str | Path) -> AnyConfig:
    """``cfg`` reading MiniLM token features of the adapted encoder ``text_encoder``: the encoder folder, or the
    ``reelsearch adapt-text`` run folder holding it (its ``best/``)."""
    folder = Path(text_encoder)
    if not (folder / "modules.json").is_file() and (folder / "best" / "modules.json").is_file():
        folder = folder / "best"
    if not (folder / "modules.json").is_file():
        raise ReelsearchError(f"--text-encoder {folder}: not a sentence-transformers model folder (no modules.json)")
    configs = cfg.experts.values() if isinstance(cfg, MixtureConfig) else [cfg]
    if not any(c.features.text.kind == "minilm" for c in configs):
        raise ReelsearchError(f"--text-encoder {folder}: model {cfg.name!r} reads no MiniLM features")
    weights = next(iter(sorted(folder.glob("*.safetensors"))), None) or next(iter(sorted(folder.glob("*.bin"))), None)
    identity = file_identity(weights) if weights else None
    paths = {"features.text.encoder": str(folder.resolve()), "features.text.weights": identity}
    if isinstance(cfg, MixtureConfig):
        paths = {f"experts.{k}.{p}": v for k, c in cfg.experts.items() if c.features.text.kind == "minilm"
                 for p, v in paths.items()}
    return apply_overrides(cfg, paths, "--text-encoder")


def open_sources(data: str | Sequence[str], features: Path | Sequence[Path] | None = None,
                 train_split: str | None = None, **data_options) -> list[tuple[DatasetSource, str]]:
    """(DatasetSource, train split) of each dataset spec; ``features``: None, or one store per spec."""
    specs = [data] if isinstance(data, str) else list(data)
    if not specs:
        raise ReelsearchError("no dataset given (--data FORMAT:ROOT)")
    stores = [features] if isinstance(features, (str, Path)) else list(features or [None] * len(specs))
    if len(stores) != len(specs):
        raise ReelsearchError(f"{len(specs)} datasets but {len(stores)} feature stores: give --features once per "
                              "--data, in the same order, or not at all")
    sources = []
    for spec, store in zip(specs, stores):
        src, spec_split = DatasetSource.open(spec, store, **data_options)
        sources.append((src, src.check_split(train_split or spec_split or "train")))
    return sources


def training_captions(sources: list[tuple[DatasetSource, str]]) -> list[str]:
    """Every caption of the training splits (a vocabulary is built from these)."""
    return [c for src, split in sources for it in src.dataset.items(split) for c in it.captions]


def model_pairs(model, source: DatasetSource, split: str, device: str | None = None,
                progress: bool = True) -> PairData:
    """PairData of ``split`` with the features ``model`` reads (found or extracted on demand)."""
    processor = getattr(model, "text_processor", None)
    return source.pairs(model.recipes, split, processor, device, progress)


def train(config: str | Path | dict | AnyConfig, data: str | Sequence[str], out: Path,
          features: Path | Sequence[Path] | None = None, overrides: dict[str, Any] | list[str] | None = None,
          device: str | None = None, train_split: str | None = None, val_split: str | None = None,
          text_encoder: Path | None = None, progress: bool = True, **data_options) -> dict:
    """Train the model ``config`` (a name, a YAML path, a dict or a config) on ``data`` ("FORMAT:ROOT"), writing
    to ``out`` (resumes from ``out/last`` after an interruption).

    ``overrides``: dotted config paths (``{"train.epochs": 3}`` or ``["train.epochs=3"]``), checked like the config.
    Several datasets (a list of specs, e.g. Flickr8k images and MSR-VTT videos, Torabi §5.1) train together on the
    union of their train splits (``FORMAT:ROOT:SPLIT`` picks another split); the first one is validated on.
    ``features`` is then one store per dataset, in the same order, or None for the feature caches.
    ``text_encoder``: an adapted MiniLM folder (``reelsearch adapt-text``) for configs reading MiniLM features.
    Before anything trains, every model (every expert of a mixture) is checked to have its features within reach.
    """
    cfg = apply_overrides(resolve_config(config), overrides)
    if text_encoder:
        cfg = with_text_encoder(cfg, text_encoder)
    sources = open_sources(data, features, train_split, **data_options)
    source = sources[0][0]
    val_split = val_split or source.default_val_split()
    if val_split is not None:
        source.check_split(val_split)
    for model_cfg in cfg.experts.values() if isinstance(cfg, MixtureConfig) else [cfg]:
        for src, _ in sources:
            src.check_features(model_cfg.features.video)
    info = init_distributed(device)
    out = Path(out)
    try:
        if isinstance(cfg, MixtureConfig):
            return _train_experts(cfg, sources, val_split, out, info, progress)
        return _fit(_new_model(cfg, sources, info), cfg, sources, val_split, out, info, progress)
    finally:
        shutdown(info)


def _new_model(cfg: ModelConfig, sources, info):
    processor = text_processor_for(cfg, training_captions(sources))
    seed_everything(cfg.train.seed)
    return create_model(cfg, processor).to(info.device)


def _fit(model, cfg: ModelConfig, sources, val_split, out: Path, info, progress) -> dict:
    dev = str(info.device)
    train_data = PairData.concat([model_pairs(model, src, split, dev, progress) for src, split in sources])
    source = sources[0][0]
    val_data = model_pairs(model, source, val_split, dev, progress) if val_split else None
    out.mkdir(parents=True, exist_ok=True)
    if info.is_main:
        atomic_write_json(out / "run.json", {
            "config": config_to_dict(cfg), "data": [src.label for src, _ in sources],
            "train_split": [s for _, s in sources], "train_pairs": len(train_data.captions),
            "val_data": source.label, "val_split": val_split,
            "features": [str(src.store_root) if src.store_root else "cache" for src, _ in sources]})
    task = JointTask(model, train_losses(cfg.train), train_data, val_data, cfg.train, info)
    return Trainer(task, out, progress).fit()


def _train_experts(cfg: MixtureConfig, sources, val_split, out: Path, info, progress) -> dict:
    """Mithun et al. 2018 §3.5: each expert is trained separately, then fused."""
    summaries = {}
    for name, ecfg in cfg.experts.items():
        logger.info("training expert %r on %s", name, ", ".join(ecfg.modalities))
        summaries[name] = _fit(_new_model(ecfg, sources, info), ecfg, sources, val_split, out / "experts" / name,
                               info, progress)
    experts = {k: load_model(out / "experts" / k / "best") for k in cfg.experts}
    moe = MixtureOfExperts(experts, cfg.fusion, name=cfg.name)
    summary = {"experts": summaries}
    if info.is_main:
        moe.save(out / "best")
        if val_split:
            summary["fused"] = evaluate_model(moe, sources[0][0], val_split, str(info.device), progress)
        atomic_write_json(out / "summary.json", summary)
    return summary


def evaluate_model(model, source: DatasetSource, split: str, device: str | None = None,
                   progress: bool = True, querybank: bool = True) -> dict:
    """Both-direction retrieval metrics of ``model`` on ``split`` (a mixture fused as configured; its querybank
    applied, unless ``querybank`` is False)."""
    dev = resolve_device(device)
    model = model.to(dev)
    return RetrievalEvaluator(model_pairs(model, source, split, str(dev), progress), progress=progress,
                              querybank=querybank)(model)


def open_eval_split(data: str, split: str | None = None, features: Path | None = None,
                    **data_options) -> tuple[DatasetSource, str]:
    """The dataset ``data`` and the split to evaluate on: ``split``, the spec's, val/dev, else test."""
    source, spec_split = DatasetSource.open(data, features, **data_options)
    return source, source.check_split(split or spec_split or source.default_val_split() or "test")


def open_tuning(checkpoint, data: str, val_split: str | None = None, **data_options):
    """(the model ``checkpoint`` a tuning starts from, its dataset ``data``, the split that selects the epoch:
    ``val_split``, else val or dev) for ``tune-cnn`` and ``tune-text``."""
    model = load_model(checkpoint)
    source, _ = DatasetSource.open(data, **data_options)
    val_split = val_split or source.default_val_split()
    if val_split is None:
        raise ReelsearchError(f"{source.label}: no val or dev split to select the epoch on; pass val_split")
    return model, source, val_split


def derived_report_text(head: str, report: dict, keys, out: Path, report_file: str) -> str:
    """A derived model's report (``querybank``, ``distill-text``) in a few lines: ``head``, the metrics under each of
    ``keys`` the report has (on its ``val_split``), where the model and the report were saved."""
    lines = [head]
    for key in keys:
        if key in report:
            res = report[key]
            lines.append(f"{key} on {report['val_split']}: i2t/t2i R@1 {res['v2t']['R@1']:.1f}/"
                         f"{res['t2v']['R@1']:.2f}, RSum {res['RSum']:.2f}")
    lines.append(f"saved: {out / 'best'} (report: {out / report_file})")
    return "\n".join(lines)


def saved_lines(report: dict, out: str | Path) -> list[str]:
    """The last lines of a tuning's report (``tune-cnn``, ``tune-text``): the saved model's metrics, where it is."""
    lines = []
    if "result" in report:
        res = report["result"]
        lines.append(f"saved model on {report['val_split']}: i2t/t2i R@1 {res['v2t']['R@1']:.1f}/"
                     f"{res['t2v']['R@1']:.2f}, RSum {res['RSum']:.2f}")
    return lines + [f"saved: {out}/best (report: {out}/summary.json)"]


def evaluate(checkpoint, data: str, split: str | None = None, features: Path | None = None,
             device: str | None = None, progress: bool = True, text_encoder: str = "float32", querybank: bool = True,
             **data_options) -> dict:
    """Load ``checkpoint`` (a path, "default", or a loaded model) and evaluate it on ``data``'s ``split``;
    ``text_encoder``: what encodes the captions (``model.use_text_encoder``: "float32", "int8", "static",
    "student"), as ``reelsearch search --text-encoder`` encodes queries;
    ``querybank``: apply the model's querybank normalisation when it has one (False: its raw scores)."""
    source, split = open_eval_split(data, split, features, **data_options)
    model = load_model(checkpoint) if isinstance(checkpoint, (str, Path)) else checkpoint
    encoder = model.use_text_encoder(text_encoder)
    res = evaluate_model(model, source, split, device, progress, querybank)
    res["data"], res["split"], res["model"] = source.label, split, getattr(model, "name", "")
    if encoder != "float32":
        res["text_encoder"] = encoder
    return res
