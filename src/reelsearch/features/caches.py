"""A dataset's features, found or made on demand: what `train`, `eval`, `fuse` and `mc eval` read.

Each video modality a model reads is looked up in a FeatureStore: the one the user gave (``--features STORE``,
whose recorded recipe must match the model's), or the cache of that dataset and recipe
(``<cache>/features/<format>-<root name>-<hash>/<modality>-<extractor>-<recipe key>``, see ``reelsearch.cache``).
Items missing from the store are extracted first through the recipe's FeaturePipeline (resumable), so every
command works on a cold cache. Token features of captions (MiniLM) are computed once per text encoder and kept in
``<cache>/text/<encoder>``, keyed by the caption's hash.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.cache import cache_root
from reelsearch.config.recipe import ModalityRecipe, check_compatible
from reelsearch.datasets import load_dataset, parse_data_spec
from reelsearch.errors import ReelsearchError
from reelsearch.features.extract import ExtractConfig, run_extraction
from reelsearch.features.jobs import Job
from reelsearch.features.pairs import build_pair_data
from reelsearch.features.pipeline import FeaturePipeline, unavailable_message
from reelsearch.features.store import FeatureStore
from reelsearch.text.mlm import minilm_features_name

logger = logging.getLogger(__name__)

VAL_SPLITS = ("val", "dev", "validate", "valid")
TOKENS = "tokens"


def dataset_cache_dir(fmt: str, root: str | Path) -> Path:
    """The cache folder of the dataset ``fmt:root``."""
    root = Path(root).resolve()
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:10]
    return cache_root() / "features" / f"{fmt}-{root.name}-{digest}"


def feature_cache_dir(fmt: str, root: str | Path, modality: str, recipe: ModalityRecipe) -> Path:
    """The cache store of one modality of a dataset made by ``recipe``."""
    return dataset_cache_dir(fmt, root) / f"{modality}-{recipe.extractor}-{recipe.key}"


@dataclass
class DatasetSource:
    """A dataset and where its features live: ``store_root`` (a user's store) or, when None, the caches."""

    fmt: str
    root: Path
    dataset: object
    store_root: Path | None = None

    @classmethod
    def open(cls, spec: str, features: str | Path | None = None, **options) -> tuple[DatasetSource, str | None]:
        """The dataset of ``FORMAT:ROOT[:SPLIT]`` and the split the spec names (or None)."""
        fmt, root, split = parse_data_spec(spec)
        return cls(fmt, Path(root), load_dataset(fmt, root, **options),
                   Path(features) if features is not None else None), split

    @property
    def label(self) -> str:
        return f"{self.fmt}:{self.root}"

    def default_val_split(self) -> str | None:
        return next((s for s in VAL_SPLITS if s in self.dataset.splits()), None)

    def check_split(self, split: str) -> str:
        if split not in self.dataset.splits():
            raise ReelsearchError(f"{self.label}: no split {split!r}; it has {', '.join(self.dataset.splits())}")
        return split

    def store_dir(self, modality: str, recipe: ModalityRecipe) -> Path:
        return self.store_root if self.store_root is not None else feature_cache_dir(self.fmt, self.root, modality,
                                                                                      recipe)

    # ---------------------------------------------------------------- features
    def _groups(self, recipes: Mapping[str, ModalityRecipe]) -> dict[Path, dict[str, ModalityRecipe]]:
        """{store folder: {modality: recipe}} of ``recipes``; one store cannot hold a modality made two ways."""
        groups: dict[Path, dict[str, ModalityRecipe]] = {}
        for name, recipe in recipes.items():
            modality = name.split("@")[0]
            group = groups.setdefault(self.store_dir(modality, recipe), {})
            if modality in group and group[modality].key != recipe.key:
                raise ReelsearchError(f"{self.store_root}: one store cannot hold {modality!r} features made two ways "
                                      f"({group[modality].describe()} / {recipe.describe()}); leave out --features "
                                      "to use the per-recipe caches")
            group[modality] = recipe
        return groups

    def check_features(self, recipes: Mapping[str, ModalityRecipe]) -> None:
        """Stop at once, before any extraction or training, when ``recipes``' features cannot be had here: a
        --features store that is not there or holds features of another recipe, or a modality that no extractor
        here can make (e.g. Places365 features, which must be imported) and that the store lacks."""
        for path, group in self._groups(recipes).items():
            if self.store_root is not None and not path.is_dir():
                raise ReelsearchError(f"{path}: no feature store here (--features)")
            store = FeatureStore(path) if path.is_dir() else None
            for modality, recipe in group.items():
                if store is not None and modality in store.modalities():
                    check_compatible(recipe, store.recipe(modality), modality, str(path))
                elif not recipe.available:
                    raise ReelsearchError(f"{self.label}: {unavailable_message(modality, recipe)}")

    def stores(self, items, recipes: Mapping[str, ModalityRecipe], device: str | None = None,
               progress: bool = True) -> dict:
        """{feature name: (FeatureStore, modality in it)} holding ``recipes``' features of ``items``, extracting
        what is missing. A name ``MODALITY@EXPERT`` (a mixture's) is stored as MODALITY in its recipe's store."""
        self.check_features(recipes)
        groups = self._groups(recipes)
        opened = {path: FeatureStore(path) for path in groups}
        for path, group in groups.items():
            self._fill(opened[path], items, group, device, progress)
        return {name: (opened[self.store_dir(name.split("@")[0], recipe)], name.split("@")[0])
                for name, recipe in recipes.items()}

    def _fill(self, store, items, recipes: dict[str, ModalityRecipe], device, progress) -> None:
        """Extract the ``recipes`` features of ``items`` that ``store`` lacks (resumable); features that cannot be
        made here (``check_features`` found them in the store) are left out where the store lacks them."""
        todo = {m: [it for it in items if not store.has(m, it.key)] for m in recipes}
        todo = {m: its for m, its in todo.items() if its}
        if not todo:
            return
        for m in [m for m in todo if not recipes[m].available]:
            logger.warning(f"{len(todo.pop(m))} items of {self.label} have no {m!r} features in {store.root} (they "
                           "cannot be extracted here); they are left out")
        jobs = {}
        for its in todo.values():
            for it in its:
                if it.path is not None:
                    jobs.setdefault(it.key, Job(it.key, Path(it.path), it.start, it.end))
        if not todo:
            return
        if not jobs:
            if all(len(its) == len(items) for its in todo.values()) and not any(m in store.modalities() for m in todo):
                raise ReelsearchError(f"{self.root}: the items lack {', '.join(todo)} features and the dataset has "
                                      "no media files to extract them from; pass --features with precomputed features")
            logger.warning(f"{len({it.key for its in todo.values() for it in its})} items of {self.root} have no "
                           f"features in {store.root} and no media file; they are left out")
            return
        pipeline_groups: dict[tuple, dict[str, ModalityRecipe]] = {}
        for m in todo:  # one decode per item for the features that sample frames alike
            pipeline_groups.setdefault(recipes[m].decode_spec, {})[m] = recipes[m]
        for group in pipeline_groups.values():
            summary = run_extraction(list(jobs.values()), store.root, FeaturePipeline(group, device=device),
                                     ExtractConfig(device=device, progress=progress))
            if summary.failed_items:
                logger.warning(f"{summary.failed_items} items failed extraction (see {store.root}/errors.jsonl); they "
                               "are left out")
        store.refresh()

    def pairs(self, recipes: Mapping[str, ModalityRecipe], split: str, processor=None, device: str | None = None,
              progress: bool = True):
        """PairData of ``split`` with ``recipes``' video features (extracted first where missing) and, for a
        MiniLM ``processor``, its cached token features of the captions."""
        items = self.dataset.items(self.check_split(split))
        stores = self.stores(items, recipes, device, progress)
        data = build_pair_data(items, stores, desc=f"loading {split}", progress=progress)
        data.text_features = caption_features(data.captions, processor, progress)
        if data.skipped:
            logger.warning(f"{len(data.skipped)} {split} items of {self.label} without captions or features were left "
                           "out")
        return data


# ---------------------------------------------------------------- caption token features
def caption_key(caption: str) -> str:
    return hashlib.sha1(caption.encode("utf-8")).hexdigest()[:20]


def caption_features(captions: list[str], processor, progress: bool = True) -> list[np.ndarray] | None:
    """Each caption's token features from a MiniLM ``processor``, computed once and cached per text encoder, tuned
    tail, layer and precision (``<cache>/text/<name>``); None for other processors (their inputs are cheap to
    make)."""
    if processor is None or getattr(processor, "kind", None) != "minilm":
        return None
    name = minilm_features_name(processor.model_dir, processor.layer, getattr(processor, "int8", False),
                                getattr(processor, "tail", None))
    store = FeatureStore(cache_root() / "text" / name)
    keys = [caption_key(c) for c in captions]
    todo = list(dict.fromkeys(k for k in keys if not store.has(TOKENS, k)))
    if todo:
        text_of = dict(zip(keys, captions))
        with store.writer(TOKENS, processor.dim, dtype="float16") as w:
            step = 512
            for i in tqdm(range(0, len(todo), step), desc="caption token features", unit="batch",
                          disable=not progress, leave=False):
                chunk = todo[i:i + step]
                rows = processor.encoder.token_features([text_of[k] for k in chunk], layer=processor.layer)
                for k, f in zip(chunk, rows):
                    w.add(k, np.asarray(f, dtype=np.float32))
        store.refresh()
    return [np.asarray(store.get_raw(TOKENS, k)) for k in keys]
