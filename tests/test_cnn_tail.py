"""Tuning the last blocks of EfficientNet-Lite (`reelsearch tune-cnn`): the trunk/tail cut reproduces the whole
network, a tail file changes the features and their identity (torch and ONNX Runtime alike) and a bad one is named,
and, on real Flickr8k photos from a cold feature cache through the CLI, the tuned model travels with its tail (moved to
another folder it still evaluates), index-time extraction runs the network that was trained, a run resumes, and a
mixture's other experts are kept as they were. Tuning runs on the Trainer: its run folder has the tuned model in best/
and the report beside it, and an interrupted tuning resumes (pickle-free) to the weights of an uninterrupted one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cache_fixtures import seed_cache
from conftest import shared_path
from in_process import cli_here
from test_cold_cache import flickr_manifest
from train_fixtures import stop_loss_at

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")
pytest.importorskip("efficientnet_lite_pytorch")
from reelsearch.config.recipe import PACKAGE_WEIGHTS, file_identity, frame_recipe  # noqa: E402
from reelsearch.errors import DataFormatError  # noqa: E402
from reelsearch.features.extractors import appearance  # noqa: E402

DEFAULT = Path(appearance.__file__).parents[2] / "assets" / "default-model"


@pytest.fixture(scope="module")
def photos() -> np.ndarray:
    """Six real Flickr8k photos resized to 320 x 240 RGB."""
    paths = sorted(shared_path("flickr8k", "images").glob("*.jpg"))[:6]
    return np.stack([cv2.resize(cv2.imread(str(p))[:, :, ::-1], (320, 240)) for p in paths])


@pytest.fixture(scope="module")
def lite0():
    return appearance.EfficientNetLite("efficientnet-lite0", runtime="torch")


def test_the_cut_follows_the_architecture():
    # stride-2 blocks of EfficientNet-Lite0: 1, 3, 5, 11 (of 16); Lite2: 1, 4, 7, 15 (of 21)
    for name, start in (("efficientnet-lite0", 12), ("efficientnet-lite2", 16)):
        net = appearance.EfficientNetLite(name, runtime="torch").model.net
        strides = [b._depthwise_conv.stride for b in net._blocks]
        assert max(strides[start - 1]) == 2 and all(max(s) == 1 for s in strides[start:])
        assert appearance.last_stage_start(net) == start


@pytest.mark.parametrize("block", [12, 15])
def test_trunk_then_tail_is_the_whole_network(lite0, photos, block):
    net = lite0.model.net
    x = lite0.preprocess(photos)
    with torch.inference_mode():
        whole = lite0.model(x)
        parts = appearance.LiteTail(net, block).eval()(appearance.LiteTrunk(net, block)(x))
    assert torch.allclose(parts, whole, atol=1e-5, rtol=1e-5)


def _perturbed_tail(lite0, path: Path, block: int = 12) -> dict:
    """A tail file whose weights differ from ImageNet's (as tuning leaves them); returns its state."""
    from safetensors.torch import save_file

    tail = appearance.LiteTail(lite0.model.net, block)
    state = tail.tuned_state()
    gen = torch.Generator().manual_seed(0)
    state = {k: v + 0.05 * v.std() * torch.randn(v.shape, generator=gen) if v.numel() > 1 else v
             for k, v in state.items()}
    save_file(state, str(path))
    return state


def test_a_tail_file_changes_features_and_identity_in_torch_and_onnxruntime(lite0, photos, tmp_path, monkeypatch,
                                                                             onnx_exports):
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(seed_cache(tmp_path / "cache", onnx_exports)))  # the plain export
    path = tmp_path / "tail.safetensors"
    state = _perturbed_tail(lite0, path)
    # the expected features: a fresh network with those weights put in by hand
    fresh = appearance.EfficientNetLite("efficientnet-lite0", runtime="torch")
    own = fresh.model.net.state_dict()
    fresh.model.net.load_state_dict({**own, **state})
    want = fresh.extract_frames(photos)
    base = lite0.extract_frames(photos)
    tuned = appearance.EfficientNetLite("efficientnet-lite0", runtime="torch", tail=path)
    got = tuned.extract_frames(photos)
    assert np.allclose(got, want, atol=1e-5) and not np.allclose(got, base, atol=1e-2)
    assert tuned.weights_id == appearance.combined_identity(PACKAGE_WEIGHTS["efficientnet-lite0"], file_identity(path))
    assert tuned.weights_id != lite0.weights_id
    from reelsearch import onnx_runtime

    if onnx_runtime.onnxruntime_unavailable("cpu"):
        return
    fast = appearance.EfficientNetLite("efficientnet-lite0", runtime="onnxruntime", tail=path)
    assert np.abs(fast.extract_frames(photos) - want).max() < 1e-4 * np.abs(want).max()
    plain = appearance.EfficientNetLite("efficientnet-lite0", runtime="onnxruntime")
    plain.extract_frames(photos[:1])
    assert fast.onnx_path != plain.onnx_path  # the cached export of the ImageNet network is not reused


def test_a_bad_tail_file_is_named(lite0, tmp_path):
    from safetensors.torch import save_file

    state = appearance.LiteTail(lite0.model.net, 15).tuned_state()
    wrong = tmp_path / "wrong-shape.safetensors"
    save_file({**state, "_conv_head.weight": torch.zeros(3, 3, 1, 1)}, str(wrong))
    alien = tmp_path / "alien.safetensors"
    save_file({"fc.weight": torch.zeros(2, 2)}, str(alien))
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a safetensors file")
    for path, says in ((wrong, "another shape"), (alien, "unknown names"), (broken, "cannot read")):
        with pytest.raises(DataFormatError, match=says) as err:
            appearance.EfficientNetLite("efficientnet-lite0", runtime="torch", tail=path)
        assert str(path) in str(err.value)


def test_views_are_the_index_crop_its_mirror_and_seeded_random_crops(photos):
    from reelsearch.training.cnn_tail import views_of

    image = photos[0]
    views = views_of(image, 224, 5, np.random.default_rng(3))
    assert [v.shape for v in views] == [(224, 224, 3)] * 5
    assert np.array_equal(views[0], appearance.resize_center_crop(image, 224))
    assert np.array_equal(views[1], views[0][:, ::-1])
    assert all(not np.array_equal(v, views[0]) for v in views[2:])
    again = views_of(image, 224, 5, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(views, again))
    assert len(views_of(image, 224, 1, np.random.default_rng(3))) == 1


def test_where_the_tail_lies_is_not_part_of_the_recipe():
    from dataclasses import replace

    base = frame_recipe("efficientnet-lite0")
    a = replace(base, options={"tail": "/one/tail.safetensors"}, weights="sha256:1")
    b = replace(base, options={"tail": "/two/tail.safetensors"}, weights="sha256:1")
    c = replace(base, options={"tail": "/one/tail.safetensors"}, weights="sha256:2")
    assert a.key == b.key != c.key
    assert frame_recipe("efficientnet-lite0", options={"flip": True}).key != frame_recipe("efficientnet-lite0").key


def seen_photos_manifest(folder: Path, n: int = 32) -> Path:
    """A manifest of ``n`` real Flickr8k train photos, the first half of them again as the val split (other ids):
    tuning on them must raise their val RSum, so the tuned weights are not ImageNet's."""
    rows = [json.loads(line) for line in flickr_manifest(folder, n_train=n, n_val=0).read_text().splitlines()]
    again = [{**r, "id": f"{r['id']}-again", "split": "val"} for r in rows[:n // 2]]
    path = folder / "manifest.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + again))
    return path


def tune_keys(**keys) -> list[str]:
    """``--set tune.KEY=VALUE`` arguments."""
    return [a for k, v in keys.items() for a in ("--set", f"tune.{k}={v}")]


def tune_config(**keys):
    from reelsearch.config import TuneConfig
    from reelsearch.config.typed import apply_section

    return apply_section(TuneConfig(), {f"tune.{k}": v for k, v in keys.items()})


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, onnx_exports):
    """An untrained `reelsearch-linear` model (projections at their random start, so any epoch beats epoch 0) tuned
    for 2 epochs on 32 real photos (16 of them to select on), cold cache (no features; the run's ONNX exports)."""
    from reelsearch.models import JointModel
    from reelsearch.models.registry import model_config

    root = tmp_path_factory.mktemp("tune")
    manifest = seen_photos_manifest(root / "data")
    cache = seed_cache(root / "cache", onnx_exports)
    torch.manual_seed(0)
    JointModel(model_config("reelsearch-linear")).save(root / "fresh")
    res = cli_here("tune-cnn", root / "fresh", "--data", f"manifest:{manifest}", "--out", root / "out",
                   *tune_keys(epochs=2, views=2, batch_size=8, lr_cnn=1e-3, lr=1e-3), "--threads", "1", cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    return root, manifest, cache


def test_the_tuned_model_carries_its_tail_and_runs_the_trained_network(tuned):
    from reelsearch.datasets import load_dataset
    from reelsearch.features.jobs import Job
    from reelsearch.features.pipeline import FeaturePipeline
    from reelsearch.models import load_model

    root, manifest, cache = tuned
    out = root / "out" / "best"
    saved = json.loads((out / "config.json").read_text())["config"]["features"]["video"]["appearance"]
    assert saved["options"] == {"tail": "tail-appearance.safetensors"} and (out / saved["options"]["tail"]).is_file()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "reelsearch.json",
                                                     "tail-appearance.safetensors"]
    report = json.loads((root / "out" / "summary.json").read_text())  # the report lies beside the model
    assert report["from_block"] == 12 and [h["epoch"] for h in report["history"]] == [0, 1, 2]
    assert report["best_epoch"] > 0 and report["best"]["RSum"] > report["start"]["RSum"]
    assert all(h["epoch_seconds"] > 0 for h in report["history"][1:])
    assert (root / "out" / "log.csv").read_text().startswith("epoch,train_loss")
    # moved elsewhere, the model still finds its tail, and features made by the whole tuned network (what index
    # and eval compute) are the trained tail on the cached trunk activations
    moved = root / "moved"
    shutil.copytree(out, moved)
    model = load_model(moved)
    recipe = model.recipes["appearance"]
    assert Path(recipe.options["tail"]) == (moved / "tail-appearance.safetensors").resolve()
    assert recipe.weights == saved["weights"] != PACKAGE_WEIGHTS["efficientnet-lite0"]
    items = load_dataset("manifest", manifest).items("val")[:3]
    pipe = FeaturePipeline(model.recipes, device="cpu")
    tail = appearance.LiteTail(pipe.extractor("appearance").model.net, 12).eval()
    base = appearance.EfficientNetLite("efficientnet-lite0", runtime="torch")
    for item in items:
        decoded = pipe.decode(Job(item.key, Path(item.path)))
        got = pipe.compute("appearance", decoded)
        x = base.preprocess(decoded.frames.images)
        with torch.inference_mode():
            want = tail(appearance.LiteTrunk(base.model.net, 12)(x)).numpy()
            untuned = base.model(x).numpy()
        assert np.allclose(got, want, atol=1e-3 * np.abs(want).max())
        assert not np.allclose(got, untuned, atol=1e-2 * np.abs(want).max())  # the tail was tuned
    res = cli_here("eval", moved, "--data", f"manifest:{manifest}", "--split", "val", "--json", "--out",
                   root / "eval.json", cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["RSum"] == pytest.approx(report["result"]["RSum"])


def tail_task(source, monkeypatch=None, batches: int | None = None, **keys):
    """A TailTask of the bundled model's lite0 expert; ``batches``: only the first that many batches of each epoch (of
    4: 32 photos in batches of 8), for the tests of what the Trainer does between steps."""
    from reelsearch.models import load_model
    from reelsearch.training.cnn_tail import TailTask

    expert = load_model(DEFAULT / "experts" / "lite0")
    task = TailTask("lite0", expert, source, tune_config(**keys), "train", "val", progress=False)
    assert len(task.batches(0)) == 4  # 32 photos in batches of 8
    if batches is not None:
        every = task.batches
        monkeypatch.setattr(task, "batches", lambda epoch: every(epoch)[:batches])
    return task


def test_an_interrupted_tuning_resumes_to_the_uninterrupted_weights(tuned, tmp_path, monkeypatch):
    """Stopped in the middle of its second epoch and run again, a tuning ends with the weights (tail and projections)
    and history of the same tuning run straight through; its state is JSON and safetensors, no pickle. (Two batches
    an epoch: a stop in the middle of one needs no more.)"""
    from safetensors.torch import load_file

    from reelsearch.features.caches import DatasetSource
    from reelsearch.training.trainer import Trainer

    root, manifest, cache = tuned
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    source, _ = DatasetSource.open(f"manifest:{manifest}")
    keys = dict(views=2, batch_size=8, epochs=2, lr_cnn=1e-3, checkpoint_every=1)

    def run(out, stop_at=None):
        task = tail_task(source, monkeypatch, batches=2, **keys)
        stop_loss_at(task, monkeypatch, stop_at)
        return Trainer(task, out, progress=False).fit()

    straight = run(tmp_path / "straight")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "stopped", stop_at=3)  # epoch 2, its second batch
    state = tmp_path / "stopped" / "last" / "state"
    assert sorted(p.name for p in state.iterdir()) == ["state.json", "state.safetensors"]
    info = json.loads((state / "state.json").read_text())["info"]
    assert (info["epoch"], info["step"]) == (1, 1)
    resumed = run(tmp_path / "stopped")
    assert [h["RSum"] for h in resumed["history"]] == [h["RSum"] for h in straight["history"]]
    assert resumed["best_epoch"] == straight["best_epoch"]
    for name in ("tail-appearance.safetensors", "model.safetensors"):
        a, b = (load_file(str(tmp_path / run / "last" / name)) for run in ("straight", "stopped"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_a_mixture_is_tuned_expert_by_expert(tuned, tmp_path):
    root, manifest, cache = tuned
    res = cli_here("tune-cnn", DEFAULT, "--expert", "lite0", "--data", f"manifest:{manifest}", "--out",
                   tmp_path / "moe", *tune_keys(views=2, batch_size=8, epochs=1), "--threads", "1", cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    moe = tmp_path / "moe" / "best"
    assert json.loads((moe / "moe.json").read_text())["experts"] == ["lite0", "lite2"]
    for name in ("config.json", "model.safetensors"):  # the other expert is the bundled one, untouched
        assert (moe / "experts" / "lite2" / name).read_bytes() == (DEFAULT / "experts" / "lite2" / name).read_bytes()
    assert (moe / "experts" / "lite0" / "tail-appearance.safetensors").is_file()
    assert (tmp_path / "moe" / "experts" / "lite0" / "best" / "tail-appearance.safetensors").is_file()  # its run
    report = json.loads((tmp_path / "moe" / "summary.json").read_text())
    assert list(report["experts"]) == ["lite0"] and report["result"]["RSum"] > 0
    assert "lite0: dev RSum" in res.stdout and "saved model on val" in res.stdout
    res = cli_here("tune-cnn", DEFAULT, "--expert", "nope", "--data", f"manifest:{manifest}", "--out", tmp_path / "x",
                   cache=cache)
    assert res.returncode != 0 and "no expert 'nope'" in res.stderr


def test_a_tuned_model_can_be_tuned_again_from_a_later_block(tuned, tmp_path):
    from safetensors.torch import load_file

    root, manifest, cache = tuned
    res = cli_here("tune-cnn", root / "out", "--data", f"manifest:{manifest}", "--out", tmp_path / "again",
                   *tune_keys(from_block=14, views=2, batch_size=8, epochs=1, lr_cnn=1e-3), "--threads", "1",
                   cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    again = tmp_path / "again" / "best"
    before = load_file(str(root / "out" / "best" / "tail-appearance.safetensors"))
    after = load_file(str(again / "tail-appearance.safetensors"))
    assert after.keys() == before.keys()  # blocks 12-13, tuned the first time, stay in the file
    assert all(torch.equal(after[k], before[k]) for k in before if k.startswith(("_blocks.12.", "_blocks.13.")))
    report = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert report["from_block"] == 14 and report["config"]["from_block"] == 14
    saved = json.loads((again / "config.json").read_text())["config"]["features"]["video"]
    assert saved["appearance"]["weights"] == appearance.combined_identity(
        PACKAGE_WEIGHTS["efficientnet-lite0"], file_identity(again / "tail-appearance.safetensors"))


def test_tune_options_are_config_keys_and_the_old_flags_say_so(tuned, tmp_path):
    root, manifest, cache = tuned
    res = cli_here("tune-cnn", root / "out", "--data", f"manifest:{manifest}", "--out", tmp_path / "x", "--epochs", "3",
                   cache=cache)
    assert res.returncode == 2 and "No such option: --epochs; use --set tune.epochs=3" in res.stderr
    res = cli_here("tune-cnn", root / "out", "--data", f"manifest:{manifest}", "--out", tmp_path / "x",
                   *tune_keys(epoch=3), cache=cache)
    assert res.returncode == 2 and "error: --set: tune.epoch: unknown key (did you mean 'epochs'?)" in res.stderr
    res = cli_here("tune-cnn", root / "out", "--data", f"manifest:{manifest}", "--out", tmp_path / "x",
                   *tune_keys(views=0), cache=cache)
    assert res.returncode == 2 and "views must be at least 1" in res.stderr
    assert not (tmp_path / "x").exists()


def test_the_trunk_cache_is_shared_while_the_trunk_runs_imagenet_weights(tuned, monkeypatch):
    from reelsearch.features.caches import DatasetSource
    from reelsearch.features.pipeline import FeaturePipeline
    from reelsearch.models import load_model
    from reelsearch.training.cnn_tail import TrunkCache

    root, manifest, cache = tuned
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    source, _ = DatasetSource.open(f"manifest:{manifest}")

    def store(model_dir, block):
        recipe = load_model(model_dir).recipes["appearance"]
        extractor = FeaturePipeline({"appearance": recipe}, device="cpu").extractor("appearance")
        return TrunkCache(source, recipe, extractor, block, 2, 0).store.root

    # the tuned model's tail starts at block 12: a cut at 12 runs ImageNet blocks only, a cut at 14 runs tuned ones
    assert store(root / "out", 12) == store(root / "fresh", 12)
    assert store(root / "out", 14) != store(root / "fresh", 14)


def test_the_best_epoch_is_kept_not_the_last(tuned, tmp_path, monkeypatch):
    """Training changes the weights in place: the kept epoch must be a copy (a bug once saved the last epoch). One
    batch an epoch: each epoch still moves the weights (checked below)."""
    from safetensors.torch import load_file

    from reelsearch.features.caches import DatasetSource
    from reelsearch.training.task import retrieval_validation
    from reelsearch.training.trainer import Trainer

    root, manifest, cache = tuned
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    source, _ = DatasetSource.open(f"manifest:{manifest}")
    task = tail_task(source, monkeypatch, batches=1, views=2, batch_size=8, epochs=3, lr_cnn=1e-2, lr=1e-2)
    scores = iter([100.0, 300.0, 200.0, 250.0])  # the start, then epochs 1-3: epoch 1 is the best
    snapshots = []

    def validate():
        snapshots.append({k: v.clone() for k, v in task.tail.tuned_state().items()})
        score = next(scores)
        return retrieval_validation({"RSum": score, "t2v": {"R@1": 0.0}, "v2t": {"R@1": 0.0}}, score)

    monkeypatch.setattr(task, "validate", validate)
    report = Trainer(task, tmp_path / "run", progress=False).fit()
    assert report["best_epoch"] == 1 and report["epochs_run"] == 3 and len(snapshots) == 4
    kept = load_file(str(tmp_path / "run" / "best" / "tail-appearance.safetensors"))
    last = load_file(str(tmp_path / "run" / "last" / "tail-appearance.safetensors"))
    assert all(torch.equal(kept[k], snapshots[1][k]) for k in kept)
    assert all(torch.equal(last[k], snapshots[3][k]) for k in last)
    assert not all(torch.equal(kept[k], last[k]) for k in kept)


def test_only_cosine_models_over_one_lite_cnn_are_tunable():
    from reelsearch.errors import ReelsearchError
    from reelsearch.models import JointModel, load_model
    from reelsearch.models.registry import model_config
    from reelsearch.training.cnn_tail import _check_tunable, tunable_experts

    assert tunable_experts(load_model(DEFAULT)) == ["lite0", "lite2"]
    model = JointModel(model_config("reelsearch-linear"))
    assert tunable_experts(model) == ["reelsearch-linear"]
    model.similarity_name = "order"
    assert tunable_experts(model) == []
    with pytest.raises(ReelsearchError, match="order similarity"):
        _check_tunable("m", model)


def test_a_photo_that_cannot_be_decoded_is_left_out_and_named(tmp_path, monkeypatch, messages):
    from reelsearch.datasets.item import Item
    from reelsearch.features.caches import DatasetSource
    from reelsearch.training.cnn_tail import TrunkCache

    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    manifest = flickr_manifest(tmp_path / "data", n_train=3, n_val=0)
    source, _ = DatasetSource.open(f"manifest:{manifest}")
    items = source.dataset.items("train")
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not a jpeg")
    items.insert(1, Item("broken", bad, ["a caption"], "train"))
    recipe = frame_recipe("efficientnet-lite0")
    lite0 = appearance.EfficientNetLite("efficientnet-lite0", runtime="torch")
    kept, rows = TrunkCache(source, recipe, lite0, 12, 2, 0).rows(items, progress=False)
    assert [it.id for it in kept] == [items[0].id, items[2].id, items[3].id]
    assert rows.shape == (3, 2, 192, 7, 7)
    assert str(bad) in messages()
