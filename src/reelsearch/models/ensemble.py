"""Mixture of experts (Mithun et al. 2018 §3.1, §3.5): separately trained JointModels fused by score or by rank.

Each expert has its own video modalities and its own text processor (vocabulary). Fusion:
  score  S = sum_k w_k S_k (Eq. 4; weights object 1, activity 1, place 0.5); ``fusion["normalize"] = "zscore"``
         standardises each matrix first (experts scoring on different scales, e.g. cosine and order)
  rank   weighted rank aggregation of the experts' rankings (Table 1 row 1.7)
both delegated to ``reelsearch.evaluation.score_fusion`` / ``rank_fusion``.

Saved as a directory: ``moe.json`` (names, fusion, features) and ``experts/<name>/`` (each a JointModel directory).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from reelsearch.errors import ConfigError
from reelsearch.io import atomic_write_json

from .joint import JointModel, read_model_json

MOE_FILE, FORMAT = "moe.json", "reelsearch.mixture-of-experts"
FUSIONS = ("score", "rank")


class MixtureOfExperts(nn.Module):
    """Several JointModels over different video cues, fused into one caption x video score matrix."""

    def __init__(self, experts: dict[str, JointModel], fusion: dict, name: str = "mixture-of-experts",
                 features: dict | None = None):
        super().__init__()
        if fusion.get("kind") not in FUSIONS:
            raise ConfigError(f"unknown fusion {fusion.get('kind')!r}; choose one of {FUSIONS}")
        missing = set(experts) - set(fusion.get("weights", {}))
        if missing:
            raise ConfigError(f"fusion weights missing for experts {sorted(missing)}")
        self.experts = nn.ModuleDict(experts)
        self.fusion = dict(fusion)
        self.name = name
        self.features = features

    @property
    def is_pairwise(self) -> bool:
        return any(e.is_pairwise for e in self.experts.values())

    def encode_captions(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Per expert caption embeddings, each through that expert's own text processor."""
        return {k: e.encode_captions(list(captions)) for k, e in self.experts.items()}

    def encode_text(self, text_batches: dict[str, dict]) -> dict[str, torch.Tensor]:
        """Per expert caption embeddings from per-expert text batches ({expert: text_batch})."""
        return {k: e.encode_text(text_batches[k]) for k, e in self.experts.items()}

    def encode_video(self, video_batch: dict) -> dict[str, torch.Tensor]:
        """Per expert video embeddings; ``video_batch["feats"]`` is a dict holding every expert's modalities."""
        return {k: e.encode_video(video_batch) for k, e in self.experts.items()}

    def expert_similarities(self, text_embs: dict, video_embs: dict) -> dict[str, torch.Tensor]:
        """Each expert's [N, M] similarity matrix."""
        return {k: e.similarity(text_embs[k], video_embs[k]) for k, e in self.experts.items()}

    def fuse(self, sims: dict[str, torch.Tensor], axis: int = 1) -> torch.Tensor:
        """Fused [N, M] matrix from the experts' matrices, by score or by rank as configured.

        Rank fusion depends on the direction: ``axis=1`` ranks videos per caption (text-to-video), ``axis=0``
        captions per video (video-to-text); score fusion serves both.
        """
        from reelsearch.evaluation import rank_fusion, score_fusion

        names = list(self.experts)
        weights = [float(self.fusion["weights"][k]) for k in names]
        arrays = [sims[k].detach().float().cpu().numpy() for k in names]
        if self.fusion["kind"] == "score":
            fused = score_fusion(arrays, weights, normalize=self.fusion.get("normalize", "none"))
        else:
            fused = rank_fusion(arrays, weights, axis=axis)
        return torch.as_tensor(fused, dtype=torch.float32)

    def similarity(self, text_embs: dict, video_embs: dict, axis: int = 1) -> torch.Tensor:
        """Fused similarity [N, M] (rows captions); ``axis`` picks the direction for rank fusion."""
        return self.fuse(self.expert_similarities(text_embs, video_embs), axis=axis)

    def forward(self, captions: Sequence[str], video_batch: dict, axis: int = 1) -> torch.Tensor:
        """Fused similarity [N, M] of caption strings against a multi-modality video batch."""
        return self.similarity(self.encode_captions(captions), self.encode_video(video_batch), axis=axis)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        for k, e in self.experts.items():
            e.save(directory / "experts" / k)
        atomic_write_json(directory / MOE_FILE, {"format": FORMAT, "version": 1, "name": self.name,
                                                 "experts": list(self.experts), "fusion": self.fusion,
                                                 "features": self.features})
        return directory

    @classmethod
    def load(cls, directory: str | Path, map_location: str | torch.device = "cpu") -> MixtureOfExperts:
        directory = Path(directory)
        meta = read_model_json(directory / MOE_FILE, FORMAT)
        experts = {k: JointModel.load(directory / "experts" / k, map_location) for k in meta["experts"]}
        return cls(experts, meta["fusion"], name=meta.get("name", ""), features=meta.get("features")).eval()
