"""Model folders written before the manifest (no ``reelsearch.json``): the parts their files imply.

Earlier versions wrote a joint model as ``config.json`` + ``model.safetensors`` (a tuned CNN tail and an adapted text
encoder named, relative to the folder, by the config's recipe; a version-1 config names its encoder by an absolute
``text_processor.model_dir``), a mixture as ``moe.json`` + ``experts/<name>/``, and ``querybank.safetensors`` and
``MODEL_CARD.md`` beside either. ``legacy_manifest`` lists those files as a manifest's parts, so the one reader
(``reelsearch.models.folder``) loads them as it loads a folder of this version. Nothing writes this layout any more.
"""

from __future__ import annotations

from pathlib import Path

from reelsearch.config.recipe import MINILM_PACKAGE

from .calibration import read_json_object
from .parts import CARD_FILE, CONFIG_FILE, MOE_FILE, WEIGHTS_FILE
from .querybank import BANK_FILE

#: The file whose presence made an earlier version take a folder for a model (a mixture's first).
ROOT_FILES = (MOE_FILE, CONFIG_FILE)


def is_legacy_folder(directory: Path) -> bool:
    return any((Path(directory) / name).is_file() for name in ROOT_FILES)


def legacy_manifest(directory: Path) -> dict | None:
    """{"model", "name", "parts"} of an earlier version's model folder; None when ``directory`` is not one."""
    directory = Path(directory)
    if (directory / MOE_FILE).is_file():
        meta = read_json_object(directory / MOE_FILE)
        kind, name = "mixture-of-experts", meta.get("name", "")
        parts = [{"kind": "config", "files": [MOE_FILE]}]
        parts += [{"kind": "expert", "name": k, "files": [f"experts/{k}"]} for k in meta.get("experts") or []]
    elif (directory / CONFIG_FILE).is_file():
        meta = read_json_object(directory / CONFIG_FILE)
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        kind, name = "joint-model", config.get("name", "")
        parts = [{"kind": "config", "files": [CONFIG_FILE]}, {"kind": "weights", "files": [WEIGHTS_FILE]}]
        parts += _recipe_files(config.get("features"), meta.get("text_processor"))
    else:
        return None
    parts += [{"kind": k, "files": [f]} for k, f in (("querybank", BANK_FILE), ("model-card", CARD_FILE))
              if (directory / f).is_file()]
    return {"model": kind, "name": name, "parts": parts}


def _recipe_files(features, text_processor) -> list[dict]:
    """The tails and the text encoder a config's recipe names (version 2), or a version-1 config's encoder."""
    parts = []
    features = features if isinstance(features, dict) else {}
    video = features.get("video") if isinstance(features.get("video"), dict) else {}  # version 1: a list of names
    for modality, recipe in video.items():
        tail = (recipe.get("options") or {}).get("tail") if isinstance(recipe, dict) else None
        if tail:
            parts.append({"kind": "cnn-tail", "modality": modality, "files": [tail]})
    text = features.get("text") if isinstance(features.get("text"), dict) else {}  # version 1: a kind name
    encoder = text.get("encoder") or (text_processor or {}).get("model_dir")
    if encoder and encoder != MINILM_PACKAGE:
        parts.append({"kind": "text-encoder", "files": [encoder]})
    return parts
