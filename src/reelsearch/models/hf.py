"""A CLIP- or SigLIP-family checkpoint (``hf:NAME_OR_DIR``) as a reelsearch model, zero-shot.

``hf_config(spec)`` is the config of a ``JointModel`` whose inputs are the checkpoint's own embeddings: its video
modality ``clip`` is the image tower's unit-norm embedding of each sampled frame (the ``hf-image`` extractor, with
the checkpoint's image processor: its preprocessing is part of the recipe), its text the text tower's embedding of
the caption (text recipe kind ``hf``, the checkpoint's tokenizer and maximum length). Nothing is learned on top:
a video is the normalised mean of its frames' embeddings (CLIP4Clip's parameter-free "meanP", Luo et al. 2021),
a caption its embedding, compared by cosine; a frame row is the frame's own embedding, so moments and best frames
work as for any model. So ``--model hf:...`` indexes, searches, evaluates, calibrates and fuses like a saved model,
and its frame features feed any architecture (``features.video.appearance`` set to ``hf_frame_recipe``).
"""

from __future__ import annotations

from reelsearch.config import ModelConfig, config_from_dict
from reelsearch.config.recipe import ModalityRecipe, TextRecipe
from reelsearch.config.typed import to_dict
from reelsearch.location import model_location
from reelsearch.towers.clip import shared_towers

from .joint import JointModel

#: The video modality of a tower model (apart from the bundled models' ``appearance``, so a mixture keeps both).
MODALITY = "clip"
#: Frames every 0.5 s, at most 64, decoded at short side 256 (as the bundled models: a mixture decodes once); the
#: checkpoint's image processor then resizes and crops them as it was trained.
SAMPLING = {"sampling": "interval:0.5", "max_frames": 64, "short_side": 256}


def hf_frame_recipe(spec: str) -> ModalityRecipe:
    """The recipe of the image tower's frame embeddings of checkpoint ``spec`` (``hf:NAME_OR_DIR``)."""
    spec = model_location(str(spec))
    towers = shared_towers(spec)
    return ModalityRecipe("hf-image", towers.dim, weights=towers.weights,
                          options={"checkpoint": spec, "preprocessing": towers.preprocessing}, **SAMPLING)


def hf_config(spec: str) -> ModelConfig:
    """The zero-shot JointModel config of checkpoint ``spec`` (see the module docstring)."""
    spec = model_location(str(spec))
    towers = shared_towers(spec)
    side = {"encoder": {"sequence": None, "pool": "mean"}, "projection": {"kind": "l2"}}
    return config_from_dict({
        "name": spec,
        "paper": f"zero-shot {towers.family.upper()} checkpoint {spec} (its own towers, frames averaged)",
        "model": {"text": side, "video": {**side, "attention": None}, "similarity": "cosine"},
        "features": {"video": {MODALITY: to_dict(hf_frame_recipe(spec))},
                     "text": to_dict(TextRecipe("hf", dim=towers.dim, encoder=spec, weights=towers.weights))},
    }, f"model {spec!r}")


def hf_name(spec: str) -> str:
    """A short name of checkpoint ``spec``: its folder's or hub repository's last part (an expert's name)."""
    return str(spec).removeprefix("hf:").rstrip("/").rsplit("/", 1)[-1].partition("@")[0] or "hf"


def hf_model(spec: str) -> JointModel:
    """The zero-shot model of checkpoint ``spec`` (``hf:NAME_OR_DIR``), in eval mode."""
    return JointModel(hf_config(spec)).eval()
