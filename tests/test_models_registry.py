"""Named models: every default checked against the papers; configs/*.yaml equal the registry; parameter counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from in_process import cli_here
from reelsearch.config import load_config
from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.models import create_model, list_models, model_config
from reelsearch.models.registry import config_yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_torabi_numbers():
    for variant in ("m1", "m2", "m3"):
        cfg = model_config(f"torabi-{variant}")
        m, t = cfg.model, cfg.train
        # §5.1: LSTM hidden and joint space 950; margin 0.05; batch 200; Adam lr 0.001; clip 2.0
        assert m.text.projection.dim == m.video.projection.dim == 950
        assert (t.margin, t.batch_size, t.optimizer, t.lr, t.grad_clip) == (0.05, 200, "adam", 1e-3, 2.0)
        assert t.loss == "torabi-pairwise" and t.val_samples == 1000  # Eq. 4; the paper's 1000 val samples
        assert (t.selection, t.early_stopping) == ("rsum", 3)  # our choice (docs/benchmarks.md)
        assert m.similarity == "order"  # Eq. 3
        assert m.video.projection.kind == "linear-abs-l2"  # |W_video mean(v)|, unit norm
        # B.1: words initially encoded by GloVe, d_w = 300 (from our 50-d GloVe by an orthonormal map, fine-tuned)
        assert (cfg.features.text.kind, m.text.glove_init) == ("vocab", "project")
        assert m.text.encoder.embed_dim == 300
        assert cfg.features.video["appearance"].sampling == "every:10"  # B.1: every 10 frames
    assert model_config("torabi-m1").model.text.encoder.sequence is None  # average of word vectors
    for variant in ("m2", "m3"):
        enc = model_config(f"torabi-{variant}").model.text.encoder
        assert (enc.sequence, enc.hidden_size, enc.pool) == ("lstm", 950, "last")  # |h_N|
    assert model_config("torabi-m3").model.video.attention.dim == 300  # matching space 300
    assert model_config("torabi-m2").model.video.attention is None


def test_mithun_numbers():
    cfg = model_config("mithun-expert")
    m, t = cfg.model, cfg.train
    assert m.text.encoder.embed_dim == 300 and m.text.encoder.sequence == "gru"  # §3.2
    assert m.text.projection.dim == m.video.projection.dim == 1024  # D = 1024
    assert m.similarity == "cosine"  # §3.3
    # §4.2: lr 0.002 for 15 epochs, then /10 for 15; batch 128; Adam; clip 2; margin 0.2; best RSum on val
    assert (t.lr, t.schedule.kind, t.schedule.step_epochs, t.schedule.gamma, t.epochs) == (2e-3, "step", 15, 0.1, 30)
    assert (t.batch_size, t.optimizer, t.grad_clip, t.margin, t.selection) == (128, "adam", 2.0, 0.2, "rsum")
    assert t.loss == "mithun-weighted"  # Eq. 3
    moe = model_config("mithun-moe")
    assert (moe.fusion.kind, moe.fusion.weights) == ("score", {"object": 1.0, "activity": 1.0, "place": 0.5})  # Eq 4
    assert {k: e.modalities for k, e in moe.experts.items()} == {
        "object": ["appearance"], "activity": ["motion", "audio"], "place": ["place"]}  # §3.5
    for e in moe.experts.values():
        assert e.train == t and e.model.text == m.text
    # SoundNet-8's 1024-d conv7 audio (§3.2); places have no extractor here: their recipe asks for imported features
    recipes = {m: r for e in moe.experts.values() for m, r in e.features.video.items()}
    assert (recipes["audio"].extractor, recipes["audio"].dim, recipes["audio"].sampling) == ("soundnet8", 1024, None)
    assert recipes["place"].dim == 2048 and not recipes["place"].available


def test_scde_numbers_and_ablation_ladder():
    cfg = model_config("scde")
    m, t = cfg.model, cfg.train
    v_enc, t_enc = m.video.encoder, m.text.encoder
    assert (v_enc.sequence, v_enc.hidden_size) == ("bigru", 512)  # §3.1
    assert (t_enc.sequence, t_enc.num_layers) == ("transformer", 3)  # K = 3
    assert (v_enc.smsdc.n, v_enc.smsdc.m, v_enc.smsdc.stacked) == (4, 2, True)
    assert (t_enc.smsdc.n, t_enc.smsdc.m, t_enc.smsdc.stacked) == (3, 2, True)
    assert m.video.projection == m.text.projection and (m.text.projection.kind, m.text.projection.dim) == (
        "fc-bn-l2", 2048)  # Eq. 10
    assert m.similarity == "cosine" and t.loss == "vse++" and t.margin == 0.2  # Eq. 11, §4.1
    assert (t.batch_size, t.lr, t.epochs, t.selection) == (64, 5e-5, 30, "rsum")
    assert (t.schedule.kind, t.schedule.factor, t.schedule.patience) == ("plateau", 0.5, 3)
    assert cfg.features.video["appearance"].sampling == "interval:0.5"  # §3.1: every 0.5 s
    # the K = 3 layers continue MiniLM from its layer 3 (MiniLM's own shape), see registry._scde
    assert (cfg.features.text.layer, m.text.init_transformer) == (3, "minilm")
    assert (t_enc.heads, t_enc.ff_dim, t_enc.activation, t_enc.positional) == (12, 1536, "gelu", False)
    names = ("baseline", "bert", "transformer", "msdc")
    ladder = {s: model_config(f"scde-ablation-{s}") for s in names}
    ladder["smsdc"] = cfg
    assert [c.model.text.init_transformer for c in ladder.values()] == [None, None, "minilm", "minilm", "minilm"]
    assert ladder["baseline"].model.text.encoder.embed_dim == 300  # word2vec's size, GloVe-initialised
    # the paper's random start over the last layer's features (docs/models.md) is a plain override
    from reelsearch.models import MiniLMTextProcessor

    model = create_model("scde", text_processor=MiniLMTextProcessor(), features__text__layer=None,
                         model__text__init_transformer=None, model__text__encoder__heads=6,
                         model__text__encoder__activation="relu", model__text__encoder__layer_norm_eps=1e-5,
                         model__text__encoder__positional=True)
    assert model.text_encoder.transformer.positional and model.text_processor.layer is None
    text = {s: (c.features.text.kind, c.model.text.encoder.sequence) for s, c in ladder.items()}
    assert text == {"baseline": ("vocab", "bigru"), "bert": ("minilm", "bigru"), "transformer": ("minilm",
                    "transformer"), "msdc": ("minilm", "transformer"), "smsdc": ("minilm", "transformer")}
    conv = {s: (c.model.video.encoder.smsdc, c.model.text.encoder.smsdc) for s, c in ladder.items()}
    assert conv["baseline"] == conv["bert"] == conv["transformer"] == (None, None)
    assert [x.stacked for x in conv["msdc"]] == [False, False] and [(x.n, x.m) for x in conv["msdc"]] == [(4, 2),
                                                                                                          (3, 2)]
    for s, c in ladder.items():
        assert c.model.video.encoder.sequence == "bigru" and c.model.video.projection.dim == 2048, s


def test_train_sections_name_existing_loss_presets_with_the_same_margin():
    losses = pytest.importorskip("reelsearch.losses")
    for name in list_models():
        cfg = model_config(name)
        for c in getattr(cfg, "experts", {name: cfg}).values():
            if c.train.margin is None:  # a margin-free loss (InfoNCE)
                assert c.train.loss == "infonce"
                continue
            loss = losses.create_loss(c.train.loss, margin=c.train.margin)
            assert loss.margin == c.train.margin
            preset = losses.create_loss(c.train.loss)
            assert preset.margin == c.train.margin, f"{name}: preset margin differs from the paper's"


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
    cfg = model_config("scde", train={"lr": 1e-4}, features__video__appearance__dim=2048)
    assert cfg.train.lr == 1e-4 and cfg.train.batch_size == 64
    assert cfg.features.video["appearance"].dim == 2048
    with pytest.raises(ConfigError, match="unknown model"):
        model_config("nope")
    from reelsearch.models import VocabTextProcessor

    words = VocabTextProcessor(["a", "dog"])
    with pytest.raises(ConfigError, match="model.text.encoder.sequence: 'rnn' is not one of"):
        create_model("torabi-m2", words, model__text__encoder__sequence="rnn")
    with pytest.raises(ConfigError, match="VocabTextProcessor"):
        create_model("torabi-m2")  # learns its words: needs the training vocabulary
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: [1,\n")
    with pytest.raises(DataFormatError, match="bad.yaml"):
        load_config(bad)
    bad.write_text("name: x\nmodel: {}\n")
    with pytest.raises(ConfigError, match="bad.yaml: model.text: missing"):
        load_config(bad)


@pytest.mark.parametrize("key", ["train.lr_rate", "model.text.glove_inti", "model.text.encoder.hiden_size",
                                 "features.video.appearance.extracter", "train.schedule.metric",
                                 "train.early_stopping.metric"])
def test_an_unknown_key_anywhere_names_its_path(key, tmp_path):
    """A misspelt or dead key is an error naming the key path and where it came from: registry override, YAML, the
    command line (exit 2, before any work)."""
    import yaml

    from reelsearch.config import apply_overrides, config_to_dict

    dunder, parent = key.replace(".", "__"), key.rsplit(".", 1)[0].replace(".", r"\.")
    with pytest.raises(ConfigError, match=f"override: {parent}"):
        model_config("mithun-expert", **{dunder: 5})
    with pytest.raises(ConfigError, match=f"--set: {parent}"):
        apply_overrides(model_config("mithun-expert"), [f"{key}=5"])
    from reelsearch.config.typed import set_path

    data = config_to_dict(model_config("mithun-expert"))
    set_path(data, key, 5)
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=f"typo.yaml: {key.rsplit('.', 1)[0]}"):
        load_config(path)
    res = cli_here("train", "mithun-expert", "--data", "manifest:/nowhere", "--out", tmp_path / "run", "--set",
                   f"{key}=5")
    err = res.stderr
    assert res.returncode == 2 and "--set" in err and key.rsplit(".", 1)[0] in err, err
    assert not (tmp_path / "run").exists()  # refused before any work


def test_set_overrides_parse_values_and_apply_to_every_expert():
    from reelsearch.config import apply_overrides

    cfg = apply_overrides(model_config("mithun-moe"), ["train.lr=1e-4", "train.grad_clip=null",
                                                      "experts.place.train.epochs=3", "fusion.kind=rank"])
    assert {e.train.lr for e in cfg.experts.values()} == {1e-4}
    assert {e.train.grad_clip for e in cfg.experts.values()} == {None}
    assert [e.train.epochs for e in cfg.experts.values()] == [30, 30, 3] and cfg.fusion.kind == "rank"
    with pytest.raises(ConfigError, match="expected KEY.PATH=VALUE"):
        apply_overrides(cfg, ["train.lr"])
    with pytest.raises(ConfigError, match="train.lr: expected a number"):
        apply_overrides(model_config("scde"), ["train.lr=fast"])


def test_the_tuning_commands_keys_are_set_and_checked_as_model_keys_are():
    """`tune` and `mlm` (tune-cnn's and adapt-text's configs) take the same --set forms and errors as `train`."""
    from reelsearch.config import MLMConfig, TuneConfig
    from reelsearch.config.typed import apply_section

    cfg = apply_section(TuneConfig(), ["tune.epochs=5", "tune.lr_cnn=1e-3", "tune.schedule.kind=cosine",
                                       "tune.from_block=null"])
    assert (cfg.epochs, cfg.lr_cnn, cfg.schedule.kind, cfg.from_block, cfg.views) == (5, 1e-3, "cosine", None, 4)
    assert apply_section(MLMConfig(), {"mlm.heldout": 0}).heldout == 0.0 and MLMConfig().optimizer == "adamw"
    assert apply_section(TuneConfig(), None) == TuneConfig()
    for overrides, says in ((["tune.epoch=3"], "--set: tune.epoch: unknown key (did you mean 'epochs'?)"),
                            (["train.epochs=3"], "--set: train.epochs: unknown key; the keys here are tune.*"),
                            (["tune.lr=fast"], "--set: tune.lr: expected a number, got 'fast'"),
                            (["tune.views=0"], "--set: tune: views must be at least 1"),
                            (["tune.early_stopping=0"], "--set: tune: early_stopping must be at least 1"),
                            (["tune.epochs"], "expected KEY.PATH=VALUE")):
        with pytest.raises(ConfigError) as err:
            apply_section(TuneConfig(), overrides)
        assert says in str(err.value), (overrides, str(err.value))
    with pytest.raises(ConfigError, match=r"mlm: batch_size must be at least 1, mask_prob in \(0, 1\)"):
        apply_section(MLMConfig(), {"mlm.mask_prob": 1.5})


def test_version_1_configs_are_migrated():
    """A config written before feature recipes (reelsearch 0.1) reads as today's, its recipe what 0.1 extracted."""
    from reelsearch.config import config_from_dict

    v1 = {"name": "old", "paper": "", "model": {
        "text": {"features": "minilm", "feature_layer": 3, "encoder": {"input_dim": 384, "sequence": "transformer",
                 "num_layers": 3, "heads": 12, "ff_dim": 1536, "dropout": 0.1, "activation": "gelu",
                 "layer_norm_eps": 1e-12, "positional": False, "pool": "mean"},
                 "projection": {"kind": "fc-bn-l2", "dim": 2048}, "init_transformer": "minilm"},
        "video": {"modalities": ["appearance"], "input_dims": {"appearance": 1280}, "encoder": {
            "sequence": "bigru", "hidden_size": 512, "pool": "mean"}, "attention": None,
                  "projection": {"kind": "fc-bn-l2", "dim": 2048}},
        "similarity": "cosine"},
        "train": {"loss": "vse++", "margin": 0.2, "optimizer": "adam", "lr": 5e-5, "schedule": {
            "kind": "plateau", "factor": 0.5, "patience": 3, "metric": "rsum"}, "batch_size": 64, "epochs": 30,
            "grad_clip": None, "selection": "rsum", "val_samples": None, "early_stopping": None, "warmup_epochs": 0},
        "features": {"video": ["appearance"], "text": "minilm", "sampling": "every 0.5 s"}}
    from dataclasses import replace

    assert config_from_dict(v1) == replace(model_config("scde-ablation-transformer"), name="old", paper="")


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
    glove = model_config("torabi-m1", features__text={"kind": "glove", "dim": 50}, model__text__glove_init=None,
                         model__text__encoder__embed_dim=None)
    assert isinstance(text_processor_for(glove), GloveTextProcessor)
    with pytest.raises(ConfigError, match="training captions"):
        text_processor_for("mithun-expert")
    cfg = model_config("mithun-expert", features__text__min_count=2)
    proc = text_processor_for(cfg, ["a dog runs", "a cat runs", "zebra"])
    assert isinstance(proc, VocabTextProcessor) and proc.words == ["<pad>", "<unk>", "a", "runs"]
    moe = text_processor_for("mithun-moe", ["a dog"])
    assert sorted(moe) == ["activity", "object", "place"]
