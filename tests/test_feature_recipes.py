"""Feature recipes travel with the model: one FeaturePipeline for training's cache and for search (the same real
clip's features agree), stores record their recipe, a mismatch is refused, an unmeetable recipe says what to import."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import shared_path
from reelsearch.config.recipe import PACKAGE_WEIGHTS, ModalityRecipe, frame_recipe
from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.features.extract import ExtractConfig, run_extraction
from reelsearch.features.jobs import collect_jobs
from reelsearch.features.pipeline import FeaturePipeline
from reelsearch.features.store import FeatureStore
from reelsearch.media.timeline import FrameStream

pytest.importorskip("efficientnet_lite_pytorch")
torch.set_num_threads(1)


def clip():
    return shared_path("msrvtt", "clips", "video9770.mp4")


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float16", 0.0)])
def test_training_path_and_search_path_give_the_same_features(tmp_path, dtype, tol):
    """The batch extraction that fills training's cache (decode workers, frames of several items in one CNN call,
    a float16 or float32 store) and the single-file path of search (``FeaturePipeline.extract``, used by ``index``)
    give the same features for a real MSR-VTT clip: to 1e-5 in float32, identical after float16 storage."""
    recipe = frame_recipe("efficientnet-lite0", dtype=dtype, sampling="interval:0.5", max_frames=64, short_side=256)
    path = clip()
    other = shared_path("msrvtt", "clips", "video9771.mp4")
    jobs = collect_jobs([str(other), str(path)]).jobs  # two items: the CNN sees frames of both in one call
    summary = run_extraction(jobs, tmp_path / "store", FeaturePipeline({"appearance": recipe}),
                             ExtractConfig(workers=2, progress=False, call_frames=64))
    assert summary.failed_items == 0
    store = FeatureStore(tmp_path / "store")
    trained_on = np.asarray(store.get("appearance", "video9770"), np.float32)
    served = FeaturePipeline({"appearance": recipe}).extract(path)
    assert served.features["appearance"].shape == trained_on.shape == (len(served.timestamps), 1280)
    np.testing.assert_allclose(served.features["appearance"], trained_on, rtol=0, atol=tol)
    assert store.recipe("appearance") == recipe  # the store records what made its features
    meta = store.get_meta("appearance", "video9770")
    np.testing.assert_allclose(meta["timestamps"], np.round(served.timestamps, 4))


def test_the_index_embeds_with_the_models_own_recipe(tmp_path):
    """A model trained on EfficientNet-Lite2 features is served with Lite2 at its decode size (not Lite0, whose
    1280-d features would fit its input without an error), and what it indexes equals the recipe's features of the
    index's frames (sampled by time, one a second)."""
    from reelsearch.models import create_model
    from reelsearch.search import Searcher

    lite2 = frame_recipe("efficientnet-lite2", short_side=292)
    model = create_model("reelsearch-linear", features__video__appearance=lite2.identity()).eval()
    pipe = model.feature_pipeline()
    assert pipe.recipes["appearance"].extractor == "efficientnet-lite2" and pipe.short_side == 292
    assert pipe.extractor("appearance").name == "efficientnet-lite2"
    model.save(tmp_path / "lite2-model")
    searcher = Searcher(tmp_path / "index", tmp_path / "lite2-model")
    assert f"appearance={lite2.key}" in searcher.model_id
    report = searcher.index([str(clip())], progress=False, cues=())
    assert not report.failed
    stored = searcher.catalog.media(searcher.catalog.find(str(clip())))
    with FrameStream(clip(), 1.0, 292, skip="nonref") as stream:
        times, frames = zip(*stream, strict=True)
    np.testing.assert_allclose(stored.timestamps, times)
    features = FeaturePipeline({"appearance": lite2}).extractor("appearance").extract_frames(np.stack(frames))
    want = model.encode_video([{"appearance": features}])
    np.testing.assert_allclose(stored.video_vector, want.video[0], atol=2e-3)  # stored as float16
    searcher.close()


def test_a_store_made_by_another_recipe_is_refused(tmp_path):
    """Training or evaluating with a store whose features were made differently fails before mixing them."""
    from reelsearch.features.importers import imported_recipe
    from reelsearch.training.run import evaluate, train
    from train_fixtures import make_dataset, small

    manifest, store = make_dataset(tmp_path / "toy", n_train=40, n_val=20)
    other = small("torabi-m1", epochs=1)
    other["features.video.appearance"] = {**other["features.video.appearance"], "extractor": "another-cnn"}
    with pytest.raises(ConfigError, match=r"extractor: store 'synthetic', model 'another-cnn'"):
        train("torabi-m1", f"manifest:{manifest}", tmp_path / "run", features=store, overrides=other, progress=False)
    assert not (tmp_path / "run" / "best").exists()
    train("torabi-m1", f"manifest:{manifest}", tmp_path / "ok", features=store, overrides=small("torabi-m1", epochs=1),
          progress=False)
    with FeatureStore(tmp_path / "lite").writer("appearance", 32, recipe=imported_recipe("lite0-by-hand", 32)) as w:
        w.add("v0000", np.zeros((1, 32), np.float32))
    with pytest.raises(ConfigError, match="made differently"):
        evaluate(tmp_path / "ok", f"manifest:{manifest}", split="val", features=tmp_path / "lite", progress=False)
    unrecorded = FeatureStore(tmp_path / "old")
    with unrecorded.writer("appearance", 32) as w:  # an old store: no recipe
        w.add("v0000", np.zeros((1, 32), np.float32))
    with pytest.raises(ConfigError, match="carry no recipe"):
        evaluate(tmp_path / "ok", f"manifest:{manifest}", split="val", features=tmp_path / "old", progress=False)
    with pytest.raises(ConfigError, match="made differently"):  # extraction never appends to another recipe
        run_extraction([], tmp_path / "lite", FeaturePipeline({"appearance": frame_recipe("efficientnet-lite0")}))


def test_a_recipe_that_cannot_be_met_here_says_what_to_import(tmp_path):
    """No I3D weights here: a model reading I3D motion names the import command, in the API and on a cold cache."""
    from reelsearch.config import apply_overrides
    from reelsearch.models import create_model, model_config
    from reelsearch.training.run import evaluate

    i3d = ModalityRecipe("i3d", 1024, sampling=None, max_frames=None, short_side=None)
    with pytest.raises(ReelsearchError, match=r"features import SRC --out STORE --modality motion --extractor i3d"):
        FeaturePipeline({"motion": i3d})
    cfg = apply_overrides(model_config("scde-ablation-bert"), {"features.video": {"motion": i3d.identity()}})
    model = create_model(cfg)
    assert model.modalities == ["motion"]
    with pytest.raises(ReelsearchError, match="--extractor i3d"):
        model.encode_video([str(clip())])
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "a", "path": str(clip()), "captions": ["x"], "split": "val"}) + "\n")
    with pytest.raises(ReelsearchError, match="--extractor i3d"):
        evaluate(model, f"manifest:{manifest}", split="val", progress=False)


def test_the_weights_identity_and_decode_agreement_are_checked():
    bad = ModalityRecipe("efficientnet-lite0", 1280, weights="sha256:0000000000000000")
    with pytest.raises(ConfigError, match="not the ones the recipe names"):
        FeaturePipeline({"appearance": bad}).extractor("appearance")
    ok = frame_recipe("efficientnet-lite0")
    assert ok.weights == PACKAGE_WEIGHTS["efficientnet-lite0"]
    assert FeaturePipeline({"appearance": ok}).extractor("appearance").weights_id == ok.weights
    with pytest.raises(ConfigError, match="decode frames differently"):
        FeaturePipeline({"appearance": ok, "motion": frame_recipe("hof-mbh", 125, sampling="every:10")})
    with pytest.raises(ConfigError, match="gives 1280-d"):
        FeaturePipeline({"appearance": frame_recipe("efficientnet-lite0", dim=512)}).extractor("appearance")


def test_extract_with_a_models_recipe_and_features_info(tmp_path):
    from typer.testing import CliRunner

    from reelsearch.cli.main import app
    from reelsearch.models import load_model

    out = tmp_path / "store"
    res = CliRunner().invoke(app, ["extract", str(clip()), "--out", str(out), "--recipe", "default",
                                   "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert FeatureStore(out).recipe("appearance") == load_model("default").recipes["appearance"]
    info = CliRunner().invoke(app, ["features", "info", str(out)], catch_exceptions=False)
    assert "efficientnet-lite0" in info.stdout and "frames interval:0.5" in info.stdout


def test_extract_a_mixtures_recipe_does_what_it_can_and_names_the_rest(tmp_path):
    """`extract --recipe mithun-moe`: appearance, motion and audio of a real clip, each with its recipe; places
    (ResNet-50 Places-365, not here) are named with the import command."""
    from typer.testing import CliRunner

    from reelsearch.cli.main import app
    from reelsearch.models import model_config

    out = tmp_path / "store"
    res = CliRunner().invoke(app, ["extract", str(clip()), "--out", str(out), "--recipe", "mithun-moe",
                                   "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "--modality place --extractor resnet50-places365" in res.stderr
    store = FeatureStore(out)
    assert store.modalities() == ["appearance", "audio", "motion"]
    experts = model_config("mithun-moe").experts
    assert store.recipe("motion") == experts["activity"].features.video["motion"]
    assert store.recipe("audio") == experts["activity"].features.video["audio"]
    assert store.get("motion", "video9770").shape[0] == store.get("appearance", "video9770").shape[0]
