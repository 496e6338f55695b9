"""From a media file to what the library index stores: decode -> frame features -> model embeddings.

Frames are sampled every ``interval`` seconds (at most ``max_frames``, spread uniformly over longer videos; an
image is one frame), each gets appearance features from the model's extractor, and the model embeds:

* the video vector: ``encode_video`` of all frames (what ranking uses);
* one vector per frame: each frame alone as a one-frame video (what the best moment and the UI strip use).

How the vectors of a model are laid out in the index is :class:`VectorLayout`'s business (one expert's joint
space, several experts' spaces side by side, or per-frame attention keys and values for a pairwise model).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

import numpy as np
import torch

from reelsearch.errors import ConfigError
from reelsearch.index.media import EmbeddedMedia, make_thumbnail

#: Extractor used for a modality when the model config does not name one (``features.extractors``).
DEFAULT_EXTRACTORS = {"appearance": "efficientnet-lite0"}


@dataclass
class Expert:
    """One joint space inside the index vectors: columns ``[offset, offset + width)`` of each stored row."""

    name: str
    model: object  # JointModel
    weight: float
    offset: int
    width: int
    similarity: str  # "cosine" | "order"


class VectorLayout:
    """How a model's embeddings sit in the index rows, and how to get per-expert embeddings back out.

    * one JointModel: a row is its joint embedding [D];
    * a MixtureOfExperts: the experts' embeddings side by side [D_1 + ... + D_K] (each unit norm in its space);
    * a frame-attention (pairwise) JointModel: a frame row is [keys (A) | projected values (D)]; the video row is
      the mean of its frame rows (kept for the index's bookkeeping, not used for ranking).
    """

    def __init__(self, model):
        from reelsearch.models import JointModel, MixtureOfExperts

        self.model = model
        self.experts: list[Expert] = []
        if isinstance(model, MixtureOfExperts):
            if model.is_pairwise:
                raise ConfigError("a mixture with a frame-attention expert cannot be searched; use score-based experts")
            members = [(name, e, float(model.fusion["weights"][name])) for name, e in model.experts.items()]
            self.fusion = model.fusion["kind"]
        elif isinstance(model, JointModel):
            members = [(model.name or "model", model, 1.0)]
            self.fusion = "single"
        else:
            raise ConfigError(f"not a reelsearch model: {type(model).__name__}")
        offset = 0
        for name, m, w in members:
            width = m.dim
            if m.is_pairwise:
                width = m.attention.frame_proj.out_features + m.dim
            self.experts.append(Expert(name, m, w, offset, width, m.similarity_name))
            offset += width
        self.dim = offset
        self.pairwise = len(self.experts) == 1 and self.experts[0].model.is_pairwise
        modalities: list[str] = []
        for e in self.experts:
            modalities += [m for m in e.model.modalities if m not in modalities]
        self.modalities = modalities

    @property
    def mode(self) -> str:
        """How a query is ranked: "ann" (inner product, any vector index), "scan" (exact scan with a score
        function), "rank" (rank fusion over every video's expert scores) or "pairwise" (attention over frames)."""
        if self.pairwise:
            return "pairwise"
        if self.fusion == "rank":
            return "rank"
        return "ann" if all(e.similarity == "cosine" for e in self.experts) else "scan"

    def input_dims(self) -> dict[str, int]:
        """Feature size per modality that the model reads (consistent across experts)."""
        dims: dict[str, int] = {}
        for e in self.experts:
            for name, d in e.model.config["model"]["video"]["input_dims"].items():
                if name in e.model.modalities:
                    if dims.setdefault(name, int(d)) != int(d):
                        raise ConfigError(f"experts disagree on the size of {name!r} features")
        return dims

    # -- embedding ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def embed_features(self, feats: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(video row [dim], frame rows [T, dim]) from per-modality frame features {name: [T, D_name]}."""
        t = next(iter(feats.values())).shape[0]
        video_parts, frame_parts = [], []
        for e in self.experts:
            m = e.model
            whole = {"feats": {n: torch.from_numpy(feats[n][None]) for n in m.modalities},
                     "lengths": {n: torch.tensor([t]) for n in m.modalities}}
            per_frame = {"feats": {n: torch.from_numpy(feats[n][:, None, :]) for n in m.modalities},
                         "lengths": {n: torch.ones(t, dtype=torch.long) for n in m.modalities}}
            if m.is_pairwise:
                states = m.encode_video(whole)
                rows = torch.cat([states.keys[0], states.values[0]], dim=1)  # [T, A + D]
                frame_parts.append(rows)
                video_parts.append(rows.mean(0))
            else:
                video_parts.append(m.encode_video(whole)[0])
                frame_parts.append(m.encode_video(per_frame))
        video = torch.cat(video_parts).float().cpu().numpy()
        frames = torch.cat(frame_parts, dim=1).float().cpu().numpy()
        return video, frames

    @torch.no_grad()
    def encode_query(self, captions: list[str]) -> list[torch.Tensor]:
        """Per expert caption embeddings [N, D_k]."""
        return [e.model.encode_captions(list(captions)).float().cpu() for e in self.experts]

    def split(self, rows: np.ndarray) -> list[torch.Tensor]:
        """Per expert columns of stored rows [N, dim] (float32 tensors)."""
        rows = torch.from_numpy(np.ascontiguousarray(rows, np.float32))
        return [rows[:, e.offset:e.offset + e.width] for e in self.experts]

    def states(self, frame_rows: list[np.ndarray]):
        """FrameStates of a pairwise model from each video's stored frame rows [T_i, A + D] (zero padded)."""
        from reelsearch.models.encoders import FrameStates

        d = self.experts[0].model.dim
        a = self.dim - d
        lengths = torch.tensor([len(r) for r in frame_rows], dtype=torch.long)
        padded = torch.zeros(len(frame_rows), int(lengths.max()), self.dim)
        for i, r in enumerate(frame_rows):
            padded[i, : len(r)] = torch.from_numpy(np.asarray(r, np.float32))
        return FrameStates(padded[:, :, :a], padded[:, :, a:], lengths)

    @torch.no_grad()
    def expert_scores(self, queries: list[torch.Tensor], rows: np.ndarray) -> list[np.ndarray]:
        """Each expert's similarity [Q, N] between per-expert queries and stored (non-pairwise) rows [N, dim]."""
        return [e.model.similarity(q, v).float().numpy() for e, q, v in zip(self.experts, queries, self.split(rows))]

    def fuse(self, scores: list[np.ndarray], axis: int = 1) -> np.ndarray:
        """Fused [Q, N] from per-expert matrices (the model's own fusion; a single model is its own score)."""
        if self.fusion == "single":
            return scores[0]
        from reelsearch.evaluation import rank_fusion, score_fusion

        weights = [e.weight for e in self.experts]
        if self.fusion == "rank":
            return np.asarray(rank_fusion(scores, weights, axis=axis), np.float32)
        return np.asarray(score_fusion(scores, weights), np.float32)

    def model_fingerprint(self) -> str:
        """Short hash of every weight of the model (changes whenever the embeddings would)."""
        h = hashlib.sha256()
        for e in self.experts:
            for key, tensor in sorted(e.model.state_dict().items()):
                h.update(key.encode())
                h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()[:12]


class MediaEmbedder:
    """``embed(path) -> EmbeddedMedia``: the library index's ``embed_fn`` for one model."""

    def __init__(self, layout: VectorLayout, interval: float = 0.5, max_frames: int = 64, device: str | None = None,
                 extractors: dict[str, str] | None = None):
        from reelsearch.media.decode import SamplingPolicy

        self.layout = layout
        self.policy = SamplingPolicy("interval", interval, max_frames)
        self.device = device
        names: dict[str, str] = {}
        cfg_names = {}
        for e in layout.experts:
            cfg_names.update((e.model.config.get("features") or {}).get("extractors") or {})
        for modality in layout.modalities:
            name = (extractors or {}).get(modality) or cfg_names.get(modality) or DEFAULT_EXTRACTORS.get(modality)
            if name is None:
                raise ConfigError(f"the model reads {modality!r} features; search extracts per-frame features only "
                                  f"for {sorted(DEFAULT_EXTRACTORS)} (name an extractor for {modality!r})")
            names[modality] = name
        self.extractor_names = names
        self._extractors: dict[str, object] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        """What, besides the model weights, determines the embeddings (part of the index's model id)."""
        ex = ",".join(f"{m}={n}" for m, n in sorted(self.extractor_names.items()))
        return f"{ex};{self.policy};max{self.policy.max_frames}"

    def extractor(self, modality: str):
        """The (lazily created, shared) frame extractor of ``modality``, checked against the model's input size."""
        with self._lock:
            return self._extractor(modality)

    def _extractor(self, modality: str):
        if modality not in self._extractors:
            from reelsearch.features.extractors import create_extractor

            ex = create_extractor(self.extractor_names[modality], device=self.device)
            want = self.layout.input_dims()[modality]
            if getattr(ex, "input", "frames") != "frames" or ex.dim != want:
                raise ConfigError(f"the model reads {want}-d {modality!r} frame features; extractor "
                                  f"{self.extractor_names[modality]!r} gives {ex.dim}-d {ex.input} features")
            self._extractors[modality] = ex
        return self._extractors[modality]

    def __call__(self, path: str) -> EmbeddedMedia:
        from reelsearch.media.decode import decode_frames

        frames = decode_frames(path, self.policy, short_side=224)
        feats = {m: np.ascontiguousarray(self.extractor(m).extract_frames(frames.images), np.float32)
                 for m in self.layout.modalities}
        video, frame_rows = self.layout.embed_features(feats)
        thumbs = [make_thumbnail(img) for img in frames.images]
        duration = float(frames.duration) if frames.duration and np.isfinite(frames.duration) else None
        return EmbeddedMedia(video, frame_rows, np.asarray(frames.timestamps, np.float64), duration, thumbs)
