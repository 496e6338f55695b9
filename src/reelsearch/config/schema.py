"""The typed, versioned config of a model: architecture (``model``), training (``train``) and inputs (``features``).

A joint model's config is a :class:`ModelConfig`; a mixture of experts' is a :class:`MixtureConfig` (one
ModelConfig per expert and the fusion). Both are built from plain dicts (YAML files in ``configs/``, a saved model's
``config.json``, the registry of named models) by :func:`config_from_dict`, which rejects any unknown key with its
path and source, and turned back into dicts by :func:`config_to_dict`. Overrides (``--set train.lr=1e-4``, or
``create_model(name, train__lr=1e-4)``) go through :func:`apply_overrides` and the same checks.

Version 2 (this one) moved the inputs into the feature recipe (``reelsearch.config.recipe``); version-1 configs
(saved by reelsearch 0.1 before the recipe existed) are migrated on load by :func:`migrate_v1`.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from reelsearch.errors import ConfigError, DataFormatError

from .names import LOSS_NAMES
from .recipe import FeatureRecipe, ModalityRecipe, TextRecipe, frame_recipe, glove_text, minilm_text
from .typed import from_dict, merge_dicts, override_items, set_path, to_dict

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class SMSDCConfig:
    """SCDE §3.3: kernel sizes 2..n+1 x dilations 1..m; ``stacked``: the stacked MSDC (else one MSDC layer)."""

    n: int
    m: int
    stacked: bool = True


@dataclass
class EncoderConfig:
    """A ``reelsearch.models.encoders.SequenceEncoder``: see its docstring for the stages.

    Its input size comes from the feature recipe (``features.video.<modality>.dim``, ``features.text.dim``);
    ``embed_dim``: the size of learned word embeddings over vocabulary ids (``features.text.kind: vocab``);
    ``input_dropout``: dropout on the input features (or word embeddings) while training.
    """

    sequence: Literal["lstm", "gru", "bigru", "transformer"] | None = None
    pool: Literal["mean", "last"] = "mean"
    embed_dim: int | None = None
    hidden_size: int | None = None
    num_layers: int = 1
    heads: int = 8
    ff_dim: int | None = None
    dropout: float = 0.0
    input_dropout: float = 0.0
    positional: bool = True
    activation: Literal["relu", "gelu"] = "relu"
    layer_norm_eps: float = 1e-5
    smsdc: SMSDCConfig | None = None

    def check(self) -> None:
        if self.pool == "last" and self.sequence not in ("lstm", "gru"):
            raise ConfigError("pool 'last' needs a unidirectional RNN (sequence lstm or gru)")
        if self.sequence in ("lstm", "gru", "bigru") and not self.hidden_size:
            raise ConfigError(f"sequence {self.sequence!r} needs hidden_size")


@dataclass
class ProjectionConfig:
    """Into the joint space: ``linear-abs-l2`` | ``abs-l2`` | ``linear-l2`` | ``fc-bn-l2`` | ``l2``
    (models/projection.py)."""

    kind: Literal["linear-abs-l2", "abs-l2", "linear-l2", "fc-bn-l2", "l2"]
    dim: int | None = None


@dataclass
class AttentionConfig:
    """Torabi M3's soft attention over frames: the size of the matching space."""

    dim: int


@dataclass
class TextModelConfig:
    """The text side; ``glove_init`` ("pad" | "project") starts learned word vectors from GloVe,
    ``init_transformer: minilm`` starts a Transformer from MiniLM's layers above the recipe's ``layer``."""

    encoder: EncoderConfig
    projection: ProjectionConfig
    glove_init: Literal["pad", "project"] | None = None
    init_transformer: Literal["minilm"] | None = None


@dataclass
class VideoModelConfig:
    """The video side: one encoder per modality (concatenated), a projection, optional M3 attention."""

    encoder: EncoderConfig
    projection: ProjectionConfig
    attention: AttentionConfig | None = None


@dataclass
class ModelSection:
    text: TextModelConfig
    video: VideoModelConfig
    similarity: Literal["cosine", "order"] = "cosine"


@dataclass
class ScheduleConfig:
    """Learning rate: ``constant``; ``step`` (x ``gamma`` every ``step_epochs``, Mithun §4.2); ``plateau`` (x
    ``factor`` after ``patience`` epochs without a better selection score, SCDE §4.1); ``cosine`` (down to 0 along
    half a cosine over the run's steps). ``warmup_steps``: the first steps ramp linearly up to it."""

    kind: Literal["constant", "step", "plateau", "cosine"] = "constant"
    step_epochs: int = 15
    gamma: float = 0.1
    factor: float = 0.5
    patience: int = 3
    warmup_steps: int = 0


@dataclass
class TrainConfig:
    """How a model is trained (each named model sets its paper's values; docs/training.md).

    ``selection``: the epoch kept as best/ and the score of the plateau schedule and early stopping: the validation
    RSum (higher is better) or the validation loss (Torabi et al., lower is better) on ``val_samples`` random
    validation pairs (all when null). ``early_stopping``: epochs without a better score before stopping (null:
    never). ``warmup_epochs``: the first epochs trained with ``warmup_loss`` (same margin) before ``loss``.
    ``precision: bf16`` runs the training forward pass under bfloat16 autocast where the hardware has native bf16
    (else float32, with a warning). ``checkpoint_every``: steps between mid-epoch saves (0: epoch ends only).
    ``lr_scale``: learning-rate multipliers of named parts of the model (parameter-name prefixes, e.g.
    ``text_encoder.transformer: 0.1`` to fine-tune pretrained layers slower).
    """

    loss: str = "vse++"
    margin: float | None = 0.2
    optimizer: Literal["adam"] = "adam"
    lr: float = 2e-4
    lr_scale: dict[str, float] = field(default_factory=dict)
    weight_decay: float = 0.0
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    batch_size: int = 128
    epochs: int = 30
    grad_clip: float | None = 2.0
    selection: Literal["rsum", "val_loss"] = "rsum"
    val_samples: int | None = None
    early_stopping: int | None = None
    warmup_epochs: int = 0
    warmup_loss: str = "vse"
    precision: Literal["fp32", "bf16"] = "fp32"
    seed: int = 0
    checkpoint_every: int = 200
    eval_batch_size: int = 512

    def check(self) -> None:
        for key in ("loss", "warmup_loss"):
            if getattr(self, key) not in LOSS_NAMES:
                raise ConfigError(f"{key}: unknown loss {getattr(self, key)!r}; choose one of {sorted(LOSS_NAMES)}")
        positive = {"lr": self.lr, "batch_size": self.batch_size, "epochs": self.epochs,
                    "eval_batch_size": self.eval_batch_size}
        for key, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{key} must be positive, got {value}")
        for key in ("val_samples", "early_stopping"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"{key} must be at least 1 (or null), got {value}")
        if self.warmup_epochs < 0 or self.checkpoint_every < 0:
            raise ConfigError("warmup_epochs and checkpoint_every cannot be negative")


@dataclass
class ModelConfig:
    """One joint model: ``model`` (architecture), ``train`` (how it learns), ``features`` (its inputs' recipe)."""

    name: str
    model: ModelSection
    features: FeatureRecipe
    train: TrainConfig = field(default_factory=TrainConfig)
    paper: str = ""
    version: int = SCHEMA_VERSION

    def check(self) -> None:
        text, kind = self.model.text, self.features.text.kind
        if kind == "vocab" and text.encoder.embed_dim is None:
            raise ConfigError("model.text.encoder.embed_dim: a vocab model learns word vectors; give their size")
        if kind != "vocab" and text.encoder.embed_dim is not None:
            raise ConfigError(f"model.text.encoder.embed_dim: only a vocab model learns word vectors (the text "
                              f"features are {kind!r})")
        if text.glove_init and kind != "vocab":
            raise ConfigError("model.text.glove_init starts learned word vectors: it needs features.text.kind vocab")
        if text.init_transformer and (kind != "minilm" or text.encoder.sequence != "transformer"):
            raise ConfigError("model.text.init_transformer: minilm needs MiniLM features and a transformer encoder")
        if self.model.video.attention and len(self.features.video) != 1:
            raise ConfigError("model.video.attention (Torabi M3) reads exactly one video modality")

    @property
    def modalities(self) -> list[str]:
        return self.features.modalities


class FusionKind(enum.StrEnum):
    """How a mixture fuses its experts' scores (Mithun §3.5)."""

    SCORE = "score"  # S = sum_k w_k S_k (Eq. 4)
    RANK = "rank"  # weighted rank aggregation (Table 1 row 1.7)


class Normalize(enum.StrEnum):
    """What score fusion does to each expert's scores first."""

    NONE = "none"  # adds the raw scores (the paper's choice)
    ZSCORE = "zscore"  # standardises each expert's scores over every video first


@dataclass
class FusionConfig:
    """Mithun §3.5: ``score`` = sum_k w_k S_k (``normalize: zscore`` standardises each S_k first), or ``rank``. A
    file keeps the values as text; they are members of :class:`FusionKind` / :class:`Normalize` once read (text
    given to the constructor is made one: ValueError for an unknown value)."""

    kind: FusionKind
    weights: dict[str, float]
    normalize: Normalize = Normalize.NONE

    def __post_init__(self):
        self.kind, self.normalize = FusionKind(self.kind), Normalize(self.normalize)


@dataclass
class MixtureConfig:
    """A mixture of experts: each expert a joint model over its own cue, trained separately, then fused."""

    name: str
    experts: dict[str, ModelConfig]
    fusion: FusionConfig
    paper: str = ""
    version: int = SCHEMA_VERSION

    def check(self) -> None:
        if len(self.experts) < 1:
            raise ConfigError("experts: name at least one")
        if set(self.fusion.weights) != set(self.experts):
            raise ConfigError(f"fusion.weights must give one weight per expert: experts {sorted(self.experts)}, "
                              f"weights {sorted(self.fusion.weights)}")

    @property
    def modalities(self) -> list[str]:
        return modalities_of(self.experts.values())


def modalities_of(experts) -> list[str]:
    """The modalities several experts read (configs or models), each once, in the experts' order."""
    out: list[str] = []
    for e in experts:
        out += [m for m in e.modalities if m not in out]
    return out


AnyConfig = ModelConfig | MixtureConfig


# ------------------------------------------------------------------------------------------------ dicts <-> configs
def config_from_dict(data: dict, source: str | None = None) -> AnyConfig:
    """A ModelConfig or MixtureConfig (the latter when ``experts`` is present) from a plain dict; ConfigError names
    the key path and ``source`` on any problem. Version-1 dicts are migrated first."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source or 'config'}: expected a mapping, got {type(data).__name__}")
    version = data.get("version", 1 if _looks_v1(data) else SCHEMA_VERSION)
    if version == 1:
        data = migrate_v1(data)
    elif version != SCHEMA_VERSION:
        raise ConfigError(f"{source or 'config'}: config version {version!r} is newer than this reelsearch "
                          f"understands ({SCHEMA_VERSION}); upgrade reelsearch")
    cls = MixtureConfig if "experts" in data else ModelConfig
    return from_dict(cls, data, source)


def config_to_dict(config: AnyConfig) -> dict:
    """The plain-dict form of a config (what YAML and config.json hold)."""
    return to_dict(config)


def load_config(path: str | Path) -> AnyConfig:
    """The config in a YAML (or JSON) file; errors name the file (and line, for YAML syntax)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, f"not UTF-8 text ({exc.reason})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataFormatError(path, f"invalid YAML: {exc}", mark.line + 1 if mark else None) from exc
    if not isinstance(data, dict):
        raise DataFormatError(path, "expected a mapping (a model config)")
    return config_from_dict(data, str(path))


_SHARED_PREFIXES = ("model", "train", "features")


def apply_overrides(config: AnyConfig, overrides: dict[str, Any] | list[str] | None,
                    source: str = "--set") -> AnyConfig:
    """``config`` with dotted-path overrides applied and checked again.

    ``overrides`` is ``{"train.lr": 1e-4}`` or ``["train.lr=1e-4", ...]`` (values parsed as YAML). For a mixture,
    a path under model/train/features applies to every expert (``experts.NAME.train.lr`` to one).
    """
    if not overrides:
        return config
    data = config_to_dict(config)
    for path, value in override_items(overrides):
        head = path.split(".", 1)[0]
        if isinstance(config, MixtureConfig) and head in _SHARED_PREFIXES:
            for expert in data["experts"].values():
                set_path(expert, path, value, source)
        else:
            set_path(data, path, value, source)
    return config_from_dict(data, source)


def double_underscore_overrides(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``{"train__lr": 1e-4, "model": {...}}`` -> dotted paths ``{"train.lr": 1e-4, "model.text...": ...}``."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        else:
            out[prefix] = value

    for key, value in kwargs.items():
        walk(key.replace("__", "."), value)
    return out


# ------------------------------------------------------------------------------------------------ version 1
def _looks_v1(data: dict) -> bool:
    """A config without a ``version`` key is version 1 when it has v1's shape (modalities inside ``model.video``)."""
    if "experts" in data:
        return any(isinstance(e, dict) and _looks_v1(e) for e in (data.get("experts") or {}).values())
    video = (data.get("model") or {}).get("video") or {}
    return isinstance(video, dict) and ("modalities" in video or "input_dims" in video)


def migrate_v1(data: dict) -> dict:
    """A version-1 config dict (reelsearch 0.1 before feature recipes) in version-2 form.

    v1 kept the modalities and their sizes in ``model.video`` and the text kind in ``model.text``; its features were
    EfficientNet-Lite0 appearance frames every 0.5 s (at most 64, decoded at short side 256, float16) unless
    ``features.extractors`` said otherwise, the extractor defaults for motion and audio.
    """
    data = copy.deepcopy(data)
    if "experts" in data:
        data.pop("features", None)
        data["experts"] = {k: migrate_v1(v) for k, v in data["experts"].items()}
        data["version"] = SCHEMA_VERSION
        return data
    model = data.get("model", {})
    video, text = model.get("video", {}), model.get("text", {})
    old_features = data.pop("features", None) or {}
    names = dict(old_features.get("extractors") or {})
    dims = video.pop("input_dims", {}) or {}
    recipes = {}
    for modality in video.pop("modalities", list(dims)):
        extractor = names.get(modality) or V1_EXTRACTORS.get(modality, modality)
        recipe = frame_recipe(extractor, int(dims.get(modality, 0)) or 1)
        if modality == "audio":
            recipe = ModalityRecipe(extractor, recipe.dim, recipe.weights, sampling=None, max_frames=None,
                                    short_side=None)
        if modality == "motion":
            recipe = ModalityRecipe(extractor, recipe.dim, recipe.weights, motion_input="pairs")
        recipes[modality] = to_dict(recipe)
    kind = text.pop("features", "vocab")
    for side in (text, video):
        side.get("encoder", {}).pop("input_dim", None)
    layer = text.pop("feature_layer", None)
    encoder_dir = text.pop("encoder_dir", None)
    min_count = text.pop("vocab_min_count", 1)
    if kind == "minilm":
        text_recipe = to_dict(minilm_text(layer))
        if encoder_dir:
            text_recipe.update(encoder=encoder_dir, weights=None)
    else:
        text_recipe = to_dict(glove_text() if kind == "glove" else TextRecipe(kind, min_count=min_count))
    data["features"] = {"video": recipes, "text": text_recipe}
    train = data.get("train", {})
    stop = train.get("early_stopping")
    if isinstance(stop, dict):
        train["early_stopping"] = stop.get("patience")
    if isinstance(train.get("schedule"), dict):
        train["schedule"].pop("metric", None)
    elif "schedule" in train and train["schedule"] is None:
        train["schedule"] = {"kind": "constant"}
    if train.get("margin") is None and "margin" in train:
        train["margin"] = None
    data["version"] = SCHEMA_VERSION
    return merge_dicts(data, {})


#: v1's default extractor per modality (``features.extract.DEFAULT_EXTRACTORS`` of reelsearch 0.1).
V1_EXTRACTORS = {"appearance": "efficientnet-lite0", "motion": "hof-mbh", "audio": "soundnet8"}
