"""EfficientNet-Lite frame features in ONNX Runtime against torch on real photos: the same features and ImageNet
classes, the export cached once and reused, remade when damaged, made in a temporary folder when the cache cannot be
written, and the runtime chosen as documented (auto, $REELSEARCH_CNN_RUNTIME, a failed export falls back to torch
with a warning)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cache_fixtures import seed_cache
from conftest import shared_path
from reelsearch.errors import ReelsearchError

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")
pytest.importorskip("efficientnet_lite_pytorch")
from reelsearch import onnx_runtime  # noqa: E402
from reelsearch.features.extractors import appearance  # noqa: E402

if onnx_runtime.onnxruntime_unavailable("cpu"):
    pytest.skip(onnx_runtime.onnxruntime_unavailable("cpu"), allow_module_level=True)


@pytest.fixture(scope="module")
def photos() -> np.ndarray:
    """Twelve real Flickr8k photos at their own sizes, resized to 320 x 240 RGB."""
    paths = sorted(shared_path("flickr8k", "images").glob("*.jpg"))[:12]
    return np.stack([cv2.resize(cv2.imread(str(p))[:, :, ::-1], (320, 240)) for p in paths])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(appearance.CNN_RUNTIME_ENV, raising=False)
    return tmp_path / "cache"


@pytest.mark.parametrize("variant", ["efficientnet-lite0", "efficientnet-lite2"])
def test_onnxruntime_gives_torchs_features(variant, photos, cache, messages):
    fast, slow = appearance.EfficientNetLite(variant), appearance.EfficientNetLite(variant, runtime="torch")
    assert fast.runtime == "onnxruntime" and slow.runtime == "torch"
    got, want = fast.extract_frames(photos), slow.extract_frames(photos)
    assert got.shape == want.shape == (len(photos), 1280) and got.dtype == np.float32
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    assert "exporting" in messages() and fast.onnx_path.parent == cache / "onnx"
    # row i depends on frame i only, whatever the batch (the graph's batch axis is dynamic)
    assert np.abs(fast.extract_frames(photos[3:4]) - want[3:4]).max() < 1e-4 * np.abs(want).max()
    assert fast.extract_frames(photos[:0]).shape == (0, 1280)


def test_export_is_cached_reused_and_remade_when_damaged(photos, cache, messages):
    first = appearance.EfficientNetLite("efficientnet-lite0")
    want = first.extract_frames(photos[:4])
    path = first.onnx_path
    before = path.stat().st_mtime_ns
    messages()
    second = appearance.EfficientNetLite("efficientnet-lite0")
    assert np.array_equal(second.extract_frames(photos[:4]), want)
    assert "exporting" not in messages() and path.stat().st_mtime_ns == before
    path.write_bytes(b"not an onnx model")  # damaged: exported again, not fatal
    third = appearance.EfficientNetLite("efficientnet-lite0")
    assert np.array_equal(third.extract_frames(photos[:4]), want)
    err = messages()
    assert f"{path}: cannot load" in err and "exporting" in err and third.runtime == "onnxruntime"


def test_full_cache_still_runs_onnxruntime(photos, cache, monkeypatch):
    from reelsearch import io

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.tempfile, "mkstemp", full)  # atomic_path cannot make its temporary file
    fast = appearance.EfficientNetLite("efficientnet-lite0")
    got = fast.extract_frames(photos[:2])
    assert fast.runtime == "onnxruntime" and fast.onnx_path is None and not list(cache.rglob("*.onnx"))
    want = appearance.EfficientNetLite("efficientnet-lite0", runtime="torch").extract_frames(photos[:2])
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_a_failed_export_falls_back_to_torch_with_a_warning(photos, cache, monkeypatch):
    def broken(self, path, atomic):
        raise RuntimeError("exporter crashed")

    monkeypatch.setattr(appearance.EfficientNetLite, "_export", broken)
    cnn = appearance.EfficientNetLite("efficientnet-lite0")
    with pytest.warns(RuntimeWarning, match="efficientnet-lite0 in ONNX Runtime failed .*exporter crashed.*torch"):
        got = cnn.extract_frames(photos[:2])
    assert cnn.runtime == "torch"
    want = appearance.EfficientNetLite("efficientnet-lite0", runtime="torch").extract_frames(photos[:2])
    assert np.array_equal(got, want)


def test_runtime_choice(cache, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default choices never warn
        assert appearance.EfficientNetLite("efficientnet-lite0").runtime == "onnxruntime"
    monkeypatch.setenv(appearance.CNN_RUNTIME_ENV, "torch")
    assert appearance.EfficientNetLite("efficientnet-lite0").runtime == "torch"
    assert appearance.EfficientNetLite("efficientnet-lite0", runtime="auto").runtime == "onnxruntime"
    monkeypatch.setenv(appearance.CNN_RUNTIME_ENV, "tensorflow")
    with pytest.raises(ReelsearchError, match=r"auto, onnxruntime, torch; got 'tensorflow' \(from \$REELSEARCH_CNN"):
        appearance.EfficientNetLite("efficientnet-lite0")
    monkeypatch.delenv(appearance.CNN_RUNTIME_ENV)
    if torch.cuda.is_available():
        assert appearance.EfficientNetLite("efficientnet-lite0", device="cuda").runtime == "torch"


def test_flip_averages_a_frame_and_its_mirror(photos, cache, onnx_exports, messages):
    seed_cache(cache, onnx_exports)  # the run's Lite0 graph: exporting is the tests' above
    square = np.stack([cv2.resize(p, (224, 224)) for p in photos[:3]])  # the network's input: no crop to mirror
    plain = appearance.EfficientNetLite("efficientnet-lite0")
    flipped = appearance.EfficientNetLite("efficientnet-lite0", flip=True)
    want = 0.5 * (plain.extract_frames(square) + plain.extract_frames(np.ascontiguousarray(square[:, :, ::-1])))
    got = flipped.extract_frames(square)
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    assert np.abs(got - plain.extract_frames(square)).max() > 1e-2  # a real photo is not its own mirror
    assert flipped.runtime == "onnxruntime" and "exporting" not in messages()  # the seeded graph, both ways
    torch_flip = appearance.EfficientNetLite("efficientnet-lite0", flip=True, runtime="torch")
    assert np.abs(torch_flip.extract_frames(square) - want).max() < 1e-4 * np.abs(want).max()
