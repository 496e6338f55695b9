"""MiniLM sentence embeddings for the text-cue index (its segments and the queries that search it), with or
without torch.

Where torch is loaded already (indexing, ``reelsearch serve``), the process's shared ``MiniLMEncoder`` computes them:
a query's token features (the model's text side) and its sentence embedding come from one pass. Elsewhere (a cold
``reelsearch search``) the package MiniLM's cached export runs without torch (``MiniLMSession``: the same embeddings
within float rounding); where it is not cached, the shared encoder loads torch.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import numpy as np

from reelsearch.text.minilm_folder import read_spec
from reelsearch.text.minilm_onnx import MiniLMSession, graph_path
from reelsearch.text.towers import package_model_dir

_SESSION: list[MiniLMSession] = []  # the torch-free session, once opened
_LOCK = threading.Lock()


def sentence_encoder(texts: Sequence[str]) -> np.ndarray:
    """MiniLM sentence embeddings [N, 384] of ``texts`` (see the module docstring)."""
    session = None if "torch" in sys.modules else _session()
    if session is not None:
        return session.sentence_features(list(texts))
    from reelsearch.text.minilm import shared_encoder  # noqa: PLC0415 - torch: only where no cached export runs

    return shared_encoder().sentence_features(list(texts))


def _session() -> MiniLMSession | None:
    with _LOCK:
        if not _SESSION:
            try:
                folder = package_model_dir()
                spec = read_spec(folder)
                graph = graph_path(folder, spec.layers) if spec is not None else None
                if graph is None or not graph.is_file():
                    return None
                _SESSION.append(MiniLMSession.shared(graph, folder))
            except Exception:  # noqa: BLE001 (no onnxruntime, a damaged file: the shared encoder computes them)
                return None
        return _SESSION[0]
