"""Named models: every default checked against the papers; configs/*.yaml equal the registry; parameter counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.models import create_model, list_models, load_config, model_config
from reelsearch.models.registry import config_yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_torabi_numbers():
    for variant in ("m1", "m2", "m3"):
        cfg = model_config(f"torabi-{variant}")
        m, t = cfg["model"], cfg["train"]
        # §5.1: LSTM hidden and joint space 950; margin 0.05; batch 200; Adam lr 0.001; clip 2.0
        assert m["text"]["projection"]["dim"] == m["video"]["projection"]["dim"] == 950
        assert (t["margin"], t["batch_size"], t["optimizer"], t["lr"], t["grad_clip"]) == (0.05, 200, "adam", 1e-3,
                                                                                          2.0)
        assert t["loss"] == "torabi-pairwise" and t["val_samples"] == 1000  # Eq. 4; the paper's 1000 val samples
        assert (t["selection"], t["early_stopping"]) == ("rsum", {"metric": "rsum", "patience": 3})  # our choice
        assert m["similarity"] == "order"  # Eq. 3
        assert m["video"]["projection"]["kind"] == "linear-abs-l2"  # |W_video mean(v)|, unit norm
        # B.1: words initially encoded by GloVe, d_w = 300 (from our 50-d GloVe by an orthonormal map, fine-tuned)
        assert (m["text"]["features"], m["text"]["glove_init"]) == ("vocab", "project")
        assert m["text"]["encoder"]["embed_dim"] == m["text"]["encoder"]["input_dim"] == 300
    assert model_config("torabi-m1")["model"]["text"]["encoder"]["sequence"] is None  # average of word vectors
    for variant in ("m2", "m3"):
        enc = model_config(f"torabi-{variant}")["model"]["text"]["encoder"]
        assert (enc["sequence"], enc["hidden_size"], enc["pool"]) == ("lstm", 950, "last")  # |h_N|
    assert model_config("torabi-m3")["model"]["video"]["attention"] == {"dim": 300}  # matching space 300
    assert model_config("torabi-m2")["model"]["video"]["attention"] is None


def test_mithun_numbers():
    cfg = model_config("mithun-expert")
    m, t = cfg["model"], cfg["train"]
    assert m["text"]["encoder"]["embed_dim"] == 300 and m["text"]["encoder"]["sequence"] == "gru"  # §3.2
    assert m["text"]["projection"]["dim"] == m["video"]["projection"]["dim"] == 1024  # D = 1024
    assert m["similarity"] == "cosine"  # §3.3
    # §4.2: lr 0.002 for 15 epochs, then /10 for 15; batch 128; Adam; clip 2; margin 0.2; best RSum on val
    assert (t["lr"], t["schedule"], t["epochs"]) == (2e-3, {"kind": "step", "step_epochs": 15, "gamma": 0.1}, 30)
    assert (t["batch_size"], t["optimizer"], t["grad_clip"], t["margin"], t["selection"]) == (128, "adam", 2.0, 0.2,
                                                                                             "rsum")
    assert t["loss"] == "mithun-weighted"  # Eq. 3
    moe = model_config("mithun-moe")
    assert moe["fusion"] == {"kind": "score", "weights": {"object": 1.0, "activity": 1.0, "place": 0.5}}  # Eq. 4
    assert {k: e["model"]["video"]["modalities"] for k, e in moe["experts"].items()} == {
        "object": ["appearance"], "activity": ["motion", "audio"], "place": ["place"]}  # §3.5
    for e in moe["experts"].values():
        assert e["train"] == t and e["model"]["text"] == m["text"]


def test_scde_numbers_and_ablation_ladder():
    cfg = model_config("scde")
    m, t = cfg["model"], cfg["train"]
    v_enc, t_enc = m["video"]["encoder"], m["text"]["encoder"]
    assert (v_enc["sequence"], v_enc["hidden_size"]) == ("bigru", 512)  # §3.1
    assert (t_enc["sequence"], t_enc["num_layers"]) == ("transformer", 3)  # K = 3
    assert v_enc["smsdc"] == {"n": 4, "m": 2, "stacked": True} and t_enc["smsdc"] == {"n": 3, "m": 2, "stacked": True}
    assert m["video"]["projection"] == m["text"]["projection"] == {"kind": "fc-bn-l2", "dim": 2048}  # Eq. 10
    assert m["similarity"] == "cosine" and t["loss"] == "vse++" and t["margin"] == 0.2  # Eq. 11, §4.1
    assert (t["batch_size"], t["lr"], t["epochs"], t["selection"]) == (64, 5e-5, 30, "rsum")
    assert t["schedule"] == {"kind": "plateau", "factor": 0.5, "patience": 3, "metric": "rsum"}
    # the K = 3 layers continue MiniLM from its layer 3 (MiniLM's own shape), see registry._scde
    assert (m["text"]["feature_layer"], m["text"]["init_transformer"]) == (3, "minilm")
    assert (t_enc["heads"], t_enc["ff_dim"], t_enc["activation"], t_enc["positional"]) == (12, 1536, "gelu", False)
    ladder = {s: model_config(f"scde-ablation-{s}")["model"] for s in ("baseline", "bert", "transformer", "msdc")}
    ladder["smsdc"] = m
    assert [c["text"].get("init_transformer") for c in ladder.values()] == [None, None, "minilm", "minilm", "minilm"]
    assert ladder["baseline"]["text"]["encoder"]["embed_dim"] == 300  # word2vec's size, GloVe-initialised
    # the paper's random start over the last layer's features (docs/models.md) is a plain override
    from reelsearch.models import MiniLMTextProcessor

    paper = {"text": {"feature_layer": None, "init_transformer": None, "encoder": {
        "heads": 6, "activation": "relu", "layer_norm_eps": 1e-5, "positional": True}}}
    model = create_model("scde", text_processor=MiniLMTextProcessor(), model=paper)
    assert model.text_encoder.transformer.positional and model.text_processor.layer is None
    text = {s: (c["text"]["features"], c["text"]["encoder"]["sequence"]) for s, c in ladder.items()}
    assert text == {"baseline": ("vocab", "bigru"), "bert": ("minilm", "bigru"), "transformer": ("minilm",
                    "transformer"), "msdc": ("minilm", "transformer"), "smsdc": ("minilm", "transformer")}
    conv = {s: (c["video"]["encoder"].get("smsdc"), c["text"]["encoder"].get("smsdc")) for s, c in ladder.items()}
    assert conv["baseline"] == conv["bert"] == conv["transformer"] == (None, None)
    assert conv["msdc"] == ({"n": 4, "m": 2, "stacked": False}, {"n": 3, "m": 2, "stacked": False})
    for s, c in ladder.items():
        assert c["video"]["encoder"]["sequence"] == "bigru" and c["video"]["projection"]["dim"] == 2048, s


def test_train_sections_name_existing_loss_presets_with_the_same_margin():
    losses = pytest.importorskip("reelsearch.losses")
    for name in list_models():
        cfg = model_config(name)
        for c in cfg.get("experts", {name: cfg}).values():
            if c["train"]["margin"] is None:  # a margin-free loss (InfoNCE)
                assert c["train"]["loss"] == "infonce"
                continue
            loss = losses.create_loss(c["train"]["loss"], margin=c["train"]["margin"])
            assert loss.margin == c["train"]["margin"]
            preset = losses.create_loss(c["train"]["loss"])
            assert preset.margin == c["train"]["margin"], f"{name}: preset margin differs from the paper's"


@pytest.mark.parametrize("name", list_models())
def test_yaml_config_equals_registry(name):
    path = CONFIGS / f"{name}.yaml"
    assert load_config(path) == model_config(name)
    assert path.read_text() == config_yaml(name), "regenerate with reelsearch.models.registry.write_configs"


def test_every_yaml_is_a_named_model():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == list_models()
    assert {p.stem for p in CONFIGS.glob("scde-ablation-*.yaml")} == {
        "scde-ablation-baseline", "scde-ablation-bert", "scde-ablation-transformer", "scde-ablation-msdc"}


def test_overrides_and_bad_configs(tmp_path):
    cfg = model_config("scde", train={"lr": 1e-4}, model__video__input_dims__appearance=2048)
    assert cfg["train"]["lr"] == 1e-4 and cfg["train"]["batch_size"] == 64
    assert cfg["model"]["video"]["input_dims"]["appearance"] == 2048
    with pytest.raises(ValueError, match="unknown model"):
        model_config("nope")
    from reelsearch.models import VocabTextProcessor

    words = VocabTextProcessor(["a", "dog"])
    with pytest.raises(ConfigError, match="hiden_size"):
        create_model("torabi-m2", words, model__text__encoder__hiden_size=3)
    with pytest.raises(ConfigError, match="sequence model"):
        create_model("torabi-m2", words, model__text__encoder__sequence="rnn")
    with pytest.raises(ConfigError, match="VocabTextProcessor"):
        create_model("torabi-m2")  # learns its words: needs the training vocabulary
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: [1,\n")
    with pytest.raises(DataFormatError, match="bad.yaml"):
        load_config(bad)
    bad.write_text("name: x\nmodel: {}\n")
    with pytest.raises(DataFormatError, match="train"):
        load_config(bad)


def test_parameter_counts_by_hand():
    def count(model):
        return sum(p.numel() for p in model.parameters())

    from reelsearch.models import VocabTextProcessor

    words = VocabTextProcessor(["a", "dog", "runs"])  # 5 rows with <pad> and <unk>

    def torabi(variant):
        return create_model(f"torabi-{variant}", words, model__text__glove_init=None)

    # M1: 300-d word vectors, text linear 300 -> 950, video linear 1280 -> 950
    assert count(torabi("m1")) == 5 * 300 + (300 * 950 + 950) + (1280 * 950 + 950)
    # M2: words; LSTM(300 -> 950): 4 gates x (950 x (300 + 950) + 2 biases of 950); video linear
    assert count(torabi("m2")) == 5 * 300 + 4 * (950 * 1250 + 2 * 950) + (1280 * 950 + 950)
    # M3: M2 + attention W_f (1280 -> 300, bias), W_s (950 -> 300), w (300 -> 1)
    assert count(torabi("m3")) == count(torabi("m2")) + 1280 * 300 + 300 + 950 * 300 + 300


def test_text_processor_for_each_kind():
    from reelsearch.models import GloveTextProcessor, MiniLMTextProcessor, VocabTextProcessor, text_processor_for

    assert isinstance(text_processor_for("torabi-m1", ["a dog"]), VocabTextProcessor)
    assert isinstance(text_processor_for("scde"), MiniLMTextProcessor) and text_processor_for("scde").layer == 3
    assert text_processor_for("scde-ablation-bert").layer is None  # the last layer's features
    assert isinstance(text_processor_for("scde-ablation-baseline", ["a dog"]), VocabTextProcessor)
    assert isinstance(text_processor_for(model_config("torabi-m1", model__text__features="glove")), GloveTextProcessor)
    with pytest.raises(ConfigError, match="training captions"):
        text_processor_for("mithun-expert")
    cfg = model_config("mithun-expert", model__text__vocab_min_count=2)
    proc = text_processor_for(cfg, ["a dog runs", "a cat runs", "zebra"])
    assert isinstance(proc, VocabTextProcessor) and proc.words == ["<pad>", "<unk>", "a", "runs"]
    moe = text_processor_for("mithun-moe", ["a dog"])
    assert sorted(moe) == ["activity", "object", "place"]
