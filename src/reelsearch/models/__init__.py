"""Joint video-text models: encoders, similarities, joint spaces, ensembles and the named-model registry."""

from .checkpoint import load_model, resolve_checkpoint
from .ensemble import MixtureOfExperts
from .joint import JointModel
from .registry import create_model, list_models, load_config, model_config, text_processor_for
from .text_processor import GloveTextProcessor, MiniLMTextProcessor, TextProcessor, VocabTextProcessor

__all__ = [
    "GloveTextProcessor",
    "JointModel",
    "MiniLMTextProcessor",
    "MixtureOfExperts",
    "TextProcessor",
    "VocabTextProcessor",
    "create_model",
    "list_models",
    "load_model",
    "load_config",
    "model_config",
    "resolve_checkpoint",
    "text_processor_for",
]
