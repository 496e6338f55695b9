"""Typed, versioned configs (``schema``), the feature recipes they carry (``recipe``) and the tuning commands'
configs (``tuning``)."""

from .recipe import FeatureRecipe, ModalityRecipe, TextRecipe, check_compatible, file_identity
from .schema import (
    SCHEMA_VERSION,
    AnyConfig,
    MixtureConfig,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
)
from .tuning import MLMConfig, TuneConfig, TuneTextConfig

__all__ = [
    "SCHEMA_VERSION",
    "AnyConfig",
    "FeatureRecipe",
    "MLMConfig",
    "MixtureConfig",
    "ModalityRecipe",
    "ModelConfig",
    "TextRecipe",
    "TrainConfig",
    "TuneConfig",
    "TuneTextConfig",
    "apply_overrides",
    "check_compatible",
    "config_from_dict",
    "config_to_dict",
    "file_identity",
    "load_config",
]
