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

Optimising a graph costs more than loading it (MiniLM: about 0.8 s against 0.35 s), so the first session of a cached
graph also saves its optimised graph beside it (``<name>.onnx.opt-<key>``, keyed by the graph file, the
optimisation level, the onnxruntime version and the CPU: an optimised graph may hold kernels for this CPU's
instructions), and later sessions load that with no optimisation to run (the same graph, the same results).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import platform
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from reelsearch.errors import ReelsearchError
from reelsearch.io import atomic_path

logger = logging.getLogger(__name__)

RUNTIMES = ("auto", "onnxruntime", "torch")
OPTIMIZATION_ENV = "REELSEARCH_ORT_OPTIMIZATION"
#: Held while torch.onnx exports: its exporter is not thread-safe (``export_graph``).
_EXPORTING = threading.Lock()
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


@contextlib.contextmanager
def quiet_quantization():
    """Silence what onnxruntime's quantisation says while it runs: it logs advice through the root logger (which
    would otherwise configure it) and warns."""
    root = logging.getLogger()
    quiet, level = logging.NullHandler(), root.level
    root.addHandler(quiet)
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeHandler(quiet)
        root.setLevel(level)


def export_graph(module: torch.nn.Module, example: tuple, path: Path, atomic: bool, input_names: list[str],
                 output_names: list[str], dynamic_axes: dict, opset: int = 17) -> None:
    """``module`` exported by ``torch.onnx`` (the TorchScript exporter) to ``path`` (atomically unless ``atomic`` is
    False: a private folder), traced outside any inference mode (callers often encode under it), without autograd
    and without the exporter's notes. One export at a time in a process (the exporter's global state: two CNNs
    exported at once from two threads, as a cold-cache index does, fail)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_EXPORTING)  # torch.onnx's exporter keeps global state: one export at a time
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")  # the TorchScript exporter's notes
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.no_grad())
        target = stack.enter_context(atomic_path(path, suffix=".onnx")) if atomic else path
        torch.onnx.export(module, example, str(target), dynamo=False, opset_version=opset, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes)


def optimization_level() -> str:
    """The graph optimisation level ``$REELSEARCH_ORT_OPTIMIZATION`` names (default "all")."""
    level = os.environ.get(OPTIMIZATION_ENV) or "all"
    if level not in OPTIMIZATION_LEVELS:
        raise ReelsearchError(f"${OPTIMIZATION_ENV} must be one of {', '.join(OPTIMIZATION_LEVELS)}; got {level!r}")
    return level


def session_options(threads: int | None = None, level: str | None = None):
    """ONNX Runtime session options: ``threads`` intra-op threads (default: torch's), no spinning while idle, the
    graph optimisations ``level`` names (default: ``$REELSEARCH_ORT_OPTIMIZATION``, else all)."""
    import onnxruntime as ort  # noqa: PLC0415 - optional package (media, text extras)

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                               OPTIMIZATION_LEVELS[level or optimization_level()])
    options.intra_op_num_threads = int(threads or torch.get_num_threads())
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # leave idle cores to others
    return options


def cpu_identity() -> str:
    """This CPU's model and instruction-set flags (Linux; elsewhere the platform's processor string)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().split("\n\n", 1)[0].splitlines()  # the first processor's block
        wanted = [line for line in lines if line.split(":")[0].strip() in ("model name", "flags", "Features")]
        if wanted:
            return "\n".join(wanted)
    except OSError:
        pass
    return f"{platform.machine()}|{platform.processor()}"


def optimized_path(path: Path, level: str) -> Path:
    """Where the graph at ``path``, optimised at ``level`` by this onnxruntime on this CPU, is cached."""
    import onnxruntime as ort  # noqa: PLC0415 - optional package (media, text extras)

    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{level}|{ort.__version__}|{cpu_identity()}"
    return path.with_name(f"{path.name}.opt-{hashlib.sha256(key.encode()).hexdigest()[:16]}")


def optimized_session(path: Path, threads: int | None = None):
    """An ONNX Runtime session of the graph at ``path``, optimised as ``$REELSEARCH_ORT_OPTIMIZATION`` says: from the
    optimised graph cached beside it (``optimized_path``), else optimised now and saved there for the next session
    (atomically; where it cannot be saved, or with optimisation off, the session is all there is)."""
    level = optimization_level()
    if level == "off":
        return session(path, session_options(threads, level))
    cached = optimized_path(path, level)
    if cached.is_file():
        try:
            return session(cached, session_options(threads, "off"))  # optimised already
        except Exception as exc:  # noqa: BLE001 (a damaged or foreign file: optimised again below)
            logger.warning("%s: cannot load (%s); optimising again", cached, exc)
    options = session_options(threads, level)
    try:
        with atomic_path(cached, suffix=".onnx") as tmp:
            options.optimized_model_filepath = str(tmp)
            options.log_severity_level = 3  # not onnxruntime's warning that the graph holds this CPU's kernels
            made = session(path, options)
    except OSError as exc:  # a read-only or full cache: this session only
        logger.debug("%s: not cached (%s)", cached, exc)
        return session(path, session_options(threads, level))
    for old in path.parent.glob(f"{path.name}.opt-*"):  # optimised graphs of an earlier file or level
        if old != cached:
            old.unlink(missing_ok=True)
    return made


def session(file: Path, options):
    """An ONNX Runtime session of the graph at ``file`` on the CPU."""
    import onnxruntime as ort  # noqa: PLC0415 - optional package (media, text extras)

    return ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])


def cached_session(path: Path, make: Callable[[Path, bool], object], threads: int | None = None):
    """(an ONNX Runtime session of the graph cached at ``path``, the path or None when it could not be cached).

    ``make(target, atomic)`` writes the graph to ``target`` (atomically when ``atomic``); it is called when ``path``
    is missing or cannot be loaded, and in a temporary folder when the cache cannot be written. Sessions of the
    cached graph start from its cached optimised graph (``optimized_session``).
    """
    if path.is_file():
        try:
            return optimized_session(path, threads), path
        except Exception as exc:  # noqa: BLE001 (a damaged or foreign file: made again below)
            logger.warning("%s: cannot load (%s); exporting again", path, exc)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        make(path, True)
    except OSError:  # a read-only or full cache: export into a temporary folder, load, forget
        with tempfile.TemporaryDirectory() as tmp:
            make(Path(tmp) / path.name, False)
            return session(Path(tmp) / path.name, session_options(threads)), None
    return optimized_session(path, threads), path
