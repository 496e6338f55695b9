"""Training state on disk without pickle: tensors in safetensors, everything else in JSON.

A state directory holds ``state.safetensors`` (optimizer tensors, RNG states) and ``state.json`` (epoch, step,
optimizer/scheduler scalars, python and numpy RNG, history, best metric). It is written to a temporary directory and
renamed into place, so a kill at any moment leaves either the old state or the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from reelsearch.errors import ReelsearchError
from reelsearch.io import recover_dir, replace_dir


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return {"__tuple__": [_to_jsonable(x) for x in obj]}
    if isinstance(obj, list):
        return [_to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return {"__ndarray__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    return obj


def _from_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        if "__tuple__" in obj:
            return tuple(_from_jsonable(x) for x in obj["__tuple__"])
        if "__ndarray__" in obj:
            return np.asarray(obj["__ndarray__"], dtype=obj["dtype"])
        return {k: _from_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_jsonable(x) for x in obj]
    return obj


def optimizer_to_flat(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer state dict into tensors (for safetensors) and JSON."""
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}
    for idx, st in sd["state"].items():
        for name, val in st.items():
            if torch.is_tensor(val):
                tensors[f"optim/{idx}/{name}"] = val.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = _to_jsonable(val)
    return tensors, {"param_groups": _to_jsonable(sd["param_groups"]), "scalars": scalars}


def optimizer_from_flat(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Inverse of :func:`optimizer_to_flat`."""
    state: dict[int, dict] = {}
    for key, val in tensors.items():
        if not key.startswith("optim/"):
            continue
        _, idx, name = key.split("/", 2)
        state.setdefault(int(idx), {})[name] = val
    for idx, st in meta["scalars"].items():
        state.setdefault(int(idx), {}).update(_from_jsonable(st))
    opt.load_state_dict({"state": state, "param_groups": _from_jsonable(meta["param_groups"])})


def rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    """Capture torch, numpy and python RNG states."""
    tensors = {"rng/torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng/cuda{i}"] = s
    return tensors, {"numpy": _to_jsonable(np.random.get_state()), "python": _to_jsonable(random.getstate())}


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Restore what :func:`rng_state` captured."""
    torch.set_rng_state(tensors["rng/torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng/cuda"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    np.random.set_state(_from_jsonable(meta["numpy"]))
    random.setstate(_from_jsonable(meta["python"]))


@contextlib.contextmanager
def preserved_rng():
    """Run a block, then put torch's, numpy's and python's random states back as they were."""
    tensors, meta = rng_state()
    try:
        yield
    finally:
        set_rng_state(tensors, meta)


def save_training_state(path: Path, optimizer: torch.optim.Optimizer, info: dict,
                        extra_tensors: dict[str, torch.Tensor] | None = None) -> None:
    """Atomically write optimizer + RNG + ``info`` (JSON-able) to the directory ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    opt_t, opt_meta = optimizer_to_flat(optimizer)
    rng_t, rng_meta = rng_state()
    tensors = {**opt_t, **rng_t, **(extra_tensors or {})}
    save_file(tensors, str(tmp / "state.safetensors"))
    (tmp / "state.json").write_text(json.dumps({"optimizer": opt_meta, "rng": rng_meta, "info": _to_jsonable(info)}))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    replace_dir(tmp, path)


def load_training_state(path: Path, optimizer: torch.optim.Optimizer | None = None,
                        restore_rng: bool = True) -> tuple[dict, dict[str, torch.Tensor]]:
    """Read a state directory; restore the optimizer and RNGs; return (info, tensors)."""
    path = recover_dir(path)
    try:
        tensors = load_file(str(path / "state.safetensors"))
        meta = json.loads((path / "state.json").read_text())
    except (OSError, ValueError) as exc:
        raise ReelsearchError(f"{path}: unreadable training state ({exc})") from exc
    if optimizer is not None:
        optimizer_from_flat(optimizer, tensors, meta["optimizer"])
    if restore_rng:
        set_rng_state(tensors, meta["rng"])
    return _from_jsonable(meta["info"]), tensors
