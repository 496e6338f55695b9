"""reelsearch: search video with natural language and describe video with sentences.

Joint video-text embeddings after Torabi et al. 2016, Mithun et al. 2018 and Zhao et al. 2020 (SCDE).

    import reelsearch
    model = reelsearch.load("default")
    model.encode_text(["a dog catches a frisbee"]); model.encode_video(["clip.mp4"])

The names below are imported on first use, so ``import reelsearch`` stays light (see ``reelsearch.api``).
"""

import importlib

__version__ = "0.2.0"

_LAZY = {
    "load": "reelsearch.api",
    "list_models": "reelsearch.api",
    "describe_models": "reelsearch.api",
    "list_pretrained": "reelsearch.api",
    "train": "reelsearch.api",
    "evaluate": "reelsearch.api",
    "cache_info": "reelsearch.cache",
    "clear_cache": "reelsearch.cache",
    "Searcher": "reelsearch.search.searcher",
    "FeaturePipeline": "reelsearch.features.pipeline",
    "create_model": "reelsearch.models.registry",
    "model_config": "reelsearch.models.registry",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'reelsearch' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
