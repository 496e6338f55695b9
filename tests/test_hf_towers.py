"""``hf:NAME_OR_DIR``: CLIP- and SigLIP-family checkpoints (tiny random-weight ones made here, in the Hugging Face
layout) as reelsearch models: their embeddings equal transformers' own, in torch and in ONNX Runtime; index, search,
like, duplicates, eval and fuse run on them; the hub path runs against a local endpoint; offline errors are one
line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("transformers")

import hf_checkpoints  # noqa: E402
import hub_server  # noqa: E402
import reelsearch  # noqa: E402
from reelsearch.cli.main import app, main  # noqa: E402
from reelsearch.features.extractors import create_extractor  # noqa: E402
from reelsearch.towers.clip import Towers  # noqa: E402
from test_search_support import make_media  # noqa: E402

TEXTS = ["a dog runs on the grass", "two people ride a red bike in the park", "snow", "a cat"]
FAMILIES = ("clip", "siglip")


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {"clip": hf_checkpoints.make_clip(root / "clip"), "siglip": hf_checkpoints.make_siglip(root / "siglip")}


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch) -> Path:
    """One cache folder for this module's tests (the tiny towers' ONNX exports are made once)."""
    folder = tmp_path_factory.getbasetemp() / "hf-cache"
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(folder))
    return folder


def frames(n: int = 3) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, 40, 56, 3), dtype=np.uint8)


def reference(folder: Path, family: str) -> tuple[np.ndarray, np.ndarray]:
    """transformers' own unit-norm embeddings of TEXTS and frames(): its processor, get_*_features."""
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(folder)).eval()
    tokens = AutoTokenizer.from_pretrained(str(folder))(TEXTS, padding="max_length" if family == "siglip" else True,
                                                        return_tensors="pt")
    pixels = AutoImageProcessor.from_pretrained(str(folder))(images=list(frames()), return_tensors="pt")
    with torch.no_grad():
        text = model.get_text_features(**tokens).pooler_output
        image = model.get_image_features(**pixels).pooler_output
    return (torch.nn.functional.normalize(text, dim=-1).numpy(),
            torch.nn.functional.normalize(image, dim=-1).numpy())


def cosine_distance(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a / np.linalg.norm(a, axis=1, keepdims=True), b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(1 - (a * b).sum(1).min())


@pytest.mark.parametrize("family", FAMILIES)
def test_model_embeddings_equal_transformers_torch(checkpoints, family, monkeypatch):
    """reelsearch.load("hf:DIR") (text) and its hf-image frame extractor equal transformers' processor +
    get_text_features / get_image_features within 1e-4 cosine distance, in torch."""
    monkeypatch.setenv("REELSEARCH_CLIP_RUNTIME", "torch")
    folder = checkpoints[family]
    text, image = reference(folder, family)
    model = reelsearch.load(f"hf:{folder}")
    assert model.search_mode == "ann" and model.dim == text.shape[1] and model.modalities == ["clip"]
    assert cosine_distance(model.encode_text(TEXTS), text) < 1e-4
    recipe = model.recipes["clip"]
    extractor = create_extractor(recipe.extractor, **recipe.options)
    assert extractor.weights_id == recipe.weights and extractor.towers.runtime == "torch"
    assert cosine_distance(extractor.extract_frames(frames()), image) < 1e-4
    assert recipe.options["preprocessing"]["family"] == family  # the checkpoint's own preprocessing is the recipe
    video = model.encode_video([{"clip": image}])  # a video: the normalised mean of its frames
    mean = image.mean(0)
    assert np.allclose(video.video[0], mean / np.linalg.norm(mean), atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_onnxruntime_towers_equal_transformers_and_are_cached(checkpoints, family, cache, messages):
    """Exported once (cached, keyed by the weights), ONNX Runtime gives transformers' embeddings within 1e-3; int8
    runs, near float32."""
    pytest.importorskip("onnxruntime")
    folder = checkpoints[family]
    text, image = reference(folder, family)
    towers = Towers(folder, runtime="onnxruntime")
    assert cosine_distance(towers.encode_text(TEXTS), text) < 1e-3
    assert cosine_distance(towers.encode_images(frames()), image) < 1e-3
    graphs = sorted(p.name for p in (cache / "onnx").glob(f"{family}-*.onnx"))
    assert any(n.startswith(f"{family}-text-") for n in graphs) and any(n.startswith(f"{family}-image-")
                                                                         for n in graphs)
    messages()
    again = Towers(folder, runtime="onnxruntime")
    assert np.allclose(again.encode_text(TEXTS), towers.encode_text(TEXTS), atol=1e-6)
    assert "exporting" not in messages()  # the cached graphs
    int8 = Towers(folder, runtime="onnxruntime", int8=True)
    assert cosine_distance(int8.encode_text(TEXTS), text) < 0.2  # tiny random weights: int8 drifts, but runs
    assert int8.int8 and any("-int8" in p.name for p in (cache / "onnx").glob(f"{family}-text-*"))


def test_cli_index_search_like_duplicates_and_eval(checkpoints, tmp_path, monkeypatch):
    """`--model hf:DIR` indexes media (the image tower per sampled frame), searches by text and by example, finds
    duplicates and evaluates a manifest dataset, as any model."""
    monkeypatch.chdir(tmp_path)  # (eval writes its result file here)
    spec = f"hf:{checkpoints['clip']}"
    paths = make_media(tmp_path / "media")
    runner = CliRunner()
    index = ["--index", str(tmp_path / "index")]
    res = runner.invoke(app, ["index", str(tmp_path / "media"), *index, "--model", spec, "--quiet", "--no-speech",
                              "--no-ocr"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["search", "a red car", *index, "--json", "-k", "5"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)
    assert len(hits) == len(paths) and {Path(h["path"]).name for h in hits} == {p.name for p in paths}
    res = runner.invoke(app, ["search", "--like", str(paths[-1]), *index, "--json", "-k", "2"])
    assert res.exit_code == 0, res.output
    like = [Path(h["path"]).name for h in json.loads(res.stdout)]
    assert len(like) == 2 and paths[-1].name not in like  # the example's own file is left out
    res = runner.invoke(app, ["duplicates", *index, "--json"])
    assert res.exit_code == 0, res.output

    manifest = tmp_path / "manifest.jsonl"
    captions = {"red-green-blue": "a red car", "white-black": "snow", "yellow": "a ball", "stage": "people",
                "sea": "the water"}
    manifest.write_text("".join(json.dumps({"id": p.stem, "path": str(p), "split": "test",
                                            "captions": [captions[p.stem]]}) + "\n" for p in paths))
    res = runner.invoke(app, ["eval", spec, "--data", f"manifest:{manifest}", "--split", "test", "--json"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0 <= got["t2v"]["R@1"] <= 100 and got["t2v"]["R@10"] == 100  # five videos: all within ten
    res = runner.invoke(app, ["calibrate", spec, "--data", f"manifest:{manifest}", "--split", "test", "--hits", "3",
                              "--out", str(tmp_path / "calibrated")])
    assert res.exit_code == 0, res.output
    calibrated = reelsearch.load(tmp_path / "calibrated")
    assert calibrated.calibration is not None and calibrated.fingerprint() == reelsearch.load(spec).fingerprint()
    sentences = list(captions.values())
    (tmp_path / "mc.csv").write_text("".join("\t".join([p.stem, "", "", "", "", *sentences, str(i + 1)]) + "\n"
                                             for i, p in enumerate(sorted(paths, key=lambda p: list(captions).index(
                                                 p.stem)))))
    res = runner.invoke(app, ["mc", "eval", spec, str(tmp_path / "mc.csv"), "--data", f"manifest:{manifest}:test",
                              "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["items"] == len(paths)


def test_fuse_with_the_bundled_model(checkpoints, tmp_path):
    """`reelsearch fuse default hf:DIR`: a mixture of the bundled experts and the checkpoint, saved and loaded."""
    spec = f"hf:{checkpoints['siglip']}"
    res = CliRunner().invoke(app, ["fuse", "default", spec, "--out", str(tmp_path / "fused")])
    assert res.exit_code == 0, res.output
    model = reelsearch.load(tmp_path / "fused")
    assert set(model.experts) == {"lite0", "lite2", "siglip"} and {"appearance", "clip"} <= set(model.recipes)
    alone = reelsearch.load(spec).encode_text(TEXTS)
    assert np.allclose(model.experts["siglip"].encode_text(TEXTS), alone, atol=1e-6)


def test_offline_and_not_cached_is_one_line(tmp_path, monkeypatch, capsys):
    """Offline, a hub checkpoint that is not cached: exit 2 and one line naming it and how to get it."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    make_media(tmp_path / "media")
    monkeypatch.setattr(sys, "argv", ["reelsearch", "index", str(tmp_path / "media"), "--index",
                                      str(tmp_path / "index"), "--model", "hf:nobody/tiny-clip", "--no-speech",
                                      "--no-ocr"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: hf:nobody/tiny-clip: not in the Hugging Face cache")
    assert "hf download nobody/tiny-clip" in lines[0] and "Traceback" not in lines[0]


def test_hub_checkpoint_fetched_once_from_the_endpoint(checkpoints, tmp_path):
    """`hf:REPO` is fetched from $HF_ENDPOINT (the hub's URL layout) into the Hugging Face cache, then used."""
    server, asked = hub_server.serve({"tiny/clip": checkpoints["clip"]})
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{server.server_port}", "HF_HOME": str(tmp_path / "hf"),
           "PYTHONPATH": os.pathsep.join([str(Path(reelsearch.__file__).parents[1]),
                                          os.environ.get("PYTHONPATH", "")]),
           "REELSEARCH_CLIP_RUNTIME": "torch"}
    code = ("import reelsearch, json; m = reelsearch.load('hf:tiny/clip'); "
            "print(json.dumps(m.encode_text(['a dog runs']).tolist()))")
    try:
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
    assert run.returncode == 0, run.stderr
    got = np.array(json.loads(run.stdout.strip().splitlines()[-1]))
    local = Towers(checkpoints["clip"], runtime="torch").encode_text(["a dog runs"])
    assert np.allclose(got, local, atol=1e-5)
    assert any(a.startswith("GET /api/models/tiny/clip/revision/") for a in asked)
    assert any(a.endswith("/resolve/" + hub_server.COMMIT + "/model.safetensors") for a in asked)
    assert list((tmp_path / "hf" / "hub").glob("models--tiny--clip/snapshots/*/model.safetensors"))


def test_models_lists_known_hub_checkpoints_with_cited_numbers():
    """`reelsearch models`: the hub checkpoints known to run, with size, license and their paper's numbers."""
    table = reelsearch.api.models_table()
    assert "hf:openai/clip-vit-base-patch32" in table and "hf:google/siglip-base-patch16-256-multilingual" in table
    assert "88.0 / 68.7" in table and "Table 13" in table and "Apache-2.0" in table


def test_train_over_the_image_tower_frames(checkpoints, tmp_path):
    """A paper model trains with the image tower as its frame extractor (``hf_frame_recipe``): Mithun's expert over
    CLIP frame embeddings, on a small manifest dataset."""
    from reelsearch.config.typed import to_dict
    from reelsearch.models.hf import hf_frame_recipe

    spec = f"hf:{checkpoints['clip']}"
    paths = make_media(tmp_path / "media")
    captions = ["a red car", "snow", "a ball", "people", "the water"]
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({"id": p.stem, "path": str(p), "split": "train" if i < 3 else "val",
                                            "captions": [captions[i], f"{captions[i]} in the park"]}) + "\n"
                                for i, p in enumerate(paths)))
    recipe = to_dict(hf_frame_recipe(spec))
    report = reelsearch.train("mithun-expert", f"manifest:{manifest}", tmp_path / "run", progress=False,
                              overrides={"features.video": {"appearance": recipe}, "train.epochs": 1,
                                         "train.batch_size": 2, "train.warmup_epochs": 0,
                                         "model.text.glove_init": None})
    assert report
    model = reelsearch.load(tmp_path / "run")
    assert model.recipes["appearance"].extractor == "hf-image" and model.recipes["appearance"].dim == 16
    assert model.encode_video([paths[0]]).video.shape == (1, model.dim)
