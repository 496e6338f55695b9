"""MiniLM's BERT run by ONNX Runtime: the same float32 features as torch, faster on a CPU.

On one core, encoding one short query costs about 2.2x less than in torch, a batch of 8 about 1.4x less and a
batch of 32 the same (docs/benchmarks.md, "Query encoding"); the features agree with torch's to about 5e-6. The
BERT (cut after ``layer`` when a model asks for inner states) is exported once by ``torch.onnx`` (the TorchScript
exporter, opset 17), fused by onnxruntime's transformer optimizer, and cached as ``reelsearch.onnx_runtime`` says,
under a key of the model folder's files, a tuned tail's file (``reelsearch.text.tail``), the layer and the torch and
onnxruntime versions: a tuned tower's export holds its tuned weights. Without ``onnx`` and ``onnxruntime`` (the
``text`` extra), or on a GPU, ``MiniLMEncoder`` runs torch. ``REELSEARCH_TEXT_RUNTIME=torch`` forces torch.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from reelsearch import onnx_runtime as _ort
from reelsearch.cache import cache_root
from reelsearch.io import atomic_path, file_identity
from reelsearch.text.minilm_folder import read_spec, tokenize

logger = logging.getLogger(__name__)

RUNTIME_ENV = "REELSEARCH_TEXT_RUNTIME"
OPSET = 17
EXPORT_FORMAT = 1  # bump when the exported graph changes, so old cached exports are not used
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def resolve_runtime(requested: str | None, device="cpu") -> str:
    """The runtime MiniLM runs in: ``requested`` (None: $REELSEARCH_TEXT_RUNTIME, else "auto"); see
    ``reelsearch.onnx_runtime.resolve_runtime``."""
    return _ort.resolve_runtime(requested, device, RUNTIME_ENV, "MiniLM")


def export_key(folder: Path, layer: int, tail: Path | None = None) -> str:
    """Cache key of an export: what the model folder's files and the ``tail`` file over it hold (each file's name in
    the folder and the digest of its bytes, so a copied or re-saved folder finds its export), the layer, the
    versions of torch and onnxruntime and ``EXPORT_FORMAT``."""
    import onnxruntime  # noqa: PLC0415 - optional package (text extra)

    digest = hashlib.sha256(f"{EXPORT_FORMAT}|{layer}|{torch_version()}|{onnxruntime.__version__}".encode())
    root = Path(folder).resolve()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"|{path.relative_to(root).as_posix()}|{file_identity(path)}".encode())
    if tail is not None:
        digest.update(f"|tail|{file_identity(tail)}".encode())
    return digest.hexdigest()[:24]


def files_digest(digest, files) -> None:
    """Add each of ``files`` (path, size, modification time) to ``digest``: what a cached export of them is keyed
    by (a file changed or replaced gives another key)."""
    for path in files:
        stat = path.stat()
        digest.update(f"|{path}|{stat.st_size}|{stat.st_mtime_ns}".encode())


def torch_version() -> str:
    """The installed torch's version (as ``torch.__version__``), read without importing torch: a cached export is
    found and run by a process that never loads it."""
    return importlib.metadata.version("torch")


def graph_path(folder: str | Path, layer: int, tail: Path | None = None, int8: bool = False) -> Path:
    """Where the export of the BERT of the folder ``folder`` up to ``layer`` (with ``tail``, in int8) is cached."""
    stem = f"minilm-{export_key(Path(folder), layer, tail)}"
    return cache_root() / "onnx" / (f"{stem}-int8.onnx" if int8 else f"{stem}.onnx")


_SHARED: dict[tuple, MiniLMSession] = {}  # MiniLMSession.shared
_SHARED_LOCK = threading.Lock()


class MiniLMSession:
    """A cached float32 MiniLM export (``graph``) of the folder ``folder`` run without torch: the folder's own
    tokenizer (``reelsearch.text.minilm_folder``), then the graph. ``states(texts)`` -> (the last hidden states [N, L,
    hidden], zero at padding; the attention mask [N, L]); ``sentence_features(texts)``: their mean over the mask, L2
    normalised, as ``MiniLMEncoder.sentence_features`` (within float rounding). ValueError for a folder its files do
    not describe."""

    def __init__(self, graph: Path, folder: Path, threads: int | None = None):
        spec = read_spec(Path(folder))
        if spec is None:
            raise ValueError(f"{folder}: not a MiniLM folder its files describe")
        self.graph, self.folder = Path(graph), Path(folder)
        self._tokenizer = spec.tokenizer()
        self.session = _ort.optimized_session(self.graph, threads)
        self._inputs = [i.name for i in self.session.get_inputs()]
        self._lock = threading.Lock()  # the tokenizer is not safe to call from several threads at once

    @classmethod
    def shared(cls, graph: Path, folder: Path, threads: int | None = None) -> MiniLMSession:
        """One session per graph, folder and thread count for the whole process (the cold search's query graphs and
        the text-cue index's sentence embeddings run the same package MiniLM: loaded once)."""
        key = (Path(graph).resolve(), Path(folder).resolve(), threads)
        with _SHARED_LOCK:
            if key not in _SHARED:
                _SHARED[key] = cls(graph, folder, threads)
            return _SHARED[key]

    def states(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            feeds = tokenize(self._tokenizer, list(texts))
        mask = feeds["attention_mask"]
        states = self.session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
        return np.ascontiguousarray(states * mask[..., None], dtype=np.float32), mask

    def sentence_features(self, texts: list[str]) -> np.ndarray:
        states, mask = self.states(texts)
        pooled = states.sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)


class OnnxBert:
    """A Hugging Face BERT (cut after ``layer`` layers) as an ONNX Runtime session: ``self(features)`` -> the last
    hidden states, float32 [B, L, hidden]; ``bert()`` gives the torch module, called only when the graph is exported
    (a cached export needs no torch model: ``hidden`` and ``heads`` say its shape); ``quantize(float_path,
    int8_path)``: run its int8 version instead, made by that function (``reelsearch.text.int8.quantize_export``) from
    the cached float32 export where a float32 encoder made one (a first int8 query after float32 ones exports nothing),
    else from an export of its own. The export is cached by ``export_key(folder, layer)``; a damaged cached file is
    made again, and where the cache cannot be written the export is made in a temporary folder, loaded, and deleted.
    ``tail``: the tuned tail file loaded into the BERT (``reelsearch.text.tail``), part of the key."""

    def __init__(self, bert: Callable[[], object], folder: str | Path, layer: int, hidden: int, heads: int,
                 threads: int | None = None, quantize: Callable[[Path, Path], object] | None = None,
                 tail: Path | None = None):
        self.hidden, self.int8 = int(hidden), quantize is not None
        path = graph_path(folder, layer, tail, self.int8)

        def make(target: Path, atomic: bool) -> None:
            if quantize is None:
                return _export(bert(), target, self.hidden, heads, atomic)

            def quantized(source: Path) -> None:
                if not atomic:
                    return quantize(source, target)
                with atomic_path(target, suffix=".onnx") as tmp_path:
                    quantize(source, tmp_path)

            cached = graph_path(folder, layer, tail)  # the float32 export, where a float32 encoder made it
            if cached.is_file():
                logger.info("reelsearch: quantising the cached MiniLM export to int8 (once): %s", target)
                try:
                    return quantized(cached)
                except OSError:
                    raise  # the int8 graph cannot be written: cached_session makes it in a temporary folder
                except Exception as exc:  # noqa: BLE001 (a damaged float32 export: exported anew below)
                    logger.warning("%s: cannot quantise (%s); exporting again", cached, exc)
            with tempfile.TemporaryDirectory() as tmp:
                source = Path(tmp) / "float32.onnx"
                _export(bert(), source, self.hidden, heads, atomic=False)
                quantized(source)

        # self.path: the cached graph (None: made in a temporary folder, now deleted)
        self.session, self.path = _ort.cached_session(path, make, threads)
        #: The session's input names (of ``INPUTS``), read once (a query's call needs them).
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, features: dict) -> np.ndarray:
        ids = np.asarray(features["input_ids"], dtype=np.int64)
        feeds = {name: np.asarray(features[name], dtype=np.int64) if name in features else np.zeros_like(ids)
                 for name in self.inputs}  # (an export of layer 0 has no use for the mask, and takes none)
        return self.session.run(None, feeds)[0]


def _last_hidden_state(bert):
    """The module torch.onnx exports: plain tensors in, ``bert``'s last hidden states out."""
    import torch  # noqa: PLC0415 - torch: only to export (a cached export runs without it)

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    return LastHiddenState().eval()


def _export(bert, path: Path, hidden: int, heads: int, atomic: bool = True) -> None:
    """Export ``bert`` to ``path`` (atomically, unless the folder is private): torch.onnx, then onnxruntime's BERT
    fusions."""
    import torch  # noqa: PLC0415 - torch: only to export (a cached export runs without it)
    from onnxruntime.transformers.optimizer import optimize_model  # noqa: PLC0415 - optional package (text extra)

    logger.info("reelsearch: exporting MiniLM to ONNX (once): %s", path)
    axes = {"0": "batch", "1": "tokens"}
    with tempfile.TemporaryDirectory() as tmp:
        example = torch.ones(1, 8, dtype=torch.long)
        raw = Path(tmp) / "raw.onnx"
        dynamic = {name: {int(k): v for k, v in axes.items()} for name in (*INPUTS, "last_hidden_state")}
        _ort.export_graph(_last_hidden_state(bert), (example, example, torch.zeros_like(example)), raw, False,
                          list(INPUTS), ["last_hidden_state"], dynamic, opset=OPSET)
        fused = optimize_model(str(raw), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=1)
        if not atomic:
            fused.save_model_to_file(str(path))
            return
        with atomic_path(path, suffix=".onnx") as tmp_path:
            fused.save_model_to_file(str(tmp_path))
