"""Joint video-text models: encoders, similarities, joint spaces, ensembles and the named-model registry.

The names below are imported on first use, so that a torch-free part of the package (the querybank, the query
graphs a cold search runs: ``reelsearch.models.query_graphs``) is imported without loading torch.
"""

import importlib

_LAZY = {
    "load_model": ".checkpoint",
    "resolve_checkpoint": ".checkpoint",
    "MixtureOfExperts": ".ensemble",
    "SearchMode": ".embeddings",
    "VideoEmbeddings": ".embeddings",
    "JointModel": ".joint",
    "create_model": ".registry",
    "list_models": ".registry",
    "model_config": ".registry",
    "resolve_config": ".registry",
    "text_processor_for": ".registry",
    "GloveTextProcessor": ".text_processor",
    "MiniLMTextProcessor": ".text_processor",
    "TextProcessor": ".text_processor",
    "VocabTextProcessor": ".text_processor",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'reelsearch.models' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
