"""SCDE stage 1: masked-LM adaptation of MiniLM (reelsearch.text.mlm, run on the Trainer by
reelsearch.training.adapt_text), its use by models, the cache and the CLI."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cache_fixtures import seed_cache
from conftest import shared_path
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.text.minilm import MiniLMEncoder, package_model_dir
from reelsearch.text.mlm import IGNORE, build_mlm_head, mask_tokens, minilm_features_name, model_sha1
from reelsearch.training.adapt_text import adapt_minilm

torch.set_num_threads(1)


def _sha1(path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def _package_snapshot() -> dict:
    folder = package_model_dir()
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def _flickr_captions(n: int) -> list[str]:
    path = shared_path("flickr8k", "captions.txt")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1].strip() for line in lines[:n]]


# ---------------------------------------------------------------- masking and head


def test_mask_tokens_statistics_bert_style():
    gen = torch.Generator().manual_seed(0)
    n, width, cls, sep, pad, mask_id = 4000, 24, 101, 102, 0, 103
    lengths = torch.randint(4, width + 1, (n,), generator=gen)
    ids = torch.randint(1000, 3000, (n, width), generator=gen)
    ids[:, 0] = cls
    for i, length in enumerate(lengths.tolist()):
        ids[i, length - 1] = sep
        ids[i, length:] = pad
    excluded = (ids == cls) | (ids == sep) | (ids == pad)
    replacement = torch.arange(5000, 6000)  # disjoint from the real ids: a random replacement is recognisable
    inputs, labels = mask_tokens(ids, excluded, mask_id, replacement, 0.15, torch.Generator().manual_seed(7))

    chosen = labels != IGNORE
    assert not (chosen & excluded).any(), "special tokens or padding were chosen"
    assert torch.equal(labels[chosen], ids[chosen])  # exactly the chosen positions carry their original id
    assert torch.equal(inputs[~chosen], ids[~chosen])  # nothing else changes
    eligible = int((~excluded).sum())
    rate = int(chosen.sum()) / eligible
    assert abs(rate - 0.15) < 4 * (0.15 * 0.85 / eligible) ** 0.5
    k = int(chosen.sum())
    masked = int((inputs[chosen] == mask_id).sum()) / k
    randomised = int(((inputs[chosen] >= 5000) & (inputs[chosen] < 6000)).sum()) / k
    kept = int((inputs[chosen] == ids[chosen]).sum()) / k
    assert masked + randomised + kept == pytest.approx(1.0)
    tol = 4 * (0.1 * 0.9 / k) ** 0.5
    assert abs(masked - 0.8) < 4 * (0.8 * 0.2 / k) ** 0.5
    assert abs(randomised - 0.1) < tol and abs(kept - 0.1) < tol
    # the same seed gives the same masking
    again = mask_tokens(ids, excluded, mask_id, replacement, 0.15, torch.Generator().manual_seed(7))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)


def test_real_tokenizer_batch_never_masks_special_or_padding():
    from transformers import AutoTokenizer

    from reelsearch.text.mlm import masked_batch

    tok = AutoTokenizer.from_pretrained(str(package_model_dir()))
    rows = tok(["a dog runs on the grass .", "two kids play", "a man in a red shirt climbs a rock wall ."])["input_ids"]
    special = torch.tensor(sorted(set(tok.all_special_ids)))
    replacement = torch.tensor([i for i in range(len(tok)) if i not in set(tok.all_special_ids)])
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        inputs, attention, labels = masked_batch(rows, tok, special, replacement, 0.5, gen)
        chosen = labels != IGNORE
        original = torch.zeros_like(inputs)
        for i, r in enumerate(rows):
            original[i, : len(r)] = torch.tensor(r)
        assert not chosen[attention == 0].any()
        assert not torch.isin(original[chosen], special).any()
        assert (inputs[attention == 0] == tok.pad_token_id).all()


def test_mlm_head_is_berts_with_tied_decoder():
    from transformers import BertConfig

    config = BertConfig(vocab_size=50, hidden_size=8, hidden_act="gelu", layer_norm_eps=1e-12)
    embeddings = torch.nn.Embedding(50, 8)
    head = build_mlm_head(config, embeddings)
    assert head.decoder.weight is embeddings.weight
    assert torch.count_nonzero(head.decoder.bias) == 0
    h = torch.randn(5, 8)
    x = torch.nn.functional.gelu(h @ head.dense.weight.T + head.dense.bias)
    x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-12)
    expected = (x * head.norm.weight + head.norm.bias) @ embeddings.weight.T + head.decoder.bias
    assert torch.allclose(head(h), expected, atol=1e-5)


# ---------------------------------------------------------------- a real (tiny) adaptation


OVERRIDES = {"mlm.epochs": 1, "mlm.batch_size": 16, "mlm.lr": 1e-4, "mlm.heldout": 0.2, "mlm.seed": 0}


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    captions = _flickr_captions(200)
    before = _package_snapshot()
    out = tmp_path_factory.mktemp("mlm") / "minilm-adapted"
    report = adapt_minilm(captions, out, OVERRIDES, progress=False)
    return {"dir": out, "encoder": out / "best", "report": report, "captions": captions, "package_before": before}


def test_adaptation_lowers_heldout_loss_and_writes_report(adapted):
    report = adapted["report"]
    assert report["heldout_captions"] == 40 and report["train_captions"] == 160
    before, after = report["heldout_before"], report["heldout_after"]
    assert before["masked_tokens"] == after["masked_tokens"] > 20  # the same fixed masking scored twice
    assert after["loss"] < before["loss"] - 1.0
    assert after["accuracy"] >= before["accuracy"]
    assert len(report["train_loss"]) == 1 and report["steps"] == 10 and report["seconds"] > 0
    assert report["best_epoch"] == 1 and [h["epoch"] for h in report["history"]] == [0, 1]
    on_disk = json.loads((adapted["dir"] / "summary.json").read_text())  # the report lies beside the encoder
    assert on_disk["params"] == report["params"] and on_disk["params"]["captions"] == 200
    assert {"summary.json", "adaptation.json", "run.json", "log.csv"}.isdisjoint(
        p.name for p in adapted["encoder"].iterdir())
    assert (adapted["dir"] / "log.csv").read_text().startswith("epoch,train_loss")
    assert _package_snapshot() == adapted["package_before"], "the package's model folder changed"


def test_adapted_folder_loads_and_gives_new_token_features(adapted):
    captions = ["a dog runs through the grass .", "two children play in the water"]
    base = MiniLMEncoder(model_dir=package_model_dir())
    new = MiniLMEncoder(model_dir=adapted["encoder"])
    assert new.tokens(captions[0]) == base.tokens(captions[0])
    for a, b in zip(base.token_features(captions), new.token_features(captions)):
        assert a.shape == b.shape
        assert not np.allclose(a, b, atol=1e-3)
    assert model_sha1(adapted["encoder"]) != model_sha1(package_model_dir())


def test_rerun_same_params_is_reused_other_params_fail(adapted, monkeypatch):
    import reelsearch.training.adapt_text as adapt_text

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded: the finished adaptation was not reused")

    monkeypatch.setattr(adapt_text, "MiniLMEncoder", no_model)
    again = adapt_minilm(adapted["captions"], adapted["dir"], [f"{k}={v}" for k, v in OVERRIDES.items()],
                         progress=False)
    assert again["reused"] is True and again["heldout_after"] == adapted["report"]["heldout_after"]
    with pytest.raises(ReelsearchError, match="other parameters"):
        adapt_minilm(adapted["captions"], adapted["dir"], {**OVERRIDES, "mlm.epochs": 2})


def test_refuses_foreign_folders(tmp_path):
    captions = ["a dog runs", "a cat sleeps", "a man walks"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ReelsearchError, match="not an adapt-text run"):
        adapt_minilm(captions, tmp_path / "other", progress=False)
    with pytest.raises(ReelsearchError, match="base model folder"):
        adapt_minilm(captions, package_model_dir() / "adapted", progress=False)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_feature_cache_names_keep_encoders_apart(adapted, tmp_path, monkeypatch, onnx_exports):
    """Token features of the package's MiniLM and of an adapted one land in caches named apart. The fresh cache folder
    starts with both encoders' ONNX graphs (exported in the run's cache: this test is not about exporting)."""
    from reelsearch.features.caches import TOKENS, caption_features, caption_key
    from reelsearch.features.store import FeatureStore
    from reelsearch.models import MiniLMTextProcessor

    adapted_encoder = MiniLMEncoder(model_dir=adapted["encoder"], runtime="onnxruntime")
    adapted_encoder.sentence_features(["a dog"])  # its graph, exported once in the run's cache
    seed_cache(tmp_path / "cache", onnx_exports + [bert.path for bert in adapted_encoder._onnx.values()])
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    name = minilm_features_name(adapted["encoder"])
    assert minilm_features_name(None) == minilm_features_name(package_model_dir()) == "text-minilm"
    assert name == "text-minilm-" + _sha1(adapted["encoder"] / "model.safetensors")[:10]
    captions = ["a dog runs through the grass .", "a girl climbs a wall"]
    adapted_feats = caption_features(captions, MiniLMTextProcessor(model_dir=adapted["encoder"]), progress=False)
    base_feats = caption_features(captions, MiniLMTextProcessor(), progress=False)
    assert sorted(p.name for p in (tmp_path / "cache" / "text").iterdir()) == sorted(["text-minilm", name])
    store = FeatureStore(tmp_path / "cache" / "text" / name)
    assert all(store.has(TOKENS, caption_key(c)) for c in captions)
    expected = MiniLMEncoder(model_dir=adapted["encoder"]).token_features(captions)
    for got, want, base in zip(adapted_feats, expected, base_feats):
        assert np.allclose(got, want, atol=2e-2)  # stored as float16
        assert not np.allclose(got, base, atol=2e-2)


def test_the_recipe_carries_the_encoder_dir(adapted):
    from reelsearch.config.recipe import file_identity
    from reelsearch.models import model_config
    from reelsearch.models.registry import text_processor_for
    from reelsearch.training.run import with_text_encoder

    assert text_processor_for("scde-ablation-transformer").model_dir is None  # the package model
    for given in (adapted["encoder"], adapted["dir"]):  # the encoder folder, or the adapt-text run holding it
        cfg = with_text_encoder(model_config("scde-ablation-transformer"), given)
        assert cfg.features.text.encoder == str(adapted["encoder"].resolve()) and cfg.features.text.adapted
        assert cfg.features.text.weights == file_identity(adapted["encoder"] / "model.safetensors")
        assert text_processor_for(cfg).model_dir == str(adapted["encoder"].resolve())


def test_saved_joint_model_is_self_contained(adapted, tmp_path, monkeypatch):
    """(In torch: the encoder's ONNX graphs are test_feature_cache_names_keep_encoders_apart's.)"""
    from reelsearch.models import JointModel, create_model, model_config
    from reelsearch.training.run import with_text_encoder

    monkeypatch.setenv("REELSEARCH_TEXT_RUNTIME", "torch")

    encoder_copy = tmp_path / "my-encoder"
    shutil.copytree(adapted["encoder"], encoder_copy)
    torch.manual_seed(0)
    model = create_model(with_text_encoder(model_config("scde-ablation-transformer"), encoder_copy)).eval()
    captions = ["a dog runs through the grass .", "a man rides a bike"]
    want = model.encode_text(captions)
    ckpt = model.save(tmp_path / "ckpt")
    meta = json.loads((ckpt / "config.json").read_text())
    assert meta["config"]["features"]["text"]["encoder"] == "text-encoder"
    weights = ckpt / "text-encoder" / "model.safetensors"
    first = weights.stat().st_ino
    model.save(ckpt)  # identical encoder already there: left alone
    assert weights.stat().st_ino == first
    shutil.rmtree(encoder_copy)

    loaded = JointModel.load(ckpt)
    assert loaded.text_processor.model_dir == str((ckpt / "text-encoder").resolve())
    got = loaded.encode_text(captions)
    assert np.allclose(got, want, atol=1e-5)
    loaded.save(tmp_path / "ckpt2")  # re-saving a loaded model bundles the encoder again
    assert (tmp_path / "ckpt2" / "text-encoder" / "modules.json").is_file()

    shutil.rmtree(ckpt / "text-encoder")
    with pytest.raises(DataFormatError, match="text-encoder"):
        JointModel.load(ckpt)


# ---------------------------------------------------------------- CLI


def _manifest(tmp_path, captions):
    lines = [json.dumps({"id": f"clip{i}", "path": None, "captions": captions[i:i + 5], "split": "train"})
             for i in range(0, len(captions), 5)]
    path = tmp_path / "manifest.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_adapt_text(tmp_path):
    from reelsearch.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["adapt-text", "--help"])
    assert result.exit_code == 0 and "mlm.mask_prob" in result.output
    assert "--text-encoder" in runner.invoke(app, ["train", "--help"]).output

    manifest = _manifest(tmp_path, _flickr_captions(40))
    out = tmp_path / "enc"
    args = ["adapt-text", "--data", f"manifest:{manifest}", "--out", str(out), "--set", "mlm.epochs=1", "--set",
            "mlm.batch_size=8", "--set", "mlm.heldout=0.1", "--threads", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["params"]["captions"] == 40 and report["train_captions"] == 36 and report["split"] == "train"
    assert report["params"]["batch_size"] == 8 and report["heldout_captions"] == 4
    assert (out / "best" / "modules.json").is_file() and (out / "summary.json").is_file()
    again = runner.invoke(app, args[:-1])
    assert again.exit_code == 0 and "already holds this adaptation" in again.output
    old = runner.invoke(app, ["adapt-text", "--data", f"manifest:{manifest}", "--out", str(out), "--mask-prob", "0.2"])
    assert old.exit_code == 2 and "use --set mlm.mask_prob=0.2" in old.output
    typo = runner.invoke(app, ["adapt-text", "--data", f"manifest:{manifest}", "--out", str(out), "--set",
                               "mlm.mask_probability=0.2"])
    assert isinstance(typo.exception, ReelsearchError)
    assert "--set: mlm.mask_probability: unknown key (did you mean 'mask_prob'?)" in str(typo.exception)
    bad = runner.invoke(app, ["adapt-text", "--data", f"manifest:{manifest}", "--split", "test", "--out",
                              str(tmp_path / "x")])
    assert bad.exit_code != 0


def test_train_with_text_encoder_uses_and_bundles_it(adapted, tmp_path, monkeypatch):
    """(The captions' features in torch: exporting the adapted encoder is not what is tested here.)"""
    from reelsearch.models import JointModel
    from reelsearch.training.run import train
    from train_fixtures import make_dataset, small

    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("REELSEARCH_TEXT_RUNTIME", "torch")
    manifest, store = make_dataset(tmp_path / "toy", n_train=64, n_val=16)
    with pytest.raises(ReelsearchError, match="reads no MiniLM"):
        train("torabi-m1", f"manifest:{manifest}", tmp_path / "x", features=store, text_encoder=adapted["dir"])
    with pytest.raises(ReelsearchError, match="not a sentence-transformers"):
        train("scde-ablation-bert", f"manifest:{manifest}", tmp_path / "x", features=store, text_encoder=tmp_path)
    name = "scde-ablation-bert"
    train(name, f"manifest:{manifest}", tmp_path / "run", features=store, overrides=small(name, epochs=1),
          progress=False, text_encoder=adapted["dir"])
    assert [p.name for p in (tmp_path / "cache" / "text").iterdir()] == [minilm_features_name(adapted["encoder"])]
    best = JointModel.load(tmp_path / "run" / "best")
    assert best.text_processor.model_dir == str((tmp_path / "run" / "best" / "text-encoder").resolve())
    assert model_sha1(best.text_processor.model_dir) == model_sha1(adapted["encoder"])
