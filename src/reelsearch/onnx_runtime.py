"""Running torch models in ONNX Runtime on a CPU: the one policy that MiniLM (``reelsearch.text.minilm_onnx``) and
the frame CNNs (``reelsearch.features.extractors.appearance``) share.

A model is exported once by ``torch.onnx`` and cached in ``<cache>/onnx/`` (``reelsearch.cache``) under a key of its
weights and the torch and onnxruntime versions; a damaged cached file is made again, and where the cache cannot be
written the export is made in a temporary folder, loaded, and deleted. Exporting needs the ``onnx`` package, running
needs ``onnxruntime``; without them, or on a GPU, the model runs in torch. Each user has its own environment
variable that forces a runtime (``REELSEARCH_TEXT_RUNTIME``, ``REELSEARCH_CNN_RUNTIME``).
``REELSEARCH_ORT_OPTIMIZATION`` sets ONNX Runtime's graph optimisations for every session (``all``, the default;
``extended``, ``basic`` or ``off``): fused kernels give other last bits than unfused ones, so ``off`` stands in for
another CPU's arithmetic when checking that nothing depends on them (docs/testing.md).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from reelsearch.errors import ReelsearchError

logger = logging.getLogger(__name__)

RUNTIMES = ("auto", "onnxruntime", "torch")
OPTIMIZATION_ENV = "REELSEARCH_ORT_OPTIMIZATION"
#: ``$REELSEARCH_ORT_OPTIMIZATION`` values and the ``onnxruntime.GraphOptimizationLevel`` member each names.
OPTIMIZATION_LEVELS = {"all": "ORT_ENABLE_ALL", "extended": "ORT_ENABLE_EXTENDED", "basic": "ORT_ENABLE_BASIC",
                       "off": "ORT_DISABLE_ALL"}


def onnxruntime_unavailable(device="cpu") -> str | None:
    """Why a model on ``device`` cannot run in ONNX Runtime here (None when it can)."""
    if torch.device(device).type != "cpu":
        return f"the model is on {device}; ONNX Runtime runs it on the CPU only"
    for package in ("onnxruntime", "onnx"):
        if importlib.util.find_spec(package) is None:
            return f"the {package} package is not installed (pip install {package})"
    return None


def resolve_runtime(requested: str | None, device="cpu", env: str = "", what: str = "the model") -> str:
    """The runtime ``what`` runs in: ``requested`` (None: ``$env``, else "auto"). "auto" is ONNX Runtime where it
    can run and torch elsewhere; asking for "onnxruntime" where it cannot run warns and gives torch."""
    from_env = os.environ.get(env) if env else None
    requested = requested or from_env or "auto"
    if requested not in RUNTIMES:
        raise ReelsearchError(f"runtime of {what} must be one of {', '.join(RUNTIMES)}; got {requested!r}"
                              + (f" (from ${env})" if requested == from_env else ""))
    if requested == "torch":
        return "torch"
    reason = onnxruntime_unavailable(device)
    if reason:
        if requested == "onnxruntime":
            warnings.warn(f"ONNX Runtime unavailable for {what}, using torch: {reason}", RuntimeWarning, stacklevel=3)
        return "torch"
    return "onnxruntime"


def session_options(threads: int | None = None):
    """ONNX Runtime session options: ``threads`` intra-op threads (default: torch's), no spinning while idle, the
    graph optimisations ``$REELSEARCH_ORT_OPTIMIZATION`` names (default all)."""
    import onnxruntime as ort  # noqa: PLC0415 - optional package (media, text extras)

    level = os.environ.get(OPTIMIZATION_ENV) or "all"
    if level not in OPTIMIZATION_LEVELS:
        raise ReelsearchError(f"${OPTIMIZATION_ENV} must be one of {', '.join(OPTIMIZATION_LEVELS)}; got {level!r}")
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[level])
    options.intra_op_num_threads = int(threads or torch.get_num_threads())
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # leave idle cores to others
    return options


def cached_session(path: Path, make: Callable[[Path, bool], object], options):
    """(an ONNX Runtime session of the graph cached at ``path``, the path or None when it could not be cached).

    ``make(target, atomic)`` writes the graph to ``target`` (atomically when ``atomic``); it is called when ``path``
    is missing or cannot be loaded, and in a temporary folder when the cache cannot be written.
    """
    import onnxruntime as ort  # noqa: PLC0415 - optional package (media, text extras)

    def load(file: Path):
        return ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])

    if path.is_file():
        try:
            return load(path), path
        except Exception as exc:  # noqa: BLE001 (a damaged or foreign file: made again below)
            logger.warning("%s: cannot load (%s); exporting again", path, exc)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        make(path, True)
    except OSError:  # a read-only or full cache: export into a temporary folder, load, forget
        with tempfile.TemporaryDirectory() as tmp:
            make(Path(tmp) / path.name, False)
            return load(Path(tmp) / path.name), None
    return load(path), path
