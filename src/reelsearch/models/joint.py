"""JointModel: a text encoder and a video encoder projected into one space, compared by a named similarity.

Config (the ``model`` section of a named model, see ``reelsearch.models.registry`` and configs/*.yaml)::

    text:  {features: glove|vocab|minilm, encoder: {SequenceEncoder kwargs}, projection: {kind, dim}}
    video: {modalities: [names], input_dims: {name: D}, encoder: {SequenceEncoder kwargs w/o input_dim},
            attention: null | {dim: A}, projection: {kind, dim}}
    similarity: cosine | order

Batches. text: {"feats": [N, L, D] float | "ids": [N, L] long, "lengths": [N]} (a ``TextProcessor`` makes it).
video: {"feats": [M, T, Dv], "lengths": [M]} for one modality, or {"feats": {name: [M, T_name, D_name]},
"lengths": {name: [M]}} for several (each modality is encoded over its own frames, then concatenated — Mithun §3.5's
activity expert fuses motion and audio this way). Omitted lengths mean every step is valid.

With ``video.attention`` (Torabi M3) the video embedding depends on the sentence: ``encode_video`` returns
``FrameStates`` (per-frame keys and projected values) and ``similarity`` attends per (caption, video) pair in
chunks. Such a model cannot be served from a plain vector index (``is_pairwise`` is True).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.io import atomic_path, atomic_write_json

from .encoders import FrameStates, SequenceEncoder, SoftFrameAttention
from .projection import Projection
from .text_processor import TextProcessor, text_processor_from_state

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT = "reelsearch.joint-model"
#: Elements of one temporary [captions, videos, frames, max(A, D)] block of the attention similarity.
ATTENTION_CHUNK_ELEMENTS = 1 << 25


def _lengths(batch: dict, key: str | None, x: torch.Tensor) -> torch.Tensor:
    lengths = batch.get("lengths")
    if isinstance(lengths, dict):
        lengths = lengths.get(key)
    if lengths is None and isinstance(batch.get("mask"), torch.Tensor):
        return batch["mask"].sum(1).long()
    if lengths is None:
        return torch.full((x.size(0),), x.size(1), dtype=torch.long)
    return torch.as_tensor(lengths, dtype=torch.long)


class JointModel(nn.Module):
    """Text and video encoders + joint-space projections + similarity; see the module docstring."""

    def __init__(self, config: dict, text_processor: TextProcessor | None = None):
        super().__init__()
        self.config = json.loads(json.dumps(config))  # a private, JSON-clean copy
        m = self.config["model"]
        t, v = m["text"], m["video"]
        self.similarity_name = m["similarity"]
        self.text_processor = text_processor
        text_kwargs = dict(t["encoder"])
        if t["features"] == "vocab":
            if text_processor is None or text_processor.vocab_size is None:
                raise ConfigError("a vocab text model needs its VocabTextProcessor (VocabTextProcessor.build)")
            text_kwargs["vocab_size"] = text_processor.vocab_size
        self.text_encoder = SequenceEncoder(**text_kwargs)
        self.text_projection = Projection(t["projection"]["kind"], self.text_encoder.output_dim,
                                          t["projection"].get("dim"))
        self.modalities = list(v["modalities"])
        self.video_encoders = nn.ModuleDict(
            {name: SequenceEncoder(input_dim=v["input_dims"][name], **v["encoder"]) for name in self.modalities}
        )
        video_dim = sum(enc.output_dim for enc in self.video_encoders.values())
        self.video_projection = Projection(v["projection"]["kind"], video_dim, v["projection"].get("dim"))
        self.attention = None
        if v.get("attention"):
            if len(self.modalities) != 1 or self.video_projection.linear is None or self.video_projection.bn:
                raise ConfigError("frame attention needs one modality and a linear projection without BatchNorm")
            self.attention = SoftFrameAttention(video_dim, self.text_projection.dim, v["attention"]["dim"])
        if self.text_projection.dim != self.video_projection.dim:
            raise ConfigError(f"joint sizes differ: text {self.text_projection.dim}, video {self.video_projection.dim}")

    # ---- properties
    @property
    def name(self) -> str:
        return self.config.get("name", "")

    @property
    def dim(self) -> int:
        """Size D of the joint space."""
        return self.text_projection.dim

    @property
    def is_pairwise(self) -> bool:
        """True when video embeddings depend on the sentence (Torabi M3): no plain vector index."""
        return self.attention is not None

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # ---- encoding
    def encode_text(self, text_batch: dict) -> torch.Tensor:
        """Caption embeddings [N, D] (unit norm) from a text batch."""
        x = text_batch["ids"] if "ids" in text_batch else text_batch["feats"]
        lengths = _lengths(text_batch, None, x)
        x = x.to(self.device) if x.dtype == torch.long else x.to(self.device, torch.float32)
        return self.text_projection(self.text_encoder(x, lengths.to(self.device)))

    def encode_captions(self, captions: list[str]) -> torch.Tensor:
        """Caption embeddings [N, D] straight from strings, through this model's text processor."""
        if self.text_processor is None:
            raise ConfigError("this model has no text processor")
        return self.encode_text(self.text_processor(captions))

    def _modality(self, video_batch: dict, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        feats = video_batch["feats"]
        if isinstance(feats, dict):
            if name not in feats:
                raise ConfigError(f"model {self.name!r} reads video modality {name!r}; the batch has {sorted(feats)}")
            feats = feats[name]
        elif len(self.modalities) != 1:
            raise ConfigError(f"this model needs modalities {self.modalities}: pass feats as a dict")
        feats = torch.as_tensor(feats)
        lengths = _lengths(video_batch, name, feats)
        return feats.to(self.device, torch.float32), lengths.to(self.device)

    def encode_video(self, video_batch: dict) -> torch.Tensor | FrameStates:
        """Video embeddings [M, D] (unit norm); ``FrameStates`` for a frame-attention model."""
        if self.attention is not None:
            name = self.modalities[0]
            feats, lengths = self._modality(video_batch, name)
            h, _ = self.video_encoders[name].states(feats, lengths)
            return FrameStates(self.attention.keys(h), self.video_projection.linear(h), lengths.clamp_min(1))
        parts = [self.video_encoders[n](*self._modality(video_batch, n)) for n in self.modalities]
        return self.video_projection(torch.cat(parts, dim=-1))

    # ---- similarity
    def _pair_similarity(self, c: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """S for paired embeddings c [n, 1, D] and v [n, m, D] -> [n, m]."""
        if self.similarity_name == "order":
            from .similarity import order_violation

            return -order_violation(c, v)
        return (c * v).sum(-1)

    def _attended_block(self, c: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor):
        w = self.attention.weights(c, keys, lengths)  # [n, m, T]
        v = self.video_projection.finish(torch.einsum("nmt,mtd->nmd", w, values))
        return self._pair_similarity(c[:, None, :], v)

    def attention_weights(self, text_emb: torch.Tensor, states: FrameStates) -> torch.Tensor:
        """Frame attention weights [N, M, T] of each caption over each video (M3; unchunked)."""
        return self.attention.weights(text_emb, states.keys, states.lengths)

    def similarity(self, text_emb: torch.Tensor, video_emb: torch.Tensor | FrameStates) -> torch.Tensor:
        """Similarity matrix [N, M]: rows captions, columns videos."""
        if not isinstance(video_emb, FrameStates):
            from .similarity import cosine_similarity, get_similarity

            if self.similarity_name == "cosine":  # both sides are unit norm already
                return cosine_similarity(text_emb, video_emb, normalized=True)
            return get_similarity(self.similarity_name)(text_emb, video_emb)
        keys, values, lengths = video_emb
        if bool((lengths <= 1).all()):  # one frame each (images): its weight is 1 whatever the sentence
            return self.similarity(text_emb, self.video_projection.finish(values[:, 0]))
        n, (m, t, a), d = text_emb.size(0), keys.shape, values.size(-1)
        per_pair = max(1, t * max(a, d))
        tm = max(1, min(m, ATTENTION_CHUNK_ELEMENTS // per_pair))
        tn = max(1, min(n, ATTENTION_CHUNK_ELEMENTS // (per_pair * tm)))
        rows = []
        for i in range(0, n, tn):
            cols = []
            for j in range(0, m, tm):
                args = (text_emb[i : i + tn], keys[j : j + tm], values[j : j + tm], lengths[j : j + tm])
                if torch.is_grad_enabled():  # recompute the [n, m, T, A] block in backward instead of storing it
                    cols.append(checkpoint(self._attended_block, *args, use_reentrant=False))
                else:
                    cols.append(self._attended_block(*args))
            rows.append(torch.cat(cols, dim=1))
        return torch.cat(rows, dim=0)

    def forward(self, text_batch: dict, video_batch: dict) -> torch.Tensor:
        """Similarity matrix [N, M] of a text batch against a video batch."""
        return self.similarity(self.encode_text(text_batch), self.encode_video(video_batch))

    # ---- persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` (config + text processor state, vocabulary included) and ``model.safetensors``."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: t.detach().cpu().contiguous() for k, t in self.state_dict().items()}
        with atomic_path(directory / WEIGHTS_FILE) as tmp:
            save_file(state, str(tmp), metadata={"format": FORMAT})
        processor = self.text_processor.state() if self.text_processor is not None else None
        if processor and processor.get("model_dir"):  # an adapted text encoder travels with the checkpoint
            from reelsearch.text.mlm import bundle_encoder

            processor["model_dir"] = bundle_encoder(processor["model_dir"], directory)
        atomic_write_json(directory / CONFIG_FILE,
                          {"format": FORMAT, "version": 1, "config": self.config, "text_processor": processor})
        return directory

    @classmethod
    def load(cls, directory: str | Path, map_location: str | torch.device = "cpu") -> JointModel:
        """Load a model written by ``save`` (in eval mode)."""
        from safetensors.torch import load_file

        directory = Path(directory)
        meta = read_model_json(directory / CONFIG_FILE, FORMAT)
        if (meta.get("text_processor") or {}).get("model_dir"):
            encoder_dir = directory / meta["text_processor"]["model_dir"]
            if not (encoder_dir / "modules.json").is_file():
                raise DataFormatError(encoder_dir, "missing: the model's adapted text encoder folder")
            meta["text_processor"]["model_dir"] = str(encoder_dir.resolve())
        processor = text_processor_from_state(meta["text_processor"]) if meta.get("text_processor") else None
        model = cls(meta["config"], processor)
        weights = directory / WEIGHTS_FILE
        if not weights.is_file():
            raise DataFormatError(weights, "missing model weights")
        try:
            state = load_file(str(weights), device=str(map_location))
        except Exception as exc:  # safetensors raises its own error types
            raise DataFormatError(weights, f"unreadable safetensors file: {exc}") from exc
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise DataFormatError(weights, f"weights do not fit the config: {exc}") from exc
        return model.to(map_location).eval()


def read_model_json(path: Path, expected_format: str) -> dict:
    """Read a model directory's JSON file, raising DataFormatError naming the file on any problem."""
    if not path.is_file():
        raise DataFormatError(path, "missing; not a saved reelsearch model directory")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"invalid JSON: {exc}", getattr(exc, "lineno", None)) from exc
    if not isinstance(meta, dict) or meta.get("format") != expected_format:
        raise DataFormatError(path, f"not a {expected_format} file (format={meta.get('format')!r})"
                              if isinstance(meta, dict) else "expected a JSON object")
    return meta
