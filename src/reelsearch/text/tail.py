"""A text tower's tuned top layers (``reelsearch tune-text``): the file that holds them, and the module that runs them.

A text tail is a safetensors file with the weights of layers ``first..last-1`` of a sentence-transformers tower's
Transformer (MiniLM's BERT, MPNet) under the tower's own parameter names (``encoder.layer.4.attention.self.query
.weight``, ...), and the metadata ``format: reelsearch.text-tail``, ``first_layer`` and ``last_layer`` (absent: the
tower's last; a tower cut after ``last`` layers, ``tune_text.depth``, keeps only those). It is stored in float32,
float16, or int8: each weight matrix as int8 rows with one float32 scale per row (``<name>.scale``: symmetric,
max |w| / 127), the biases and LayerNorms in float16 (a quarter of float32's size). Loaded over the base tower
(:func:`load_tail`, back in the tower's float32) it gives the tuned tower, so a model carries only the layers it
tuned.

:class:`TowerTop` runs those layers on the hidden states below them (``MiniLMEncoder.token_features(layer=first)``):
what the whole tower computes, from features that can be cached once (tuning trains the top on them).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path

TAIL_FORMAT = "reelsearch.text-tail"
STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "int8": torch.int8}
SCALE = ".scale"  # suffix of an int8 matrix's row scales


def _layer_prefix(i: int) -> str:
    return f"encoder.layer.{i}."


def layer_names(bert, first: int, last: int | None = None) -> list[str]:
    """The parameter and buffer names of ``bert``'s layers ``first..last-1`` (default: to its last layer)."""
    n = int(bert.config.num_hidden_layers) if last is None else last
    prefixes = tuple(_layer_prefix(i) for i in range(first, n))
    return [k for k in bert.state_dict() if k.startswith(prefixes)]


def save_tail(bert, first: int, path: str | Path, dtype: str = "float32", last: int | None = None) -> None:
    """Write layers ``first..last-1`` of ``bert`` (default: to its last) to the tail file ``path`` (atomically),
    stored in ``dtype``."""
    if dtype not in STORE_DTYPES:
        raise ReelsearchError(f"a text tail is stored as {', '.join(STORE_DTYPES)}, got {dtype!r}")
    state = bert.state_dict()
    tensors = _stored({k: state[k].detach().to("cpu", torch.float32) for k in layer_names(bert, first, last)}, dtype)
    with atomic_path(Path(path), suffix=".safetensors") as tmp:
        meta = {"format": TAIL_FORMAT, "first_layer": str(first)}
        if last is not None and last != int(bert.config.num_hidden_layers):
            meta["last_layer"] = str(last)
        save_file(tensors, str(tmp), metadata=meta)


def tail_first_layer(path: str | Path) -> int:
    """The first layer a tail file holds (its metadata); DataFormatError naming the file when it is not one."""
    return tail_layers(path)[0]


def tail_layers(path: str | Path, layers: int | None = None) -> tuple[int, int | None]:
    """The layers ``first..last-1`` a tail file holds (its metadata; ``last`` None: to the tower's last);
    DataFormatError naming the file when it is not one, or (``layers``: the tower's) holds layers beyond the tower's."""
    try:
        with safe_open(str(path), "pt") as fh:
            meta = fh.metadata() or {}
    except Exception as exc:  # noqa: BLE001 (safetensors raises its own error types)
        raise DataFormatError(path, f"cannot read the text tail: {exc}") from exc
    if meta.get("format") != TAIL_FORMAT or not str(meta.get("first_layer", "")).isdigit():
        raise DataFormatError(path, f"not a text tail file (format={meta.get('format')!r}; {TAIL_FORMAT} expected)")
    last = meta.get("last_layer")
    if last is not None and (not str(last).isdigit() or int(last) <= int(meta["first_layer"])):
        raise DataFormatError(path, f"last_layer {last!r}: not above first_layer {meta['first_layer']}")
    first, last = int(meta["first_layer"]), None if last is None else int(last)
    if layers is not None and (last or first + 1) > layers:
        raise DataFormatError(path, f"a tail of layers {first}-{(last or layers) - 1}, but the text tower has "
                                    f"{layers} layers")
    return first, last


def tail_dtype(path: str | Path) -> str:
    """What the tail file ``path`` stores its weight matrices in (a key of ``STORE_DTYPES``)."""
    with safe_open(str(path), "pt") as fh:
        dtypes = {fh.get_slice(k).get_dtype() for k in fh.keys() if not k.endswith(SCALE)}
    return "int8" if "I8" in dtypes else "float32" if "F32" in dtypes else "float16"


def store_tail(path: str | Path, dest: str | Path, dtype: str) -> None:
    """Write the tail file ``path`` at ``dest`` (atomically) stored in ``dtype``: the same layers and metadata (an
    int8 file's rows back to float first); a copy where it is stored so already (nothing where ``dest`` is it)."""
    path, dest = Path(path), Path(dest)
    if dtype not in STORE_DTYPES:
        raise ReelsearchError(f"a text tail is stored as {', '.join(STORE_DTYPES)}, got {dtype!r}")
    tail_layers(path)  # (a tail file, or DataFormatError naming it)
    if tail_dtype(path) == dtype:
        if not (dest.exists() and dest.resolve() == path.resolve()):
            with atomic_path(dest, suffix=".safetensors") as tmp:
                shutil.copyfile(path, tmp)
        return
    with safe_open(str(path), "pt") as fh:
        meta = fh.metadata()
    tensors = _stored(_float_state(path, load_file(str(path))), dtype)
    with atomic_path(dest, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def _stored(state: dict, dtype: str) -> dict:
    """The float32 tensors of ``state`` as a tail file stores them in ``dtype`` (int8: each matrix as int8 rows and
    their scales, the rest float16)."""
    tensors = {}
    for k, value in state.items():
        if dtype == "int8" and value.ndim == 2:
            scale = value.abs().amax(1).clamp_min(1e-12) / 127
            tensors[k] = torch.round(value / scale[:, None]).to(torch.int8).contiguous()
            tensors[k + SCALE] = scale.contiguous()
        else:
            tensors[k] = value.to(torch.float16 if dtype == "int8" else STORE_DTYPES[dtype]).contiguous()
    return tensors


def _float_state(path: Path, state: dict) -> dict:
    """``state`` (a tail file's tensors) with its int8 matrices back to float32 by their row scales."""
    for k in [k for k in state if k.endswith(SCALE)]:
        scale, base = state.pop(k), k[:-len(SCALE)]
        if base not in state or state[base].dtype != torch.int8 or state[base].shape[:1] != scale.shape:
            raise DataFormatError(path, f"{k}: the row scales of no int8 matrix")
        state[base] = state[base].float() * scale[:, None]
    return {k: v.float() for k, v in state.items()}


def load_tail(bert, path: str | Path) -> int:
    """Put the tuned layers of the tail file ``path`` into ``bert`` (cast to its dtype) and return the first of
    them; a file of another tower, or missing some of its layers' weights, is refused, naming the file."""
    n = int(bert.config.num_hidden_layers)
    first, last = tail_layers(path, n)
    n = last or n
    state = _float_state(Path(path), load_file(str(path)))  # int8 rows back to float
    own = bert.state_dict()
    wanted = set(layer_names(bert, first, n))
    unknown = sorted(set(state) - wanted)
    missing = sorted(wanted - set(state))
    if unknown or missing:
        raise DataFormatError(path, f"not the layers {first}-{n - 1} of this text tower (unknown names "
                                    f"{unknown[:3]}, missing {missing[:3]}): tuned from another tower?")
    wrong = [f"{k} {tuple(v.shape)} (tower: {tuple(own[k].shape)})" for k, v in state.items()
             if v.shape != own[k].shape]
    if wrong:
        raise DataFormatError(path, f"weights of another shape: {', '.join(wrong[:3])}")
    with torch.no_grad():
        for k, v in state.items():
            own[k].copy_(v.to(own[k].dtype))
    return first


class TowerTop(nn.Module):
    """Layers ``first..last-1`` (default: to the last) of ``bert``'s Transformer (the same modules, not copies):
    ``top(states, mask)`` runs them on the hidden states after layer ``first`` ([B, L, H] and the [B, L] attention
    mask) and gives layer ``last``'s, as the tower (cut after ``last`` layers) would."""

    def __init__(self, bert, first: int, last: int | None = None):
        super().__init__()
        n = int(bert.config.num_hidden_layers) if last is None else int(last)
        if not 0 <= first < n <= int(bert.config.num_hidden_layers):
            raise ReelsearchError(f"the text tower has layers 0..{int(bert.config.num_hidden_layers) - 1}; cannot "
                                  f"tune layers {first}..{n - 1}")
        self.first = int(first)
        self.layers = nn.ModuleList(bert.encoder.layer[first:n])
        # MPNet adds a relative position bias, computed by its encoder from the states (a method, not a submodule:
        # the encoder's other layers stay out of this module's parameters)
        self._position_bias = getattr(bert.encoder, "compute_position_bias", None)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        additive = (1.0 - mask[:, None, None, :].to(states.dtype)) * torch.finfo(states.dtype).min
        extra = {"position_bias": self._position_bias(states)} if self._position_bias is not None else {}
        for layer in self.layers:
            out = layer(states, attention_mask=additive, **extra)
            states = out[0] if isinstance(out, tuple) else out
        return states
