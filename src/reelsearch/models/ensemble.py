"""Mixture of experts (Mithun et al. 2018 §3.1, §3.5): separately trained JointModels fused by score or by rank.

Each expert has its own video modalities, feature recipes and text processor. Fusion:
  score  S = sum_k w_k S_k (Eq. 4; weights object 1, activity 1, place 0.5); ``fusion.normalize = "zscore"``
         standardises each matrix first (experts scoring on different scales, e.g. cosine and order)
  rank   weighted rank aggregation of the experts' rankings (Table 1 row 1.7)
both delegated to ``reelsearch.scoring.score_fusion`` / ``rank_fusion``.

It has the interface of every model (``reelsearch.models.interface``): caption embeddings and video rows are the
experts' side by side. Features are named by modality; when two experts read the same modality made differently
(e.g. EfficientNet-Lite0 and Lite2 appearance), the second one's is named ``MODALITY@EXPERT``.

Saved as a model folder (``reelsearch.models.folder``): ``moe.json`` (names, fusion) and ``experts/<name>/`` (each
a model folder of its own).
"""

from __future__ import annotations

import functools

import numpy as np
from torch import nn

from reelsearch.config import config_to_dict
from reelsearch.config.schema import FusionConfig, FusionKind, Normalize, modalities_of
from reelsearch.config.typed import from_dict
from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.scoring.fusion import fuse_experts

from .embeddings import SearchMode, VideoEmbeddings, as_rows, split_rows
from .folder import Expert, model_kind, shared_parts
from .interface import EmbeddingModel
from .joint import JointModel
from .parts import MOE_FILE, ConfigPart

FORMAT = "reelsearch.mixture-of-experts"


@model_kind("mixture-of-experts")
class MixtureOfExperts(EmbeddingModel, nn.Module):
    """Several JointModels over different video cues, fused into one caption x video score matrix."""

    def __init__(self, experts: dict[str, JointModel], fusion: FusionConfig | dict, name: str = "mixture-of-experts"):
        nn.Module.__init__(self)
        if isinstance(fusion, dict):
            fusion = from_dict(FusionConfig, fusion, "fusion")
        missing = set(experts) - set(fusion.weights)
        if missing:
            raise ConfigError(f"fusion weights missing for experts {sorted(missing)}")
        self.experts = nn.ModuleDict(experts)
        self.fusion = fusion
        self.name = name
        self.feature_names = _feature_names(experts)
        self._search_mode = _search_mode(experts.values(), fusion)

    # ---- properties
    @property
    def modalities(self) -> list[str]:
        return modalities_of(self.experts.values())

    @property
    def recipes(self) -> dict:
        """{feature name: ModalityRecipe} of every input (see the module docstring for the names)."""
        return {self.feature_names[k][m]: r for k, e in self.experts.items() for m, r in e.recipes.items()}

    @property
    def is_pairwise(self) -> bool:
        return any(e.is_pairwise for e in self.experts.values())

    @property
    def search_mode(self) -> SearchMode:
        """How a catalog serves the fused score (decided when the mixture is built); ConfigError for a mixture with
        a frame-attention expert, which no catalog serves."""
        if self._search_mode is None:
            raise ConfigError(f"mixture {self.name!r} has a frame-attention expert: it cannot be served from an "
                              "index; use experts that score single vectors")
        return self._search_mode

    @functools.cached_property
    def widths(self) -> dict[str, tuple[int, int]]:
        """{expert: (text width, row width)}, read once (a search splits its query and rows by them a dozen
        times)."""
        return {k: (e.dim, e.row_dim) for k, e in self.experts.items()}

    @property
    def row_dim(self) -> int:
        return sum(w for _, w in self.widths.values())

    @property
    def dim(self) -> int:
        return sum(d for d, _ in self.widths.values())

    def weight(self, expert: str) -> float:
        return float(self.fusion.weights[expert])

    @property
    def fusion_kind(self) -> FusionKind:
        """Score or rank fusion (rank fusion depends on the direction: ``score(..., axis)``)."""
        return self.fusion.kind

    # ---- the model interface
    def _encode_text(self, texts, batch_size: int = 256, cached: bool = False) -> np.ndarray:
        """``encode_text`` by the text towers: the experts' caption embeddings side by side [N, sum D_k] (each
        through its own text processor)."""
        batches = {}  # experts over one tower: one batch
        return np.concatenate([e._encode_text(texts, batch_size, cached, batches) for e in self.experts.values()],
                              axis=1)

    def _split(self, x: np.ndarray, text: bool) -> dict[str, np.ndarray]:
        return split_rows(x, self.widths, text)

    def _expert_items(self, items: list[dict], expert: str) -> list[dict]:
        names = self.feature_names[expert]
        out = []
        for item in items:
            if expert in item and isinstance(item[expert], dict):  # {expert: {modality: features}}
                out.append(item[expert])
                continue
            missing = [n for n in names.values() if n not in item]
            if missing:
                raise ConfigError(f"mixture {self.name!r}: expert {expert!r} reads features {sorted(names.values())}; "
                                  f"missing {missing}")
            out.append({m: item[n] for m, n in names.items()})
        return out

    def _embed_feature_batch(self, items: list[dict], frames: bool = True) -> VideoEmbeddings:
        parts = {k: e._embed_feature_batch(self._expert_items(items, k), frames) for k, e in self.experts.items()}
        video = np.concatenate([p.video for p in parts.values()], axis=1)
        rows = []
        for i in range(len(items)):  # side by side when the experts' frames line up (one decode of the media)
            own = [p.frames[i] for p in parts.values()]
            aligned = all(f is not None for f in own) and len({len(f) for f in own}) == 1
            rows.append(np.concatenate(own, axis=1) if aligned else None)
        return VideoEmbeddings(video, rows, parts)

    def _expert_video(self, video, expert: str):
        if isinstance(video, VideoEmbeddings) and expert in video.parts:
            return video.parts[expert]
        if isinstance(video, VideoEmbeddings):
            rows = self._split(video.video, text=False)[expert]
            frames = [None if f is None else self._split(f, text=False)[expert] for f in video.frames]
            return VideoEmbeddings(rows, frames)
        return self._split(as_rows(video), text=False)[expert]

    def expert_scores(self, text, video) -> dict[str, np.ndarray]:
        """Each expert's [N, M] similarity."""
        texts = self._split(np.asarray(text, np.float32), text=True)
        return {k: e.score(texts[k], self._expert_video(video, k)) for k, e in self.experts.items()}

    def fuse(self, scores: dict[str, np.ndarray], axis: int = 1) -> np.ndarray:
        """Fused [N, M] from the experts' matrices, by score or by rank as configured.

        Rank fusion depends on the direction: ``axis=1`` ranks videos per caption (text-to-video), ``axis=0``
        captions per video (video-to-text); score fusion serves both.
        """
        return fuse_experts(scores, {k: self.weight(k) for k in self.experts}, self.fusion.kind,
                            self.fusion.normalize, axis)

    def score(self, text, video, axis: int = 1) -> np.ndarray:
        """Fused similarity [N, M] (rows captions); ``axis`` picks the direction for rank fusion."""
        return self.fuse(self.expert_scores(text, video), axis=axis)

    def frame_scores(self, text_row, frames: np.ndarray) -> np.ndarray:
        """[T]: the fused score of each frame alone (score fusion; rank fusion ranks the frames)."""
        texts = self._split(np.asarray(text_row, np.float32).reshape(1, -1), text=True)
        rows = self._split(np.asarray(frames, np.float32), text=False)
        per = {k: e.frame_scores(texts[k][0], rows[k])[None] for k, e in self.experts.items()}
        return self.fuse(per, axis=1)[0]

    def ann_query(self, text: np.ndarray) -> np.ndarray:
        """Weighted experts' embeddings side by side: their inner product with a stored row is the fused score."""
        if not self.inner_product:
            raise ConfigError(f"mixture {self.name!r} is searched by {self.search_mode}, not by inner product")
        texts = self._split(np.asarray(text, np.float32), text=True)
        return np.concatenate([self.weight(k) * texts[k] for k in self.experts], axis=1)

    # ---- the model folder (reelsearch.models.folder)
    def parts(self) -> list:
        """Its config (``moe.json``: name, experts in order, fusion), the parts its experts share (their one tuned
        text tower) and each expert, a model folder of its own but for those."""
        document = {"format": FORMAT, "version": 2, "name": self.name, "experts": list(self.experts),
                    "fusion": config_to_dict(self.fusion)}
        shared = shared_parts(self.experts.values())
        kinds = tuple(p.kind for p in shared)
        return [ConfigPart(MOE_FILE, document), *shared, *(Expert(k, e, kinds) for k, e in self.experts.items())]

    @classmethod
    def from_parts(cls, parts) -> MixtureOfExperts:
        """The mixture of a folder's parts (``folder.Parts``): its experts in the order its config names them."""
        config_part = parts.one("config")
        meta = config_part.of_format(FORMAT)
        experts = {e.name: e.model for e in parts.all("expert")}
        names = meta.get("experts") or []
        if sorted(names) != sorted(experts):
            raise DataFormatError(parts.manifest, f"expert parts {sorted(experts)} are not the experts "
                                                  f"{config_part.file} names ({names})")
        fusion = from_dict(FusionConfig, meta["fusion"], str(config_part.path), "fusion")
        return cls({k: experts[k] for k in names}, fusion, name=meta.get("name", ""))


def _search_mode(experts, fusion: FusionConfig) -> SearchMode | None:
    """How a catalog serves a mixture of ``experts`` fused by ``fusion`` (None: it has a frame-attention expert)."""
    if any(e.is_pairwise for e in experts):
        return None
    if fusion.kind is FusionKind.RANK:
        return SearchMode.RANK
    if fusion.normalize is Normalize.ZSCORE:
        return SearchMode.ZSCORE
    return SearchMode.ANN if all(e.inner_product for e in experts) else SearchMode.SCAN


def _feature_names(experts: dict[str, JointModel]) -> dict[str, dict[str, str]]:
    """{expert: {modality: feature name}}: the modality, or MODALITY@EXPERT when an earlier expert reads that
    modality made by another recipe."""
    first: dict[str, str] = {}
    names: dict[str, dict[str, str]] = {}
    for k, e in experts.items():
        names[k] = {}
        for m, recipe in e.recipes.items():
            key = first.setdefault(m, recipe.key)
            names[k][m] = m if key == recipe.key else f"{m}@{k}"
    return names
