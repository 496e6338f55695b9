"""Querybank normalisation (`reelsearch querybank`, Bogolin et al. 2022): the offsets are the paper's inverted
softmax (checked against its equation computed the long way, and on a hand-worked hub), the bank travels with the
model and refuses another model, and through the CLI on real Flickr8k photos from a cold feature cache the saved
bank is what `eval` applies."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from cache_fixtures import seed_cache
from rank_bounds import assert_metrics_within
from test_cold_cache import flickr_manifest

torch = pytest.importorskip("torch")
from reelsearch.errors import ConfigError, DataFormatError  # noqa: E402
from reelsearch.models.querybank import BANK_FILE, QueryBank  # noqa: E402


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_the_offsets_are_the_inverted_softmax_of_the_paper():
    rng = np.random.default_rng(0)
    bank = QueryBank(_unit(rng, 300, 16), _unit(rng, 70, 16), beta=20.0)
    queries, videos = _unit(rng, 9, 16), _unit(rng, 5, 16)
    scores = queries @ videos.T
    t2v, v2t = bank.normalise(scores, queries, videos)
    for q in range(len(queries)):
        for g in range(len(videos)):
            # eq. (3): exp(beta s(q, g)) / sum_b exp(beta s(b, g)), b over the bank's captions (text to video)
            num = math.exp(20.0 * float(queries[q] @ videos[g]))
            den = sum(math.exp(20.0 * float(b @ videos[g])) for b in bank.text)
            assert t2v[q, g] == pytest.approx(math.log(num / den) / 20.0, abs=1e-5)
            # video to text: the caption q is the gallery item, the bank's videos the queries
            den = sum(math.exp(20.0 * float(queries[q] @ b)) for b in bank.video)
            assert v2t[q, g] == pytest.approx(math.log(num / den) / 20.0, abs=1e-5)


def test_a_hub_loses_its_place_to_the_true_match():
    # two videos in 2-d: the hub (1, 0) is near every training caption, the true match (0, 1) near none of them
    hub, match = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    query = np.array([[0.8, 0.6]])  # s(q, hub) = 0.8 > s(q, match) = 0.6: the raw ranking puts the hub first
    captions = np.array([[0.9, np.sqrt(1 - 0.81)]] * 10)  # the bank: ten captions, 0.9 to the hub, 0.436 to the match
    bank = QueryBank(captions, np.eye(2), beta=10.0)
    videos = np.stack([hub, match])
    t2v, _ = bank.normalise(query @ videos.T, query, videos)
    # by hand: offsets log(10 e^9) / 10 = 1.1303 (hub) and log(10 e^4.359) / 10 = 0.6661 (match)
    assert bank.video_offsets(videos) == pytest.approx([0.9 + math.log(10) / 10, 0.43589 + math.log(10) / 10],
                                                       abs=1e-4)
    assert np.argmax(query @ videos.T) == 0 and np.argmax(t2v) == 1


def test_the_bank_is_saved_with_the_model_and_refuses_another(tmp_path):
    from reelsearch.models import JointModel, load_model
    from reelsearch.models.registry import model_config

    torch.manual_seed(0)
    model = JointModel(model_config("reelsearch-linear"))
    rng = np.random.default_rng(1)
    bank = QueryBank(_unit(rng, 20, model.row_dim), _unit(rng, 4, model.row_dim), 15.0, model.fingerprint(), "x")
    model.querybank = bank
    model.save(tmp_path / "m")  # a part of the model: saved with it, loaded with it
    loaded = load_model(tmp_path / "m")
    assert loaded.querybank.beta == 15.0 and loaded.querybank.source == "x"
    # stored as int8 with a scale per row: the offsets move by well under a rank's worth
    np.testing.assert_allclose(loaded.querybank.text, bank.text, atol=np.abs(bank.text).max() / 254 + 1e-7)
    videos = _unit(rng, 50, model.row_dim)
    np.testing.assert_allclose(loaded.querybank.video_offsets(videos), bank.video_offsets(videos), atol=2e-3)
    assert loaded.querybank.digest() != QueryBank(bank.text, bank.video, 20.0).digest()  # beta counts
    # loaded, it holds its int8 rows alone (its digest and description read them, keeping nothing); its float32
    # rows are made when first read, and give what a bank given those rows gives, to the bit
    held = load_model(tmp_path / "m").querybank
    rows = {k: held.stored[k].astype(np.float32) * held.stored[f"{k}_scale"] for k in ("text", "video")}
    floats = QueryBank(rows["text"], rows["video"], 15.0, held.model, held.source)
    assert held.digest() == floats.digest() and held.describe() == floats.describe()
    assert held.__dict__["text"] is None and held.__dict__["video"] is None
    assert np.array_equal(held.video_offsets(videos), floats.video_offsets(videos))
    assert np.array_equal(held.caption_offsets(videos), floats.caption_offsets(videos))
    assert held.__dict__["text"] is not None and np.array_equal(held.text, rows["text"])
    assert np.array_equal(held.video, rows["video"])
    held.save(tmp_path / "again")
    assert QueryBank.load(tmp_path / "again", {"files": [BANK_FILE]}).digest() == held.digest()
    with pytest.raises(ConfigError, match="needs its rows"):
        QueryBank(None, rows["video"])
    # the same folder with other weights: the bank's offsets would be wrong, and loading says so
    torch.manual_seed(1)
    JointModel(model_config("reelsearch-linear")).save(tmp_path / "other")
    shutil.copyfile(tmp_path / "other" / "model.safetensors", tmp_path / "m" / "model.safetensors")
    with pytest.raises(DataFormatError, match=f"{BANK_FILE}.*another model"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / BANK_FILE).write_bytes(b"not safetensors")
    with pytest.raises(DataFormatError, match="unreadable querybank"):
        load_model(tmp_path / "m")


def test_a_float16_bank_of_the_first_format_still_loads(tmp_path):
    from safetensors.numpy import save_file

    from reelsearch.models.querybank import FORMAT

    rng = np.random.default_rng(2)
    text, video = _unit(rng, 12, 8), _unit(rng, 3, 8)
    save_file({"text": text.astype(np.float16), "video": video.astype(np.float16)}, str(tmp_path / BANK_FILE),
              metadata={"format": FORMAT, "beta": "20.0", "model": "m", "source": "s"})
    bank = QueryBank.load(tmp_path, {"kind": "querybank", "files": [BANK_FILE]})
    np.testing.assert_allclose(bank.text, text, atol=1e-3)
    np.testing.assert_allclose(bank.video, video, atol=1e-3)


def test_only_inner_product_models_take_a_bank():
    from reelsearch.models import JointModel
    from reelsearch.models.querybank import check_bank_model
    from reelsearch.models.registry import model_config

    cfg = model_config("reelsearch-linear")
    check_bank_model(JointModel(cfg))
    cfg.model.similarity = "order"  # Torabi's order-violation similarity: no inner product
    with pytest.raises(ConfigError, match="querybank normalisation needs"):
        check_bank_model(JointModel(cfg))
    with pytest.raises(ConfigError, match="positive"):
        QueryBank(np.ones((2, 3)), np.ones((2, 3)), beta=0.0)


@pytest.mark.slow
def test_the_cli_builds_the_bank_and_eval_applies_it(tmp_path, monkeypatch, onnx_exports):
    pytest.importorskip("efficientnet_lite_pytorch")
    from typer.testing import CliRunner

    from reelsearch.cli.main import app
    from reelsearch.datasets import load_dataset
    from reelsearch.errors import ReelsearchError
    from reelsearch.models import JointModel, load_model
    from reelsearch.models.registry import model_config

    manifest = flickr_manifest(tmp_path / "data", n_train=24, n_val=8)
    cache = seed_cache(tmp_path / "cache", onnx_exports)  # no features yet; the run's ONNX exports
    torch.manual_seed(0)
    JointModel(model_config("reelsearch-linear")).save(tmp_path / "model")
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    res = CliRunner().invoke(app, ["querybank", str(tmp_path / "model"), "--data", f"manifest:{manifest}", "--out",
                                   str(tmp_path / "qb"), "--threads", "1", "--json"])
    assert res.exit_code == 0, res.output[-3000:]
    rep = json.loads(res.stdout)
    assert rep["querybank"]["captions"] == 24 * 5 and rep["querybank"]["videos"] == 24
    # a run folder: the model with its bank in best/, the report beside it (never in the model folder)
    assert json.loads((tmp_path / "qb" / "querybank.json").read_text()) == rep
    assert sorted(p.name for p in (tmp_path / "qb" / "best").iterdir()) == [
        "config.json", "model.safetensors", BANK_FILE, "reelsearch.json"]
    # a refusal is a ReelsearchError (one line, exit status 2 from `reelsearch`, as tests/test_search_cli.py checks
    # in a real process): checked in this one
    into_model = CliRunner().invoke(app, ["querybank", str(tmp_path / "model"), "--data", f"manifest:{manifest}",
                                          "--out", str(tmp_path / "model")])
    assert isinstance(into_model.exception, ReelsearchError)
    assert "a model folder; pass a run folder" in str(into_model.exception)
    assert rep["split"] == "train" and rep["val_split"] == "val"
    # eval of the saved model applies the bank; --no-querybank gives the raw scores of the same model
    runs = [CliRunner().invoke(app, ["eval", str(tmp_path / "qb"), "--data", f"manifest:{manifest}", "--json",
                                     "--out", str(tmp_path / f"{name}.json"), *flags])
            for name, flags in (("e", []), ("r", ["--no-querybank"]))]
    assert all(r.exit_code == 0 for r in runs), [r.output[-3000:] for r in runs]
    ev, raw = (json.loads(r.stdout) for r in runs)
    assert ev["querybank"]["beta"] == 20.0 and "querybank" not in raw
    assert ev["RSum"] == pytest.approx(rep["normalised"]["RSum"]) and raw["RSum"] == pytest.approx(rep["raw"]["RSum"])
    # the same numbers from the embeddings by hand: the bank is the train split's, the offsets the paper's
    model = load_model(tmp_path / "qb")
    ds = load_dataset("manifest", manifest)
    train, val = ds.items("train"), ds.items("val")
    caps = [c for it in val for c in it.captions]
    cap2vid = np.array([i for i, it in enumerate(val) for _ in it.captions])
    t, v = model.encode_text(caps), model.encode_video([str(it.path) for it in val]).video
    bank_t = model.encode_text([c for it in train for c in it.captions])
    bank_v = model.encode_video([str(it.path) for it in train]).video
    s = t @ v.T
    lse = lambda x, axis: np.log(np.exp(20.0 * x).sum(axis=axis)) / 20.0  # noqa: E731
    # (the CLI's path and this one agree to rounding: metrics checked against their range over near-ties)
    assert_metrics_within(ev, s - lse(bank_t @ v.T, 0)[None, :], cap2vid, directions=("t2v",))
    assert_metrics_within(ev, s - lse(t @ bank_v.T, 1)[:, None], cap2vid, directions=("v2t",))
    # search and annotate rank by the same normalised scores: each video's offset stored when it was indexed
    from reelsearch.search import Searcher

    off_v, off_c = lse(bank_t @ v.T, 0), lse(t @ bank_v.T, 1)
    with Searcher(tmp_path / "index", load_model(tmp_path / "qb")) as searcher:
        searcher.index([str(it.path) for it in val], progress=False, cues=())
        column = {str(it.path.resolve()): j for j, it in enumerate(val)}
        for qi in (0, 7, 13):
            hits = searcher.search(caps[qi], k=len(val), frames=False)
            got = {column[str(Path(h.path).resolve())]: h.score for h in hits}
            assert got == pytest.approx({j: float(s[qi, j] - off_v[j]) for j in range(len(val))}, abs=2e-3)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        ranked = searcher.annotate(val[2].path, caps[:10])
        assert {r["caption"]: r["score"] for r in ranked} == pytest.approx(
            {caps[i]: float(s[i, 2] - off_c[i]) for i in range(10)}, abs=2e-3)
    # the folder moved elsewhere still has its bank; the bank's split as the report split is refused
    shutil.move(tmp_path / "qb", tmp_path / "moved")
    assert load_model(tmp_path / "moved").querybank is not None
    bad = CliRunner().invoke(app, ["querybank", str(tmp_path / "moved"), "--data", f"manifest:{manifest}", "--out",
                                   str(tmp_path / "moved"), "--val-split", "train"])
    assert isinstance(bad.exception, ReelsearchError) and "training queries" in str(bad.exception)
