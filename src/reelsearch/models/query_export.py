"""Export a loaded model's text side for ``reelsearch.models.query_graphs``: each expert's text tower (the text
encoder and projection over MiniLM's token features) to ONNX, once, and the manifest a cold search reads.

Only where torch is loaded anyway (``reelsearch.search.Searcher`` loading a model folder: indexing, a search that
loads the model): a model whose text side is not float32 MiniLM in ONNX Runtime (GloVe or vocabulary text, int8, a
CLIP tower, torch forced) gets no graphs, and its searches load it in torch as before. A tuned tail (``reelsearch
tune-text``, a tower cut short included) is in MiniLM's export: its graphs run it; so is a model's student text
encoder (``reelsearch.models.student_text``: its cut tower and its experts' text towers, graphs of their own).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import torch
from torch import nn

from reelsearch import onnx_runtime as _ort
from reelsearch.config import config_to_dict
from reelsearch.io import atomic_path, atomic_write_json
from reelsearch.text.minilm_onnx import OPSET, torch_version
from reelsearch.towers.hub import is_hf

from .checkpoint import load_model, resolve_checkpoint
from .query_graphs import FORMAT, TOWER_INPUTS, TOWER_OUTPUT, VERSION, graphs_dir, manifest_path
from .query_model import manifest_fields
from .text_processor import MiniLMTextProcessor

logger = logging.getLogger(__name__)


class _Tower(nn.Module):
    """An expert's text side after MiniLM: token features [B, L, H] (zero at padding) and their mask [B, L] -> the
    caption embedding [B, D], as ``JointModel.text_forward`` computes it."""

    def __init__(self, expert):
        super().__init__()
        self.encoder, self.projection = expert.text_encoder, expert.text_projection

    def forward(self, features, mask):
        return self.projection(self.encoder(features, mask.sum(1)))


def tower_key(expert) -> str:
    """The key of an expert's tower graph: a hash of its text encoder's and projection's weights and config, the
    torch version and the graph format."""
    digest = hashlib.sha256(f"{FORMAT}|{VERSION}|{torch_version()}|{config_to_dict(expert.config.model.text)}"
                            .encode())
    for key, tensor in sorted(expert.state_dict().items()):
        if key.startswith(("text_encoder.", "text_projection.")):
            digest.update(key.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:24]


def load_for_search(path: str | Path):
    """The torch model at ``path`` (``reelsearch.models.checkpoint.load_model``), its query graphs exported when it
    is a model folder whose text side they can run (a failure is logged: its searches keep loading torch)."""
    model = load_model(path)
    if not is_hf(path):
        try:
            export_query_graphs(model, resolve_checkpoint(path))
        except Exception as exc:  # noqa: BLE001 (an export that fails costs the next cold search its speed only)
            logger.warning("reelsearch: the query graphs of %s were not exported (%s: %s); searches load the model "
                           "in torch", path, type(exc).__name__, exc)
    return model


def export_query_graphs(model, folder: str | Path) -> Path | None:
    """The manifest of ``model``'s query graphs (the model loaded from the model folder ``folder``), exported now
    when missing; None (nothing written) when its text side cannot run so, or the cache cannot be written."""
    path = manifest_path(folder)
    if path.is_file():
        return path
    if not model.inner_product:  # (searched by an exact scan, ranks or frame attention: QueryModel serves none)
        return None
    side = _text_side(dict(model.experts))
    if side is None:
        return None
    student = getattr(model, "student_text", None)  # its graphs too where they can run it (else a search with it
    student = _text_side(student.towers(model)) if student is not None else None  # loads the torch model)
    if student is not None:
        side["student"] = student
    manifest = {"format": FORMAT, "version": VERSION, "model": str(Path(folder).resolve()),
                "fingerprint": model.fingerprint(), "serving": model.serving_text_encoder, **side,
                **manifest_fields(model)}
    try:
        atomic_write_json(path, manifest)
    except OSError as exc:
        logger.debug("%s: not written (%s)", path, exc)
        return None
    return path


def _text_side(experts: dict) -> dict | None:
    """``{"minilm": the tower's graph, "experts": each expert's tower graph}`` of ``experts`` (the model's, or its
    student's: ``StudentText.towers``), exported now where missing; None where their text side cannot run so."""
    processors = [e.text_processor for e in experts.values()]
    if not all(isinstance(p, MiniLMTextProcessor) and not p.int8 for p in processors):
        return None
    layers = {p.layer for p in processors}
    encoders = {id(p.encoder): p.encoder for p in processors}
    if len(layers) != 1 or len(encoders) != 1:
        return None
    encoder, layer = next(iter(encoders.values())), layers.pop()
    minilm = encoder.onnx_graph(layer)
    if minilm is None:
        return None
    if minilm.parent != graphs_dir():  # the process's encoder exported it under another cache folder: copied here
        try:
            minilm = _copied_here(minilm)
        except OSError as exc:
            logger.debug("%s: not copied into %s (%s)", minilm, graphs_dir(), exc)
            return None
    entries = []
    for name, expert in experts.items():
        graph = graphs_dir() / f"tower-{tower_key(expert)}.onnx"
        _ort.cached_session(graph, lambda target, atomic, e=expert: _export(e, target, atomic, encoder.dim))
        entries.append({"name": name, "graph": graph.name, "dim": int(expert.dim), "row_dim": int(expert.row_dim)})
    return {"minilm": {"folder": str(encoder.folder), "graph": minilm.name}, "experts": entries}


def _copied_here(graph: Path) -> Path:
    """The graph ``graph`` (named by what it holds: ``reelsearch.text.minilm_onnx.export_key``) in this cache folder,
    copied atomically when it is not there yet."""
    target = graphs_dir() / graph.name
    if not target.is_file():
        with atomic_path(target, suffix=".onnx") as tmp:
            shutil.copyfile(graph, tmp)
    return target


def _export(expert, target: Path, atomic: bool, hidden: int) -> None:
    logger.info("reelsearch: exporting a text tower to ONNX (once): %s", target)
    example = (torch.zeros(2, 5, hidden), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    axes = {"features": {0: "batch", 1: "tokens"}, "mask": {0: "batch", 1: "tokens"}, TOWER_OUTPUT: {0: "batch"}}
    _ort.export_graph(_Tower(expert).eval(), example, target, atomic, list(TOWER_INPUTS), [TOWER_OUTPUT], axes,
                      opset=OPSET)
