"""The feature recipes a model reads, whatever names the model — a model folder or training run, the bundled
``default``, an ``hf:`` checkpoint, a named architecture or a config file — and the FeaturePipeline that extracts them
(``reelsearch extract --recipe``)."""

from __future__ import annotations

import logging
from pathlib import Path

from reelsearch.config import AnyConfig, MixtureConfig
from reelsearch.config.recipe import ModalityRecipe
from reelsearch.errors import ReelsearchError
from reelsearch.features.pipeline import FeaturePipeline, unavailable_message
from reelsearch.models.checkpoint import DEFAULT_MODEL, load_model
from reelsearch.models.registry import resolve_config
from reelsearch.towers.hub import is_hf

logger = logging.getLogger(__name__)


def config_recipes(cfg: AnyConfig, spec: str) -> dict[str, ModalityRecipe]:
    """{modality: recipe} of the video features ``cfg`` reads (a mixture's experts together); ReelsearchError when
    two experts read one modality made two ways (``spec``: the model as the user named it)."""
    configs = cfg.experts.values() if isinstance(cfg, MixtureConfig) else [cfg]
    recipes: dict[str, ModalityRecipe] = {}
    for c in configs:
        for m, r in c.features.video.items():
            if recipes.setdefault(m, r).key != r.key:
                raise ReelsearchError(f"--recipe {spec}: its experts read {m!r} made two ways; extract each "
                                      "expert's features into its own store")
    return recipes


def recipe_pipeline(spec: str, device: str | None = None, batch_size: int | None = None) -> FeaturePipeline:
    """The pipeline extracting what model ``spec`` reads.

    A saved model (a model or run folder, ``default``): every recipe it reads. A named model or a config file: the
    recipes reelsearch can extract here; each other one is left out with a warning (logged) saying what to import
    instead (``unavailable_message``); ReelsearchError when none can be extracted."""
    if spec == DEFAULT_MODEL or is_hf(spec) or Path(spec).is_dir():
        return FeaturePipeline(load_model(spec).recipes, device=device, batch_size=batch_size)
    recipes = config_recipes(resolve_config(spec), spec)
    cannot = {m: r for m, r in recipes.items() if not r.available}
    if len(cannot) == len(recipes):
        raise ReelsearchError(f"--recipe {spec}: " + "; ".join(unavailable_message(m, r) for m, r in cannot.items()))
    for m, r in cannot.items():  # extract what can be, say what must be imported
        logger.warning(unavailable_message(m, r))
    return FeaturePipeline({m: r for m, r in recipes.items() if m not in cannot}, device=device,
                           batch_size=batch_size)
