"""JointModel: shapes of every named model, masking, M3 attention vs a loop over pairs, save/load, experts."""

from __future__ import annotations

import json
import os
import stat
import struct

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reelsearch.config import config_from_dict
from reelsearch.errors import ConfigError, DataFormatError, QueryError
from reelsearch.models import (
    GloveTextProcessor,
    JointModel,
    MiniLMTextProcessor,
    MixtureOfExperts,
    VocabTextProcessor,
    create_model,
    list_models,
    model_config,
)
from reelsearch.models import joint as joint_module
from reelsearch.models.encoders import FrameStates
from reelsearch.scoring import MITHUN2018_WEIGHTS

torch.set_num_threads(1)

WORDS = ["a", "man", "dog", "is", "running", "playing", "guitar", "the"]


def vocab():
    return VocabTextProcessor(WORDS, tokenizer=str.split)


def small(name: str, **kw):
    """A named model with a smaller video input so that tests stay fast (the architecture is unchanged); models
    learning their word vectors get the small vocabulary ``WORDS``."""
    cfg = model_config(name)
    proc = vocab() if getattr(getattr(cfg, "features", None), "text", None) and cfg.features.text.kind == "vocab" \
        else None
    if name == "mithun-moe":
        proc = {k: vocab() for k in ("object", "activity", "place")}
    return create_model(name, text_processor=proc, **kw)


def text_batch(model: JointModel, n=4, L=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([L, 3, 1, 5][:n])
    if model.config.features.text.kind == "vocab":
        return {"ids": torch.randint(2, len(WORDS) + 2, (n, L), generator=g), "lengths": lengths}
    d = model.config.features.text.dim
    return {"feats": torch.randn(n, L, d, generator=g), "lengths": lengths}


def dims(model) -> dict:
    """{modality: feature size} of the video features a model reads."""
    return {m: r.dim for m, r in model.recipes.items()}


def video_batch(modalities: dict, m=3, T=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {"feats": {k: torch.randn(m, T, d, generator=g) for k, d in modalities.items()},
            "lengths": {k: torch.tensor([T, 4, 2][:m]) for k in modalities}}


def pad_junk(batch: dict, extra=4) -> dict:
    """The same batch with junk appended and written over every padded step."""
    def junk(x, lengths):
        out = (torch.randint(0, int(x.max()) + 1, (x.size(0), x.size(1) + extra)) if x.dtype == torch.long
               else torch.randn(x.size(0), x.size(1) + extra, x.size(2)) * 100)
        for i, n in enumerate(lengths.tolist()):
            out[i, :n] = x[i, :n]
        return out

    if isinstance(batch.get("feats"), dict):
        return {"feats": {k: junk(v, batch["lengths"][k]) for k, v in batch["feats"].items()},
                "lengths": batch["lengths"]}
    key = "ids" if "ids" in batch else "feats"
    return {key: junk(batch[key], batch["lengths"]), "lengths": batch["lengths"]}


SINGLE = [n for n in list_models() if not hasattr(model_config(n), "experts")]  # joint models (not mixtures)


@pytest.mark.parametrize("name", SINGLE)
def test_shapes_masking_and_norms(name):
    torch.manual_seed(0)
    model = small(name).eval()
    tb, vb = text_batch(model), video_batch(dims(model))
    with torch.no_grad():
        t, v = model.text_forward(tb), model.video_forward(vb)
        sims = model.similarity(t, v)
        assert sims.shape == (4, 3) and torch.isfinite(sims).all()
        assert t.shape == (4, model.dim)
        torch.testing.assert_close(t.norm(dim=1), torch.ones(4))
        if not model.is_pairwise:
            assert v.shape == (3, model.dim)
            torch.testing.assert_close(v.norm(dim=1), torch.ones(3))
        torch.testing.assert_close(model(pad_junk(tb), pad_junk(vb)), sims, rtol=1e-4, atol=1e-5)
    if model.config.model.similarity == "order":
        assert (t >= 0).all()  # absolute values (Torabi §4)


def test_m3_similarity_equals_a_loop_over_pairs(monkeypatch):
    torch.manual_seed(1)
    model = small("torabi-m3", features__video__appearance__dim=12).eval()
    tb, vb = text_batch(model), video_batch({"appearance": 12}, m=3, T=6)
    frames, lengths = vb["feats"]["appearance"], vb["lengths"]["appearance"]
    with torch.no_grad():
        c = model.text_forward(tb)
        states = model.video_forward(vb)
        assert isinstance(states, FrameStates) and states.values.shape == (3, 6, 950)
        sims = model.similarity(c, states)
        monkeypatch.setattr(joint_module, "ATTENTION_CHUNK_ELEMENTS", 1)  # one pair per block
        torch.testing.assert_close(model.similarity(c, states), sims)
        att, proj = model.attention, model.video_projection
        for i in range(4):
            for j in range(3):
                n = int(lengths[j])
                e = att.score(torch.tanh(att.frame_proj(frames[j, :n]) + att.query_proj(c[i]))).squeeze(-1)
                pooled = (torch.softmax(e, 0)[:, None] * frames[j, :n]).sum(0)  # weighted average of raw frames
                vid = F.normalize(proj.linear(pooled).abs(), dim=0)
                expected = -((c[i] - vid).clamp_min(0) ** 2).sum()
                torch.testing.assert_close(sims[i, j], expected, rtol=1e-4, atol=1e-6)
        w = model.attention_weights(c, states)
        torch.testing.assert_close(w.sum(-1), torch.ones(4, 3))
        # re-ranking a candidate subset (the paper's Fig. 4 use) gives the same scores as the full matrix
        torch.testing.assert_close(model.similarity(c, states.select(torch.tensor([2, 0]))), sims[:, [2, 0]])


def test_m3_one_frame_videos_skip_the_attention_exactly():
    """Images (one-frame videos, padded or not) take the shortcut; it equals the attention path block by block."""
    torch.manual_seed(3)
    model = small("torabi-m3", features__video__appearance__dim=12).eval()
    tb = text_batch(model)
    vb = {"feats": {"appearance": torch.randn(5, 3, 12)}, "lengths": {"appearance": torch.ones(5, dtype=torch.long)}}
    with torch.no_grad():
        c, states = model.text_forward(tb), model.video_forward(vb)
        fast = model.similarity(c, states)
        slow = model._attended_block(c, states.keys, states.values, states.lengths)  # the pairwise attention
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.attention_weights(c, states)[..., 0], torch.ones(4, 5))


def test_m3_trains_through_the_chunked_attention():
    torch.manual_seed(2)
    model = small("torabi-m3", features__video__appearance__dim=12).train()
    sims = model(text_batch(model), video_batch({"appearance": 12}))
    sims.sum().backward()
    assert model.attention.frame_proj.weight.grad.abs().sum() > 0
    assert model.text_encoder.rnn.weight_ih_l0.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["torabi-m3", "mithun-expert", "scde"])
def test_save_load_round_trip_without_pickle(name, tmp_path):
    torch.manual_seed(3)
    # scde at full size writes ~400 MB; a narrower bi-GRU keeps every part (SMSDC, FC + BatchNorm) but is fast
    model = small(name, model__video__encoder__hidden_size=32) if name == "scde" else small(name)
    if name == "scde":  # give BatchNorm non-trivial running statistics first
        model.train()
        with torch.no_grad():
            model(text_batch(model), video_batch(dims(model)))
    model.eval()
    tb, vb = text_batch(model), video_batch(dims(model))
    with torch.no_grad():
        before = model(tb, vb)
    model.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors",
                                                                  "reelsearch.json"]
    manifest = json.loads((tmp_path / "m" / "reelsearch.json").read_text())
    assert manifest["model"] == "joint-model" and manifest["parts"] == [
        {"kind": "config", "files": ["config.json"]}, {"kind": "weights", "files": ["model.safetensors"]}]
    umask = os.umask(0o022)
    os.umask(umask)
    for file in ("config.json", "model.safetensors", "reelsearch.json"):  # shareable (safetensors once left 0600)
        assert stat.S_IMODE((tmp_path / "m" / file).stat().st_mode) == 0o666 & ~umask, file
    raw = (tmp_path / "m" / "model.safetensors").read_bytes()
    header_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + header_len])  # a safetensors header: plain JSON, no pickle opcodes
    assert "__metadata__" in header and not raw.startswith(b"\x80")
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config_from_dict(meta["config"]) == model.config and meta["version"] == 2
    assert meta["config"]["features"]["video"]["appearance"]["extractor"] == "efficientnet-lite0"  # the recipe
    if name == "mithun-expert":
        assert meta["vocabulary"][:2] == ["<pad>", "<unk>"] and "guitar" in meta["vocabulary"]
    loaded = JointModel.load(tmp_path / "m")
    loaded.text_processor._tokenizer = str.split if name == "mithun-expert" else None
    with torch.no_grad():
        torch.testing.assert_close(loaded(tb, vb), before)
    assert not loaded.training


def test_load_reports_bad_directories(tmp_path):
    with pytest.raises(DataFormatError, match="reelsearch.json: missing"):
        JointModel.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(DataFormatError, match="invalid JSON"):
        JointModel.load(tmp_path)
    model = small("torabi-m1")
    model.save(tmp_path / "ok")
    (tmp_path / "ok" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataFormatError, match="model.safetensors"):
        JointModel.load(tmp_path / "ok")


def test_vocab_processor_and_glove_init():
    proc = VocabTextProcessor.build(["a man is running", "a dog is running", "zebra"], min_count=2,
                                    tokenizer=str.split)
    assert proc.words == ["<pad>", "<unk>", "a", "is", "running"]
    batch = proc(["a zebra is running", ""])
    assert batch["ids"].tolist() == [[2, 1, 3, 4], [1, 0, 0, 0]] and batch["lengths"].tolist() == [4, 1]

    class FakeGlove:
        vectors = torch.arange(100, dtype=torch.float32).reshape(2, 50)
        index = {"a": 0, "running": 1}

    model = create_model("mithun-expert", text_processor=proc, glove=FakeGlove(), model__text__glove_init="pad")
    emb = model.text_encoder.embedding.weight
    torch.testing.assert_close(emb[2, :50], FakeGlove.vectors[0])
    assert emb[2, 50:].abs().sum() == 0
    model = create_model("mithun-expert", text_processor=proc, glove=FakeGlove(), model__text__glove_init="project")
    emb = model.text_encoder.embedding.weight
    torch.testing.assert_close(emb[4] @ emb[2], FakeGlove.vectors[1] @ FakeGlove.vectors[0])  # inner products kept


def test_vocab_model_requires_its_vocabulary():
    with pytest.raises(ValueError, match="VocabTextProcessor"):
        create_model("mithun-expert")


def feature_items(dims: dict, m=3, T=9, seed=1) -> list[dict]:
    """``m`` videos as feature dicts {modality: [T_i, D]} (the numpy interface's input)."""
    batch = video_batch(dims, m, T, seed)
    return [{k: batch["feats"][k][i, : int(batch["lengths"][k][i])].numpy() for k in dims} for i in range(m)]


def test_mixture_of_experts_fuses_by_score_and_round_trips(tmp_path):
    from dataclasses import replace

    torch.manual_seed(4)
    moe = small("mithun-moe").eval()
    assert isinstance(moe, MixtureOfExperts) and moe.fusion.weights == {"object": 1.0, "activity": 1.0, "place": 0.5}
    assert moe.experts["activity"].modalities == ["motion", "audio"]
    assert moe.modalities == ["appearance", "motion", "audio", "place"]
    captions = ["a man is playing the guitar", "a dog is running", "the man"]
    items = feature_items(dims(moe))
    text, video = moe.encode_text(captions), moe.encode_video(items)
    assert text.shape == (3, 3 * 1024) and video.video.shape == (3, 3 * 1024)
    fused = moe.score(text, video)
    parts = moe.expert_scores(text, video)
    np.testing.assert_allclose(fused, parts["object"] + parts["activity"] + 0.5 * parts["place"], rtol=1e-5,
                               atol=1e-6)
    # each expert alone: its own encoders on its own features
    with torch.no_grad():
        obj = moe.experts["object"]
        alone = obj.similarity(obj.text_forward(obj.text_processor(captions)),
                               obj.video_forward(video_batch({"appearance": 1280})))
    np.testing.assert_allclose(parts["object"], alone.numpy(), rtol=1e-4, atol=1e-5)
    # inner product of the ANN query with a stored row is the fused score
    np.testing.assert_allclose(moe.ann_query(text) @ video.video.T, fused, rtol=1e-4, atol=1e-5)
    by_rank = MixtureOfExperts(dict(moe.experts), replace(moe.fusion, kind="rank"), "r").score(text, video)
    ranks = {k: (-torch.as_tensor(p)).argsort(1).argsort(1).float() + 1 for k, p in parts.items()}  # no ties
    np.testing.assert_allclose(by_rank, -(ranks["object"] + ranks["activity"] + 0.5 * ranks["place"]).numpy())
    assert MITHUN2018_WEIGHTS == tuple(moe.fusion.weights.values())
    moe.save(tmp_path / "moe")
    loaded = MixtureOfExperts.load(tmp_path / "moe")
    for e in loaded.experts.values():
        e.text_processor._tokenizer = str.split
    np.testing.assert_allclose(loaded.score(loaded.encode_text(captions), loaded.encode_video(items)), fused,
                               rtol=1e-5, atol=1e-6)


def test_the_numpy_interface_refuses_an_empty_text_and_gives_arrays():
    """``encode_text`` refuses an empty or blank text with a search's empty-query error (a mixture and a single
    joint space alike); ``np.asarray`` of ``encode_video`` is its video rows, never a 0-d object array."""
    torch.manual_seed(4)
    moe = small("mithun-moe").eval()
    single = moe.experts["object"]
    for model in (moe, single):
        for texts in ([""], "   ", ["\n"]):
            with pytest.raises(QueryError) as err:
                model.encode_text(texts)
            assert str(err.value) == "the query is empty"
        with pytest.raises(QueryError, match=r"^the query is empty \(text 2 of 3\)$"):
            model.encode_text(["a dog", " ", "a cat"])
        video = model.encode_video(feature_items(dims(model)))
        rows = np.asarray(video)
        assert rows.dtype == np.float32 and rows.shape == video.video.shape and rows.shape[0] == 3
        np.testing.assert_array_equal(rows, video.video)
        assert np.asarray(video, np.float64).dtype == np.float64
        np.testing.assert_allclose(model.score(model.encode_text(["a dog"]), rows), model.score(
            model.encode_text(["a dog"]), video), rtol=1e-6)


def test_experts_reading_one_modality_made_two_ways_get_their_own_features():
    """Two experts over EfficientNet-Lite0 and Lite2 appearance: the second's features are named appearance@NAME,
    and each expert embeds its own."""
    torch.manual_seed(8)
    lite0 = small("mithun-expert", features__video__appearance__dim=16)
    lite2 = small("mithun-expert", features__video__appearance={"extractor": "efficientnet-lite2", "dim": 24,
                                                               "weights": None})
    moe = MixtureOfExperts({"lite0": lite0, "lite2": lite2}, {"kind": "score", "weights": {"lite0": 1, "lite2": 1}})
    assert list(moe.recipes) == ["appearance", "appearance@lite2"]
    items = [{"appearance": np.random.rand(3, 16).astype(np.float32),
              "appearance@lite2": np.random.rand(3, 24).astype(np.float32)}]
    video = moe.encode_video(items)
    np.testing.assert_allclose(video.parts["lite2"].video, lite2.encode_video([{"appearance":
                                                                                items[0]["appearance@lite2"]}]).video)
    with pytest.raises(ConfigError, match="appearance@lite2"):
        moe.encode_video([{"appearance": items[0]["appearance"]}])


@pytest.mark.parametrize("name", ["torabi-m1", "torabi-m3", "scde-ablation-bert"])
def test_numpy_interface_equals_the_tensor_path(name):
    """encode_text / encode_video / score give what the tensor forward gives; frame rows embed each frame alone;
    frame_scores is the per-frame similarity (attention weights for M3)."""
    torch.manual_seed(9)
    model = small(name, features__video__appearance__dim=12).eval()
    captions = ["a man is playing the guitar", "a dog is running"]
    if model.config.features.text.kind == "minilm":
        pytest.importorskip("sentence_transformers")
    items = feature_items({"appearance": 12}, m=3, T=5)
    text = model.encode_text(captions)
    video = model.encode_video(items, batch_size=2)
    with torch.no_grad():
        t = model.text_forward(model.text_processor(captions))
        v = model.video_forward(video_batch({"appearance": 12}, m=3, T=5))
        want = model.similarity(t, v).numpy()
    np.testing.assert_allclose(text, t.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.score(text, video), want, rtol=1e-4, atol=1e-5)
    assert [len(f) for f in video.frames] == [5, 4, 2]
    for i, item in enumerate(items):
        alone = model.encode_video([{"appearance": item["appearance"][j:j + 1]} for j in range(len(video.frames[i]))])
        if model.is_pairwise:  # frame rows are attention keys and projected values
            np.testing.assert_allclose(video.frames[i], np.concatenate([f for f in alone.frames]), rtol=1e-4, atol=1e-5)
            weights = model.frame_scores(text[0], video.frames[i])
            assert weights.shape == (len(video.frames[i]),) and weights.sum() == pytest.approx(1, rel=1e-5)
        else:
            np.testing.assert_allclose(video.frames[i], alone.video, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(model.frame_scores(text[0], video.frames[i]),
                                       model.score(text[:1], alone.video)[0], rtol=1e-4, atol=1e-5)
    assert model.search_mode == ("pairwise" if model.is_pairwise else
                                 "ann" if model.config.model.similarity == "cosine" else "scan")


def test_real_glove_captions_through_torabi_m2():
    """The frozen-GloVe variant of M2 (``model.text.features: glove``, 50-d vectors straight into the LSTM)."""
    pytest.importorskip("reelsearch.text.glove")
    from conftest import shared_path

    captions_file = shared_path("msvd", "captions_msvd.json")
    captions = [c for caps in list(json.loads(captions_file.read_text()).values())[:4] for c in caps[:2]]
    torch.manual_seed(5)
    model = create_model("torabi-m2", text_processor=GloveTextProcessor(), features__text={"kind": "glove", "dim": 50},
                         model__text__encoder__embed_dim=None, model__text__glove_init=None).eval()
    batch = model.text_processor(captions)
    assert batch["feats"].shape[2] == 50 and (batch["lengths"] >= 1).all()
    emb = model.encode_text(captions)
    # each caption alone gives the same embedding as inside the padded batch
    alone = np.concatenate([model.encode_text([c]) for c in captions[:3]])
    assert emb.shape == (8, 950)
    np.testing.assert_allclose(alone, emb[:3], rtol=1e-4, atol=1e-6)


def test_real_minilm_features_through_scde():
    pytest.importorskip("reelsearch.text.minilm")
    try:
        proc = MiniLMTextProcessor(layer=3)  # scde's Transformer continues MiniLM after its layer 3
        batch = proc(["a man is playing a guitar", "a dog runs"])
    except Exception as exc:  # the weights package may be missing on a user's machine
        pytest.skip(f"MiniLM unavailable: {exc}")
    torch.manual_seed(6)
    model = create_model("scde", text_processor=proc).eval()
    assert batch["feats"].shape[2] == 384 and batch["mask"].sum(1).tolist() == batch["lengths"].tolist()
    with torch.no_grad():
        assert model.text_forward(batch).shape == (2, 2048)


def test_real_msvd_vocabulary_and_mithun_expert(tmp_path):
    pytest.importorskip("reelsearch.text.tokenize")
    from conftest import shared_path

    captions = json.loads(shared_path("msvd", "captions_msvd.json").read_text())
    train = shared_path("msvd", "train_list.txt").read_text().split()
    train_captions = [c for vid in train for c in captions[vid]]
    proc = VocabTextProcessor.build(train_captions, min_count=1)
    assert 5_000 < proc.vocab_size < 20_000 and proc.index["dog"] > 1
    test_vid = shared_path("msvd", "test_list.txt").read_text().split()[0]
    batch = proc(captions[test_vid][:5])
    assert (batch["ids"][batch["ids"] > 0] >= 1).all() and (batch["lengths"] >= 1).all()
    torch.manual_seed(7)
    model = create_model("mithun-expert", text_processor=proc).eval()
    emb = model.encode_text(captions[test_vid][:5])
    assert emb.shape == (5, 1024)
    model.save(tmp_path / "m")
    loaded = JointModel.load(tmp_path / "m")
    assert loaded.text_processor.words == proc.words
    np.testing.assert_allclose(loaded.encode_text(captions[test_vid][:5]), emb, rtol=1e-5, atol=1e-6)


def test_missing_modality_is_reported():
    with pytest.raises(ConfigError, match="appearance"):
        small("torabi-m1").video_forward({"feats": {"audio": torch.zeros(1, 2, 3)}})
    with pytest.raises(ConfigError, match="appearance"):
        small("torabi-m1").encode_video([{"audio": np.zeros((2, 3), np.float32)}])
    with pytest.raises(ConfigError, match="media paths or feature dicts"):
        small("torabi-m1").encode_video([3])


def test_version_1_model_folders_still_load(tmp_path):
    """A folder saved by reelsearch 0.1 (config without a recipe, vocabulary in "text_processor") loads with the
    recipe 0.1 extracted with (EfficientNet-Lite0 every 0.5 s, at most 64 frames, short side 256) and the same
    outputs."""
    from reelsearch.config.recipe import frame_recipe

    torch.manual_seed(11)
    model = small("torabi-m1").eval()
    model.save(tmp_path / "v2")
    meta = json.loads((tmp_path / "v2" / "config.json").read_text())
    cfg = meta["config"]
    text, video = cfg["model"]["text"], cfg["model"]["video"]
    text["features"] = "vocab"
    text["vocab_min_count"] = cfg["features"]["text"]["min_count"]
    text["encoder"]["input_dim"] = text["encoder"]["embed_dim"]
    video["modalities"], video["input_dims"] = ["appearance"], {"appearance": 1280}
    cfg["train"]["early_stopping"] = {"metric": "rsum", "patience": cfg["train"]["early_stopping"]}
    cfg["features"] = {"video": ["appearance"], "text": "vocab", "sampling": "every 10 frames"}
    cfg.pop("version")
    v1 = {"format": meta["format"], "version": 1, "config": cfg,
          "text_processor": {"kind": "vocab", "min_count": 1, "words": meta["vocabulary"]}}
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "config.json").write_text(json.dumps(v1))
    (tmp_path / "v1" / "model.safetensors").write_bytes((tmp_path / "v2" / "model.safetensors").read_bytes())
    old = JointModel.load(tmp_path / "v1")
    assert old.recipes["appearance"] == frame_recipe("efficientnet-lite0")
    old.text_processor._tokenizer = model.text_processor._tokenizer
    items = [{"appearance": np.random.default_rng(0).random((3, 1280), np.float32)}]
    np.testing.assert_allclose(old.encode_video(items).video, model.encode_video(items).video, rtol=1e-6)
    np.testing.assert_allclose(old.encode_text(["a dog is running"]), model.encode_text(["a dog is running"]))


def test_cosine_score_in_numpy_equals_the_torch_similarity():
    """A cosine joint model scores rows with a numpy product on the CPU (the per-hit path of a search): the same
    numbers as its torch similarity and as a cosine loop; a size mismatch is an error, not a broadcast."""
    from reelsearch.models import create_model

    model = create_model("reelsearch-linear").eval()
    rng = np.random.default_rng(0)
    t = rng.normal(size=(3, model.dim)).astype(np.float32)
    v = rng.normal(size=(5, model.dim)).astype(np.float32)
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    loop = np.array([[float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b)) for b in v] for a in t])
    np.testing.assert_allclose(model.score(t, v), loop, atol=1e-5)
    np.testing.assert_allclose(model.score(t, v), model._score_torch(t, v), atol=1e-6)
    with pytest.raises(ValueError, match="one size"):
        model.score(t, v[:, :-1])


def test_device_is_remembered_and_follows_a_move():
    from reelsearch.models import create_model

    model = create_model("reelsearch-linear")
    assert model.device == next(model.parameters()).device == torch.device("cpu")
    model.to(torch.float64)  # any move goes through _apply and forgets the remembered device
    assert "_device" not in model.__dict__ and model.device.type == "cpu"
    if torch.cuda.is_available():
        assert model.cuda().device.type == "cuda" and model.cpu().device.type == "cpu"
