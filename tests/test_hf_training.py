"""What is built on top of a CLIP-family checkpoint (a tiny random CLIP made in the test, ``hf:DIR``): its querybank
from a captioned dataset, SCDE trained over its image tower's frame embeddings, and Mithun's mixture with a CLIP
expert beside the object expert; each is trained (a short run), saved, loaded and searched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("transformers")

import hf_checkpoints  # noqa: E402
import reelsearch  # noqa: E402
from reelsearch.cli.main import app  # noqa: E402
from reelsearch.config.typed import to_dict  # noqa: E402
from reelsearch.models.hf import MODALITY, hf_frame_recipe  # noqa: E402
from reelsearch.models.registry import model_config  # noqa: E402
from reelsearch.towers.clip import Towers  # noqa: E402
from test_search_support import make_media  # noqa: E402

CAPTIONS = {"red-green-blue": "a red car", "white-black": "snow on the street", "yellow": "a yellow ball",
            "stage": "people on a stage", "sea": "the blue water"}
#: A short run: one epoch, small batches, no warm-up, no GloVe (not on this machine).
SHORT = {"train.epochs": 1, "train.batch_size": 2, "train.warmup_epochs": 0}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """The tiny CLIP, the test media and a manifest: four items to train on, one to validate."""
    root = tmp_path_factory.mktemp("hf-train")
    paths = make_media(root / "media")
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({"id": p.stem, "path": str(p), "split": "train" if i < 4 else "val",
                                            "captions": [CAPTIONS[p.stem], f"{CAPTIONS[p.stem]} in the park"]}) + "\n"
                                for i, p in enumerate(paths)))
    return {"spec": f"hf:{hf_checkpoints.make_clip(root / 'clip')}", "paths": paths, "manifest": manifest,
            "root": root}


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch) -> Path:
    folder = tmp_path_factory.getbasetemp() / "hf-cache"
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(folder))
    return folder


def index_and_search(model_dir: Path, media: Path, tmp_path: Path) -> list[dict]:
    """`reelsearch index MEDIA --model MODEL_DIR`, then `reelsearch search` of a caption: the hits."""
    runner = CliRunner()
    index = ["--index", str(tmp_path / "index")]
    res = runner.invoke(app, ["index", str(media), *index, "--model", str(model_dir), "--quiet", "--no-speech",
                              "--no-ocr"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["search", "a red car", *index, "--json", "-k", "5", "--local"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_querybank_of_an_hf_model(world, tmp_path):
    """`reelsearch querybank hf:DIR`: the bank is the checkpoint's own embeddings of the training captions and
    videos, saved with the model; `eval` of the saved model applies it, and the model still searches."""
    manifest = world["manifest"]
    res = CliRunner().invoke(app, ["querybank", world["spec"], "--data", f"manifest:{manifest}", "--out",
                                   str(tmp_path / "qb"), "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["querybank"]["captions"] == 4 * 2 and rep["querybank"]["videos"] == 4 and rep["val_split"] == "val"
    model = reelsearch.load(tmp_path / "qb")
    plain = reelsearch.load(world["spec"])
    assert model.querybank is not None and model.recipes == plain.recipes
    train = [c for p in world["paths"][:4] for c in (CAPTIONS[p.stem], f"{CAPTIONS[p.stem]} in the park")]
    bank = np.asarray(model.querybank.text, np.float32)
    own = Towers(world["spec"]).encode_text(train)
    assert bank.shape == own.shape and np.abs(bank - own).max() < 0.01  # (stored as int8 rows with a scale each)
    runs = [CliRunner().invoke(app, ["eval", str(tmp_path / "qb"), "--data", f"manifest:{manifest}", "--split",
                                     "val", "--json", "--out", str(tmp_path / f"{name}.json"), *flags])
            for name, flags in (("bank", []), ("raw", ["--no-querybank"]))]
    assert all(r.exit_code == 0 for r in runs), [r.output[-2000:] for r in runs]
    with_bank, raw = (json.loads(r.stdout) for r in runs)
    assert with_bank["querybank"]["beta"] == 20.0 and "querybank" not in raw
    hits = index_and_search(tmp_path / "qb" / "best", world["root"] / "media", tmp_path)
    assert {Path(h["path"]).name for h in hits} == {p.name for p in world["paths"]}


def test_scde_over_clip_frames(world, tmp_path):
    """SCDE (Zhao et al. 2020) with the image tower as its frame extractor: trained, saved, loaded; `reelsearch
    index` runs the tower on the frames and `search` ranks the media."""
    recipe = to_dict(hf_frame_recipe(world["spec"]))
    report = reelsearch.train("scde", f"manifest:{world['manifest']}", tmp_path / "run", progress=False,
                              overrides={"features.video": {"appearance": recipe}, **SHORT})
    assert report
    model = reelsearch.load(tmp_path / "run")
    assert model.recipes["appearance"].extractor == "hf-image" and model.recipes["appearance"].dim == 16
    assert model.recipes["appearance"].weights == Towers(world["spec"]).weights
    hits = index_and_search(tmp_path / "run" / "best", world["root"] / "media", tmp_path)
    assert {Path(h["path"]).name for h in hits} == {p.name for p in world["paths"]}


def test_mithun_mixture_with_a_clip_expert(world, tmp_path):
    """Mithun's mixture (Mithun et al. 2018) with a CLIP expert (GRU text, over the image tower's frames, its own
    modality ``clip``, so both are indexed) beside its object expert (EfficientNet-Lite0 frames), fused by score:
    trained, saved, loaded, indexed and searched."""
    moe = to_dict(model_config("mithun-moe"))
    obj = moe["experts"]["object"]
    clip = {**obj, "name": "mithun-clip", "features": {**obj["features"], "video": {
        MODALITY: to_dict(hf_frame_recipe(world["spec"]))}}}
    config = {**moe, "name": "mithun-moe-clip", "experts": {"object": obj, "clip": clip},
              "fusion": {**moe["fusion"], "weights": {"object": 1.0, "clip": 1.0}}}
    report = reelsearch.train(config, f"manifest:{world['manifest']}", tmp_path / "run", progress=False,
                              overrides={**SHORT, "model.text.glove_init": None})
    assert report
    model = reelsearch.load(tmp_path / "run")
    assert set(model.experts) == {"object", "clip"}
    assert model.experts["clip"].recipes[MODALITY].extractor == "hf-image"
    assert model.experts["object"].recipes["appearance"].extractor == "efficientnet-lite0"
    hits = index_and_search(tmp_path / "run" / "best", world["root"] / "media", tmp_path)
    assert {Path(h["path"]).name for h in hits} == {p.name for p in world["paths"]}
