"""Joint video-text models: encoders, similarities, joint spaces, ensembles and the named-model registry."""

from .checkpoint import load_model, resolve_checkpoint
from .ensemble import MixtureOfExperts
from .interface import SearchMode, VideoEmbeddings
from .joint import JointModel
from .registry import create_model, list_models, model_config, resolve_config, text_processor_for
from .text_processor import GloveTextProcessor, MiniLMTextProcessor, TextProcessor, VocabTextProcessor

__all__ = [
    "GloveTextProcessor",
    "JointModel",
    "MiniLMTextProcessor",
    "MixtureOfExperts",
    "SearchMode",
    "TextProcessor",
    "VideoEmbeddings",
    "VocabTextProcessor",
    "create_model",
    "list_models",
    "load_model",
    "model_config",
    "resolve_checkpoint",
    "resolve_config",
    "text_processor_for",
]
