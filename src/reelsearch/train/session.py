"""From a config and a dataset to a trained, evaluated checkpoint: the glue behind `reelsearch train` / `eval`.

Features a model needs are read from a FeatureStore: the one given, or a per-dataset cache that is filled on first
use by the extraction pipeline (default sampling: every 0.5 s, at most 64 frames; images are one-frame videos).
Transformer token features of captions (SCDE) are computed once and cached in the same store ("text-minilm").
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from reelsearch.errors import ReelsearchError
from reelsearch.train.data import PairData, build_pair_data

VAL_SPLITS = ("val", "dev", "validate", "valid")


def cache_root() -> Path:
    """reelsearch's cache folder ($REELSEARCH_CACHE_DIR, else the user's cache directory)."""
    env = os.environ.get("REELSEARCH_CACHE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("reelsearch"))


def features_cache_dir(fmt: str, root: Path) -> Path:
    """Where features of the dataset ``fmt:root`` are cached."""
    root = Path(root).resolve()
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:10]
    return cache_root() / "features" / f"{fmt}-{root.name}-{digest}"


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@dataclass
class DataContext:
    """A dataset and the FeatureStore its features live in."""

    fmt: str
    root: Path
    dataset: object
    store_root: Path

    @classmethod
    def open(cls, spec: str, features: Path | None = None, **options) -> tuple[DataContext, str | None]:
        from reelsearch.datasets import load_dataset, parse_data_spec

        fmt, root, split = parse_data_spec(spec)
        ds = load_dataset(fmt, root, **options)
        store_root = Path(features) if features is not None else features_cache_dir(fmt, root)
        return cls(fmt, Path(root), ds, store_root), split

    def store(self):
        from reelsearch.features.store import FeatureStore

        return FeatureStore(self.store_root)

    def default_val_split(self) -> str | None:
        return next((s for s in VAL_SPLITS if s in self.dataset.splits()), None)

    def ensure_features(self, items, modalities: list[str], device: str | None = None, progress: bool = True):
        """Extract the ``modalities`` of ``items`` that the store lacks (resumable); returns the store."""
        from reelsearch.features.extract import DEFAULT_EXTRACTORS, ExtractConfig, run_extraction
        from reelsearch.features.sources import Job

        store = self.store()
        missing = {m: [it for it in items if not store.has(m, it.key)] for m in modalities}
        todo = {m: its for m, its in missing.items() if its}
        if not todo:
            return store
        unknown = [m for m in todo if m not in DEFAULT_EXTRACTORS]
        if unknown:
            raise ReelsearchError(
                f"{self.store_root}: no {', '.join(unknown)} features for {len(todo[unknown[0]])} items and no "
                f"extractor makes them here; import precomputed ones with `reelsearch features import ... "
                f"--modality {unknown[0]}` and pass --features")
        jobs = {}
        for its in todo.values():
            for it in its:
                if it.path is not None:
                    jobs.setdefault(it.key, Job(it.key, Path(it.path), it.start, it.end))
        if not jobs:
            if all(len(its) == len(items) for its in todo.values()):
                raise ReelsearchError(f"{self.root}: the items lack {', '.join(todo)} features and the dataset has "
                                      "no media files to extract them from; pass --features with precomputed "
                                      "features")
            no_media = len({it.key for its in todo.values() for it in its})
            print(f"note: {no_media} items of {self.root} have no features in {self.store_root} and no media file; "
                  "they are left out")
            return store
        cfg = ExtractConfig(modalities=tuple(todo), device=device, progress=progress)
        summary = run_extraction(list(jobs.values()), self.store_root, cfg)
        if summary.failed_items:
            print(f"warning: {summary.failed_items} items failed extraction (see {self.store_root}/errors.jsonl); "
                  "they are left out")
        store.refresh()
        return store


def caption_key(caption: str) -> str:
    return hashlib.sha1(caption.encode("utf-8")).hexdigest()[:20]


def minilm_token_features(captions: list[str], store_root: Path, progress: bool = True,
                          model_dir: str | Path | None = None, layer: int | None = None) -> list[np.ndarray]:
    """MiniLM token features of ``captions``, computed once and cached in the store as "text-minilm" (an adapted
    encoder ``model_dir``: "text-minilm-<sha1 of its weights, 10 hex>", so features of different encoders never mix;
    the hidden states after ``layer``: the same name + "-l<layer>")."""
    from reelsearch.features.store import FeatureStore
    from reelsearch.text.mlm import minilm_features_name

    name = minilm_features_name(model_dir, layer)
    store = FeatureStore(store_root)
    keys = [caption_key(c) for c in captions]
    todo = list(dict.fromkeys(k for k in keys if not store.has(name, k)))
    if todo:
        from tqdm import tqdm

        from reelsearch.text.minilm import MiniLMEncoder

        enc = MiniLMEncoder(model_dir=model_dir)
        text_of = dict(zip(keys, captions))
        with store.writer(name, enc.dim, dtype="float16") as w:
            step = 512
            for i in tqdm(range(0, len(todo), step), desc="MiniLM token features", unit="batch",
                          disable=not progress, leave=False):
                chunk = todo[i : i + step]
                for k, f in zip(chunk, enc.token_features([text_of[k] for k in chunk], layer=layer)):
                    w.add(k, np.asarray(f, dtype=np.float32))
        store.refresh()
    return [np.asarray(store.get_raw(name, k)) for k in keys]


def text_inputs(model, captions: list[str], store_root: Path, progress: bool = True):
    """(text_fn, cache) for PairData: MiniLM models read cached token features, others their processor."""
    proc = model.text_processor
    if proc is None:
        raise ReelsearchError("this model has no text processor")
    if proc.kind != "minilm":
        return (lambda caps, features=None: proc(caps)), None
    from reelsearch.models.text_processor import pad_features

    def minilm_batch(caps, features=None):
        rows = [torch.as_tensor(np.asarray(f, dtype=np.float32)) for f in features]
        feats, lengths = pad_features(rows, proc.dim)
        return {"feats": feats, "lengths": lengths, "mask": torch.arange(feats.size(1))[None, :] < lengths[:, None]}

    return minilm_batch, minilm_token_features(captions, store_root, progress, getattr(proc, "model_dir", None),
                                               getattr(proc, "layer", None))


def split_pairs(model, ctx: DataContext, split: str, device: str | None = None, progress: bool = True,
                store=None) -> PairData:
    """PairData of ``split`` for ``model`` (a JointModel), extracting missing features first."""
    items = ctx.dataset.items(split)
    modalities = list(model.modalities)
    store = store or ctx.ensure_features(items, modalities, device, progress)
    data = build_pair_data(items, store, modalities, text_fn=lambda caps, features=None: {}, desc=f"loading {split}")
    data.text_fn, data.text_cache = text_inputs(model, data.captions, ctx.store_root, progress)
    if data.skipped:
        print(f"note: {len(data.skipped)} {split} items without captions or features were left out")
    return data


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and python so model initialisation (and all else) is reproducible."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_config_of(cfg: dict, epochs: int | None = None, seed: int | None = None):
    """TrainConfig from a model config's ``train`` section (paper defaults), with CLI overrides."""
    from reelsearch.train.trainer import TrainConfig

    t = dict(cfg["train"])
    sched = t.get("schedule") or {"kind": "constant"}
    sched = {k: v for k, v in sched.items() if k != "metric"}
    stop = t.get("early_stopping") or {}
    out = TrainConfig(
        epochs=int(epochs or t.get("epochs") or 30),
        batch_size=int(t.get("batch_size", 128)),
        lr=float(t.get("lr", 2e-4)),
        optimizer=t.get("optimizer", "adam"),
        weight_decay=float(t.get("weight_decay", 0.0)),
        grad_clip=t.get("grad_clip"),
        schedule=sched,
        select="val_loss" if t.get("selection") == "val_loss" else "rsum",
        early_stopping=stop.get("patience") if isinstance(stop, dict) else stop,
        seed=int(seed if seed is not None else t.get("seed", 0)),
    )
    if "checkpoint_every" in t:
        out.checkpoint_every = int(t["checkpoint_every"])
    if t.get("precision"):
        out.precision = str(t["precision"])
    if t.get("warmup_epochs"):
        out.warmup_epochs = int(t["warmup_epochs"])
        out.warmup_loss = t.get("warmup_loss", "vse")
    return out


def loss_of(cfg: dict):
    from reelsearch.losses import create_loss

    t = cfg["train"]
    overrides = {"margin": t["margin"]} if t.get("margin") is not None and t["loss"] != "infonce" else {}
    return create_loss(t["loss"], **overrides)


def train(config: str | Path | dict, data: str | Sequence[str], out: Path,
          features: Path | Sequence[Path] | None = None, epochs: int | None = None,
          device: str | None = None, train_split: str | None = None, val_split: str | None = None,
          seed: int | None = None, progress: bool = True, overrides: dict | None = None, loss: str | None = None,
          warmup_epochs: int | None = None, text_encoder: Path | None = None, precision: str | None = None,
          **data_options) -> dict:
    """Train the model ``config`` (a name, a YAML path or a dict) on ``data`` ("FORMAT:ROOT"), writing to ``out``.

    Several datasets (a list of specs, e.g. Flickr8k images and MSR-VTT videos, Torabi §5.1) train together on the
    union of their train splits (``FORMAT:ROOT:SPLIT`` picks another split); the first one is validated on.
    ``features`` is then one store per dataset, in the same order, or None for every dataset's own cache.

    ``loss`` replaces the config's loss preset (e.g. "annotation" for Torabi's eq. 5), keeping its margin;
    ``warmup_epochs`` trains that many first epochs with sum-of-hinges (every expert of a mixture alike);
    ``precision`` ("fp32" | "bf16") sets the training forward pass's precision (``TrainConfig.precision``);
    ``text_encoder``: an adapted MiniLM folder (``reelsearch adapt-text``) for the configs reading MiniLM features."""
    from reelsearch.models import create_model, load_config, model_config, text_processor_for
    from reelsearch.train.distributed import init_distributed, shutdown

    if isinstance(config, dict):
        cfg = config
    elif Path(config).suffix in (".yaml", ".yml") or Path(config).is_file():
        cfg = load_config(config)
    else:
        cfg = model_config(str(config))
    if overrides:
        from reelsearch.models.registry import _merge

        cfg = _merge(cfg, overrides)
    if loss:
        from reelsearch.losses import create_loss

        create_loss(loss)  # unknown names fail here, before any work
        for c in cfg.get("experts", {"": cfg}).values():
            c["train"]["loss"] = loss
    if warmup_epochs is not None:  # 0 switches a config's warm-up off
        for c in cfg.get("experts", {"": cfg}).values():
            c["train"]["warmup_epochs"] = int(warmup_epochs)
    if precision is not None:
        for c in cfg.get("experts", {"": cfg}).values():
            c["train"]["precision"] = precision
    if text_encoder:
        minilm = [c for c in cfg.get("experts", {"": cfg}).values() if c["model"]["text"]["features"] == "minilm"]
        if not minilm:
            raise ReelsearchError(f"--text-encoder {text_encoder}: model {cfg.get('name')!r} reads no MiniLM features")
        if not (Path(text_encoder) / "modules.json").is_file():
            raise ReelsearchError(f"--text-encoder {text_encoder}: not a sentence-transformers model folder")
        for c in minilm:
            c["model"]["text"]["encoder_dir"] = str(Path(text_encoder).resolve())
    sources = open_sources(data, features, train_split, **data_options)
    ctx = sources[0][0]
    val_split = val_split or ctx.default_val_split()
    if val_split is not None and val_split not in ctx.dataset.splits():
        raise ReelsearchError(f"{ctx.fmt}:{ctx.root}: no split {val_split!r}; it has {', '.join(ctx.dataset.splits())}")
    info = init_distributed(device)
    out = Path(out)
    try:
        if "experts" in cfg:
            return _train_experts(cfg, sources, val_split, out, info, epochs, seed, progress)
        proc = text_processor_for(cfg, training_captions(sources))
        seed_everything(train_config_of(cfg, epochs, seed).seed)
        model = create_model(cfg, proc).to(info.device)
        return _fit(model, cfg, sources, val_split, out, info, epochs, seed, progress)
    finally:
        shutdown(info)


def open_sources(data: str | Sequence[str], features: Path | Sequence[Path] | None = None,
                 train_split: str | None = None, **data_options) -> list[tuple[DataContext, str]]:
    """(DataContext, train split) of each dataset spec; ``features``: None, or one store per spec."""
    specs = [data] if isinstance(data, str) else list(data)
    if not specs:
        raise ReelsearchError("no dataset given (--data FORMAT:ROOT)")
    stores = [features] if isinstance(features, (str, Path)) else list(features or [None] * len(specs))
    if len(stores) != len(specs):
        raise ReelsearchError(f"{len(specs)} datasets but {len(stores)} feature stores: give --features once per "
                              "--data, in the same order, or not at all")
    sources = []
    for spec, store in zip(specs, stores):
        ctx, spec_split = DataContext.open(spec, Path(store) if store is not None else None, **data_options)
        split = train_split or spec_split or "train"
        if split not in ctx.dataset.splits():
            raise ReelsearchError(f"{spec}: no split {split!r}; it has {', '.join(ctx.dataset.splits())}")
        sources.append((ctx, split))
    return sources


def training_captions(sources: list[tuple[DataContext, str]]) -> list[str]:
    """Every caption of the training splits (a vocabulary is built from these)."""
    return [c for ctx, split in sources for it in ctx.dataset.items(split) for c in it.captions]


def _fit(model, cfg, sources, val_split, out, info, epochs, seed, progress) -> dict:
    from reelsearch.io import atomic_write_json
    from reelsearch.train.trainer import Trainer

    dev = str(info.device)
    train_data = PairData.concat([split_pairs(model, ctx, split, dev, progress) for ctx, split in sources])
    ctx = sources[0][0]
    val_data = split_pairs(model, ctx, val_split, dev, progress, store=ctx.store()) if val_split else None
    loss = loss_of(cfg).to(info.device)
    tcfg = train_config_of(cfg, epochs, seed)
    out.mkdir(parents=True, exist_ok=True)
    if info.is_main:
        atomic_write_json(out / "run.json", {
            "config": cfg, "data": [f"{c.fmt}:{c.root}" for c, _ in sources],
            "train_split": [s for _, s in sources], "train_pairs": len(train_data.captions),
            "val_data": f"{ctx.fmt}:{ctx.root}", "val_split": val_split,
            "features": [str(c.store_root) for c, _ in sources]})
    trainer = Trainer(model, loss, train_data, val_data, tcfg, out, info, progress=progress)
    return trainer.fit()


def _train_experts(cfg, sources, val_split, out, info, epochs, seed, progress) -> dict:
    """Mithun et al. 2018 §3.5: each expert is trained separately, then fused."""
    from reelsearch.models import MixtureOfExperts, create_model, load_model, text_processor_for

    ctx = sources[0][0]
    train_caps = training_captions(sources)
    summaries = {}
    for name, ecfg in cfg["experts"].items():
        print(f"training expert {name!r} on {', '.join(ecfg['model']['video']['modalities'])}")
        proc = text_processor_for(ecfg, train_caps)
        seed_everything(train_config_of(ecfg, epochs, seed).seed)
        model = create_model(ecfg, proc).to(info.device)
        summaries[name] = _fit(model, ecfg, sources, val_split, out / "experts" / name, info, epochs, seed, progress)
    experts = {k: load_model(out / "experts" / k / "best") for k in cfg["experts"]}
    moe = MixtureOfExperts(experts, cfg["fusion"], name=cfg["name"], features=cfg.get("features"))
    summary = {"experts": summaries}
    if info.is_main:
        moe.save(out / "best")
        if val_split:
            summary["fused"] = evaluate_model(moe, ctx, val_split, str(info.device), progress)
        from reelsearch.io import atomic_write_json

        atomic_write_json(out / "summary.json", summary)
    return summary


def evaluate_model(model, ctx: DataContext, split: str, device: str | None = None, progress: bool = True) -> dict:
    """Both-direction retrieval metrics of ``model`` on ``split`` (a MixtureOfExperts is fused as configured)."""
    from reelsearch.evaluation import retrieval_metrics
    from reelsearch.models import MixtureOfExperts
    from reelsearch.train.fusion import expert_matrices, fused_metrics
    from reelsearch.train.trainer import embed_and_score

    dev = resolve_device(device)
    if isinstance(model, MixtureOfExperts):
        return fused_metrics(model, *expert_matrices(model, ctx, split, str(dev), progress))
    model = model.to(dev)
    data = split_pairs(model, ctx, split, str(dev), progress)
    return retrieval_metrics(embed_and_score(model, data, dev), data.cap2vid)


def open_eval_split(data: str, split: str | None = None, features: Path | None = None,
                    **data_options) -> tuple[DataContext, str]:
    """The dataset ``data`` and the split to evaluate on: ``split``, the spec's, val/dev, else test."""
    ctx, spec_split = DataContext.open(data, features, **data_options)
    split = split or spec_split or ctx.default_val_split() or "test"
    if split not in ctx.dataset.splits():
        raise ReelsearchError(f"{data}: no split {split!r}; it has {', '.join(ctx.dataset.splits())}")
    return ctx, split


def evaluate(checkpoint: str | Path, data: str, split: str | None = None, features: Path | None = None,
             device: str | None = None, progress: bool = True, **data_options) -> dict:
    """Load ``checkpoint`` and evaluate it on ``data``'s ``split``."""
    from reelsearch.models import load_model

    ctx, split = open_eval_split(data, split, features, **data_options)
    model = load_model(checkpoint)
    res = evaluate_model(model, ctx, split, device, progress)
    res["data"], res["split"] = f"{ctx.fmt}:{ctx.root}", split
    return res
