"""Load any saved model directory: a JointModel, a MixtureOfExperts, or a training run's folder."""

from __future__ import annotations

from pathlib import Path

import torch

from reelsearch.errors import ReelsearchError

#: Name that resolves to the model bundled with the package (src/reelsearch/assets/default-model/).
DEFAULT_MODEL = "default"


def default_model_dir() -> Path:
    """The bundled default model's directory (ReelsearchError when this installation does not include it)."""
    from importlib.resources import files

    directory = Path(str(files("reelsearch") / "assets" / "default-model"))
    if not ((directory / "config.json").is_file() or (directory / "moe.json").is_file()):
        raise ReelsearchError(f"the bundled default model is missing ({directory}); reinstall reelsearch or pass "
                              "a model directory (--model PATH)")
    return directory


def resolve_checkpoint(path: str | Path) -> Path:
    """The model directory behind ``path``: itself, or a training run's ``best/`` (then ``last/``).

    ``"default"`` (when no such folder exists here) is the model bundled with the package.
    """
    if str(path) == DEFAULT_MODEL and not Path(path).exists():
        return default_model_dir()
    path = Path(path)
    for cand in (path, path / "best", path / "last"):
        if (cand / "config.json").is_file() or (cand / "moe.json").is_file():
            return cand
    if not path.exists():
        raise ReelsearchError(f"{path}: no such checkpoint")
    raise ReelsearchError(f"{path}: not a reelsearch model directory (no config.json or moe.json, "
                          "nor a training run with best/ or last/)")


def load_model(path: str | Path, map_location: str | torch.device = "cpu"):
    """Load the model saved at ``path`` (see :func:`resolve_checkpoint`), in eval mode, with its querybank
    (``reelsearch.models.querybank``) when the folder has one."""
    from .ensemble import MOE_FILE, MixtureOfExperts
    from .joint import JointModel
    from .querybank import QueryBank

    directory = resolve_checkpoint(path)
    if (directory / MOE_FILE).is_file():
        model = MixtureOfExperts.load(directory, map_location)
    else:
        model = JointModel.load(directory, map_location)
    model.querybank = QueryBank.load(directory, model)
    return model
