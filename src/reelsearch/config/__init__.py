"""Typed, versioned configs (``schema``) and the feature recipes they carry (``recipe``)."""

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

__all__ = [
    "SCHEMA_VERSION",
    "AnyConfig",
    "FeatureRecipe",
    "MixtureConfig",
    "ModalityRecipe",
    "ModelConfig",
    "TextRecipe",
    "TrainConfig",
    "apply_overrides",
    "check_compatible",
    "config_from_dict",
    "config_to_dict",
    "file_identity",
    "load_config",
]
