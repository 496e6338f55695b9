"""A CLIP- or SigLIP-family checkpoint's two towers, numpy in and out, in torch or ONNX Runtime.

``Towers(folder)`` reads a checkpoint in the Hugging Face layout (``CLIPModel`` or ``SiglipModel`` with its
tokenizer and image processor config) and gives unit-norm embeddings of captions (``encode_text``) and of frames
(``encode_images``: uint8 [T, H, W, 3] RGB): the checkpoint's own tokenizer (padding and maximum length as the
family was trained: SigLIP to its maximum length, CLIP to the longest caption) and its own image processor (resize,
crop, rescale, normalisation), then ``get_text_features`` / ``get_image_features``, L2-normalised. ``preprocessing``
holds the facts of both that decide the embeddings (a feature recipe's options).

On a CPU each tower runs in ONNX Runtime (``runtime``, default ``$REELSEARCH_CLIP_RUNTIME``, else "auto"): exported
once by ``torch.onnx`` and cached in ``<cache>/onnx/`` under a key of the checkpoint's weights, the tower and the
torch and onnxruntime versions (``reelsearch.onnx_runtime``); ``int8``: its weight products quantised (ONNX
Runtime dynamic quantisation, cached beside the float32 graph).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import torch

from reelsearch import onnx_runtime
from reelsearch.cache import cache_root
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path, file_identity

from .hub import checkpoint_dir

logger = logging.getLogger(__name__)

RUNTIME_ENV = "REELSEARCH_CLIP_RUNTIME"
FAMILIES = ("clip", "siglip")
EXPORT_FORMAT = 1  # bump when the exported graphs change, so old cached exports are not used
OPSET = 17
TEXT, IMAGE = "text", "image"


def _read_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataFormatError(folder / "config.json", f"cannot read the checkpoint's config ({exc})") from None


def weights_identity(folder: Path) -> str:
    """``sha256:<16 hex>`` of the checkpoint's weight files (their digests, in name order)."""
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        raise DataFormatError(folder, "no weights (*.safetensors or pytorch_model.bin) in the checkpoint folder")
    if len(files) == 1:
        return file_identity(files[0])
    joined = "|".join(f"{f.name}:{file_identity(f)}" for f in files)
    return "sha256:" + hashlib.sha256(joined.encode()).hexdigest()[:16]


class _Normalised(torch.nn.Module):
    """One tower of a CLIP-family model as a module of plain tensors: its features, L2-normalised."""

    def __init__(self, model, tower: str):
        super().__init__()
        self.model, self.tower = model, tower

    def forward(self, *inputs):
        if self.tower == IMAGE:
            out = self.model.get_image_features(pixel_values=inputs[0])
        else:
            out = self.model.get_text_features(input_ids=inputs[0], attention_mask=inputs[1])
        out = out if isinstance(out, torch.Tensor) else out.pooler_output
        return torch.nn.functional.normalize(out.float(), dim=-1)


class Towers:
    """See the module docstring. ``spec``: ``hf:NAME_OR_DIR`` or a checkpoint folder."""

    def __init__(self, spec: str | Path, runtime: str | None = None, int8: bool = False, threads: int | None = None):
        self.spec = str(spec)
        self.folder = checkpoint_dir(self.spec) if self.spec.startswith("hf:") else Path(spec).resolve()
        config = _read_config(self.folder)
        self.family = str(config.get("model_type", ""))
        if self.family not in FAMILIES:
            raise DataFormatError(self.folder / "config.json", f"model_type {self.family!r}: reelsearch runs "
                                  f"{' and '.join(FAMILIES)} checkpoints (CLIPModel, SiglipModel)")
        text = config.get("text_config") or {}
        self.dim = int(config.get("projection_dim") or 512) if self.family == "clip" else \
            int(text.get("hidden_size") or 768)
        self.max_length = int(text.get("max_position_embeddings") or (77 if self.family == "clip" else 64))
        self.weights = weights_identity(self.folder)
        self.runtime = onnx_runtime.resolve_runtime(runtime, "cpu", RUNTIME_ENV, f"hf:{self.folder.name}")
        self.int8 = bool(int8) and self.runtime == "onnxruntime"
        self.threads = threads
        self._model = self._tokenizer = self._processor = None
        self._sessions: dict[str, object] = {}
        self._lock = threading.Lock()

    # ---- the checkpoint's own parts, loaded on first use
    @property
    def model(self):
        """The transformers model (eval mode, float32)."""
        if self._model is None:
            from transformers import AutoModel  # noqa: PLC0415 - optional package (text extra)

            with _quiet_transformers():
                self._model = AutoModel.from_pretrained(str(self.folder), dtype=torch.float32).eval()
        return self._model

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer  # noqa: PLC0415 - optional package (text extra)

            with _quiet_transformers():
                self._tokenizer = AutoTokenizer.from_pretrained(str(self.folder))
        return self._tokenizer

    @property
    def processor(self):
        if self._processor is None:
            from transformers import AutoImageProcessor  # noqa: PLC0415 - optional package (text extra)

            with _quiet_transformers():
                self._processor = AutoImageProcessor.from_pretrained(str(self.folder))
        return self._processor

    @property
    def padding(self) -> str:
        """How captions are padded: SigLIP was trained on captions padded to its maximum length, CLIP's pooling
        reads the end token, so padding to the longest caption gives the same embeddings."""
        return "max_length" if self.family == "siglip" else "longest"

    @property
    def preprocessing(self) -> dict:
        """What decides the embeddings besides the weights: the image processor's settings and the text's."""
        keys = ("do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale", "rescale_factor",
                "do_normalize", "image_mean", "image_std", "do_convert_rgb")
        path = self.folder / "preprocessor_config.json"
        try:
            image = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except ValueError as exc:
            raise DataFormatError(path, f"not JSON ({exc})") from None
        image = image.get("image_processor", image)  # (a processor_config.json nests it)
        return {"family": self.family, "image": {k: image[k] for k in keys if k in image},
                "text": {"max_length": self.max_length, "padding": self.padding}}

    # ---- inputs
    def tokens(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Token ids and attention mask, int64 [N, L]."""
        out = self.tokenizer(list(texts), padding=self.padding, truncation=True, max_length=self.max_length,
                             return_tensors="np")
        ids = np.asarray(out["input_ids"], np.int64)
        mask = np.asarray(out.get("attention_mask", np.ones_like(ids)), np.int64)
        return {"input_ids": ids, "attention_mask": mask}

    def pixels(self, frames: np.ndarray) -> np.ndarray:
        """uint8 [T, H, W, 3] RGB -> float32 [T, 3, S, S] as the checkpoint's image processor makes them."""
        frames = np.asarray(frames)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            raise ReelsearchError(f"frames must be uint8 [T, H, W, 3] RGB, got {frames.dtype} {frames.shape}")
        out = self.processor(images=list(frames), return_tensors="np")["pixel_values"]
        return np.ascontiguousarray(out, dtype=np.float32)

    # ---- embeddings
    def encode_text(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Unit-norm caption embeddings, float32 [N, dim]."""
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), batch_size):
            tokens = self.tokens(texts[start:start + batch_size])
            out[start:start + len(tokens["input_ids"])] = self._run(TEXT, tokens["input_ids"],
                                                                     tokens["attention_mask"])
        return out

    def encode_images(self, frames: np.ndarray, batch_size: int = 16) -> np.ndarray:
        """Unit-norm embeddings of frames (uint8 [T, H, W, 3] RGB), float32 [T, dim], in batches."""
        out = np.zeros((len(frames), self.dim), np.float32)
        for start in range(0, len(frames), batch_size):
            pixels = self.pixels(frames[start:start + batch_size])
            out[start:start + len(pixels)] = self._run(IMAGE, pixels)
        return out

    def _run(self, tower: str, *inputs: np.ndarray) -> np.ndarray:
        session = self.session(tower) if self.runtime == "onnxruntime" else None
        if session is not None:
            names = [i.name for i in session.get_inputs()]
            return session.run(None, dict(zip(names, inputs, strict=False)))[0]
        with torch.inference_mode():
            return _Normalised(self.model, tower)(*(torch.from_numpy(x) for x in inputs)).numpy()

    # ---- ONNX Runtime
    def export_key(self, tower: str) -> str:
        import onnxruntime  # noqa: PLC0415 - optional package (text extra)

        key = f"{EXPORT_FORMAT}|{self.weights}|{tower}|{self.max_length}|{torch.__version__}|{onnxruntime.__version__}"
        return hashlib.sha256(key.encode()).hexdigest()[:24]

    def session(self, tower: str):
        """The ONNX Runtime session of ``tower`` (exported and cached on first use); None, with a warning and the
        runtime switched to torch, when exporting or loading fails."""
        with self._lock:
            if tower not in self._sessions and self.runtime == "onnxruntime":
                path = cache_root() / "onnx" / f"{self.family}-{tower}-{self.export_key(tower)}" \
                    f"{'-int8' if self.int8 else ''}.onnx"
                try:
                    self._sessions[tower] = onnx_runtime.cached_session(
                        path, lambda target, atomic: self._make(tower, target, atomic), self.threads)[0]
                except Exception as exc:  # noqa: BLE001 - any export/runtime failure: torch still works
                    warnings.warn(f"hf:{self.folder.name} in ONNX Runtime failed ({type(exc).__name__}: {exc}); "
                                  "using torch", RuntimeWarning, stacklevel=3)
                    self.runtime = "torch"
            return self._sessions.get(tower)

    def _make(self, tower: str, target: Path, atomic: bool) -> None:
        if not self.int8:
            return self._export(tower, target, atomic)
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "float32.onnx"
            self._export(tower, source, atomic=False)
            with atomic_path(target, suffix=".onnx") if atomic else contextlib.nullcontext(target) as out:
                quantize(source, out)

    def _export(self, tower: str, path: Path, atomic: bool) -> None:
        """The tower (plain tensors in, unit-norm embeddings out, any batch size) as an ONNX graph at ``path``."""
        from transformers import AutoModel  # noqa: PLC0415 - optional package (text extra)

        logger.info("reelsearch: exporting the %s tower of hf:%s to ONNX (once): %s", tower, self.folder.name, path)
        with _quiet_transformers():  # the eager attention exports everywhere
            model = AutoModel.from_pretrained(str(self.folder), dtype=torch.float32, attn_implementation="eager")
        module = _Normalised(model.eval(), tower)
        if tower == IMAGE:
            size = self.pixels(np.zeros((1, 8, 8, 3), np.uint8)).shape[-1]
            example, names = (torch.zeros(1, 3, size, size),), ["pixel_values"]
            axes = {"pixel_values": {0: "batch"}}
        else:
            ids = torch.as_tensor(self.tokens(["a"])["input_ids"])
            example, names = (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"]
            axes = {n: {0: "batch", 1: "tokens"} for n in names}
        onnx_runtime.export_graph(module, example, path, atomic, names, ["embeddings"],
                                  {**axes, "embeddings": {0: "batch"}}, OPSET)


def quantize(float_path: Path, int8_path: Path) -> None:
    """The int8 version of a float32 tower graph: every weight product int8 per output channel (ONNX Runtime
    dynamic quantisation; activations quantised per call), the rest float32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415 - optional package (text extra)

    with onnx_runtime.quiet_quantization():
        quantize_dynamic(str(float_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' loading notes (a processor's fallback backend, config checks) are not the user's business."""
    from transformers.utils import logging as hf_logging  # noqa: PLC0415 - optional package (text extra)

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


_shared: dict[tuple, Towers] = {}
_shared_lock = threading.Lock()


def shared_towers(spec: str, int8: bool = False, runtime: str | None = None) -> Towers:
    """One ``Towers`` per checkpoint (and int8 / runtime choice) in a process: the text processor and the frame
    extractor of one model share it."""
    runtime = onnx_runtime.resolve_runtime(runtime, "cpu", RUNTIME_ENV, str(spec))
    key = (str(spec), bool(int8), runtime)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Towers(spec, runtime=runtime, int8=int8)
        return _shared[key]
