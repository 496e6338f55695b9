"""Find and load a model: a model folder (``reelsearch.models.folder``), a training run's folder, the model bundled
with the package, or a CLIP- or SigLIP-family checkpoint (``hf:NAME_OR_DIR``, ``reelsearch.models.hf``); and where a
command that derives a model puts it and its report."""

from __future__ import annotations

from pathlib import Path

import torch

from reelsearch.errors import ReelsearchError
from reelsearch.towers.hub import is_hf

from .ensemble import MixtureOfExperts
from .folder import is_model_folder, read_model
from .hf import hf_model
from .query_model import DEFAULT_MODEL, bundled_model_dir

#: The kinds of model a folder may hold, each registered with ``read_model`` by its class (``folder.model_kind``):
#: a mixture's module brings the joint model's.
MODEL_CLASSES = (MixtureOfExperts,)



def default_model_dir() -> Path:
    """The bundled default model's directory (ReelsearchError when this installation does not include it)."""
    directory = bundled_model_dir()
    if not is_model_folder(directory):
        raise ReelsearchError(f"the bundled default model is missing ({directory}); reinstall reelsearch or pass "
                              "a model directory (--model PATH)")
    return directory


def resolve_checkpoint(path: str | Path) -> Path:
    """The model folder behind ``path``: itself, or a training run's ``best/`` (then ``last/``).

    ``"default"`` (when no such folder exists here) is the model bundled with the package.
    """
    if str(path) == DEFAULT_MODEL and not Path(path).exists():
        return default_model_dir()
    path = Path(path)
    for cand in (path, path / "best", path / "last"):
        if is_model_folder(cand):
            return cand
    if not path.exists():
        raise ReelsearchError(f"{path}: no such checkpoint")
    raise ReelsearchError(f"{path}: not a reelsearch model directory (no reelsearch.json, nor an earlier version's "
                          "config.json or moe.json, nor a training run with best/ or last/)")


def load_model(path: str | Path, map_location: str | torch.device = "cpu"):
    """Load the model saved at ``path`` (see :func:`resolve_checkpoint`) with every part its folder names (its
    querybank, ``reelsearch.models.querybank``, included), in eval mode; ``hf:NAME_OR_DIR``: that checkpoint's
    zero-shot model (``reelsearch.models.hf``)."""
    if is_hf(path):
        return hf_model(str(path)).to(map_location)
    return read_model(resolve_checkpoint(path), map_location)


def run_model_dir(out: str | Path) -> Path:
    """``OUT/best``: where a command that derives a model (``fuse``, ``querybank``) saves it, its report going to
    the run folder ``OUT`` beside it, as ``train`` does; ReelsearchError when ``OUT`` is a model folder itself (a
    report never goes into one)."""
    out = Path(out)
    if is_model_folder(out):
        raise ReelsearchError(f"{out}: a model folder; pass a run folder instead (the model goes to {out}/best/, the "
                              "report beside it)")
    return out / "best"


def derived_run(checkpoint, out: str | Path) -> tuple[Path, Path]:
    """(the model folder of ``checkpoint`` (an ``hf:`` checkpoint as it is named), ``OUT/best`` where a model derived
    from it is saved: ``run_model_dir``); ReelsearchError unless ``OUT`` is new, empty or the checkpoint's own run
    folder (it then gains the new part)."""
    directory = checkpoint if is_hf(checkpoint) else resolve_checkpoint(checkpoint)
    out = Path(out)
    best = run_model_dir(out)
    own_run = not is_hf(directory) and directory.resolve() in {(out / sub).resolve() for sub in ("best", "last")}
    if out.exists() and any(out.iterdir()) and not own_run:
        raise ReelsearchError(f"{out}: exists and is not empty; pass a new folder or the model's own run folder")
    return directory, best
