"""JointModel: a text encoder and a video encoder projected into one space, compared by a named similarity.

Built from a typed ``ModelConfig`` (``reelsearch.config.schema``): ``model`` (encoders, projections, similarity),
``features`` (the recipe of its inputs: each video modality's extractor and sampling, how captions become input).
Its public interface is the one of every reelsearch model (``reelsearch.models.interface``): ``encode_text``,
``encode_video``, ``score``, numpy in and out. Training works on tensors:

text batch  {"feats": [N, L, D] float | "ids": [N, L] long, "lengths": [N]} (a ``TextProcessor`` makes it)
video batch {"feats": [M, T, Dv], "lengths": [M]} for one modality, or {"feats": {name: [M, T_name, D_name]},
            "lengths": {name: [M]}} for several (each modality is encoded over its own frames, then concatenated —
            Mithun §3.5's activity expert fuses motion and audio this way). Omitted lengths mean every step is valid.

``text_forward`` / ``video_forward`` give the [N, D] / [M, D] tensors and ``similarity`` the [N, M] matrix. With
``model.video.attention`` (Torabi M3) the video embedding depends on the sentence: ``video_forward`` returns
``FrameStates`` (per-frame keys and projected values) and ``similarity`` attends per (caption, video) pair in
chunks; such a model is served by an exact scan over frames (``SearchMode.PAIRWISE``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from reelsearch.config import ModelConfig, config_from_dict, config_to_dict
from reelsearch.config.schema import FusionKind, migrate_v1
from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.features.caches import caption_features
from reelsearch.features.pairs import pad_sequences
from reelsearch.similarity import cosine_similarity, get_similarity, order_violation
from reelsearch.text.mlm import BUNDLED_NAME
from reelsearch.text.towers import is_tower, tower_key

from .embeddings import SearchMode, VideoEmbeddings, as_rows
from .encoders import FrameStates, SequenceEncoder, SoftFrameAttention
from .folder import model_kind
from .interface import EmbeddingModel
from .parts import CONFIG_FILE, TEXT_TAIL_FILE, CnnTail, ConfigPart, TextEncoder, TextTail, Weights
from .projection import Projection
from .text_processor import TextProcessor, VocabTextProcessor, processor_for_recipe

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


@model_kind("joint-model")
class JointModel(EmbeddingModel, nn.Module):
    """Text and video encoders + joint-space projections + similarity; see the module docstring."""

    def __init__(self, config: ModelConfig | dict, text_processor: TextProcessor | None = None):
        nn.Module.__init__(self)
        if isinstance(config, dict):
            config = config_from_dict(config)
        if not isinstance(config, ModelConfig):
            raise ConfigError(f"a JointModel needs a ModelConfig, got {type(config).__name__}")
        self.config = config
        m, recipe = config.model, config.features
        self.similarity_name = m.similarity
        if text_processor is None and recipe.text.kind != "vocab":
            text_processor = processor_for_recipe(recipe.text)
        self.text_processor = _checked_processor(text_processor, config)
        text_kwargs = config_to_dict(m.text.encoder)
        if recipe.text.kind == "vocab":
            text_kwargs.update(input_dim=text_kwargs["embed_dim"], vocab_size=self.text_processor.vocab_size)
        else:
            text_kwargs.update(input_dim=recipe.text.dim)
        self.text_encoder = SequenceEncoder(**text_kwargs)
        self.text_projection = Projection(m.text.projection.kind, self.text_encoder.output_dim, m.text.projection.dim)
        self.modalities = list(recipe.video)
        video_kwargs = config_to_dict(m.video.encoder)
        video_kwargs.pop("embed_dim", None)
        self.video_encoders = nn.ModuleDict(
            {name: SequenceEncoder(input_dim=r.dim, **video_kwargs) for name, r in recipe.video.items()})
        video_dim = sum(enc.output_dim for enc in self.video_encoders.values())
        self.video_projection = Projection(m.video.projection.kind, video_dim, m.video.projection.dim)
        self.attention = None
        if m.video.attention:
            if self.video_projection.linear is None or self.video_projection.bn:
                raise ConfigError("frame attention needs a linear projection without BatchNorm")
            self.attention = SoftFrameAttention(video_dim, self.text_projection.dim, m.video.attention.dim)
        if self.text_projection.dim != self.video_projection.dim:
            raise ConfigError(f"joint sizes differ: text {self.text_projection.dim}, video {self.video_projection.dim}")
        #: how a catalog serves its score (``reelsearch.models.interface.SearchMode``)
        self.search_mode = (SearchMode.PAIRWISE if self.attention is not None else
                            SearchMode.ANN if self.similarity_name == "cosine" else SearchMode.SCAN)

    # ---- properties
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def recipes(self) -> dict:
        """{modality: ModalityRecipe} of the video inputs."""
        return dict(self.config.features.video)

    @property
    def dim(self) -> int:
        """Size D of the joint space (of ``encode_text``'s rows)."""
        return self.text_projection.dim

    @property
    def row_dim(self) -> int:
        """Width of a stored video/frame row: D, or A + D (keys and values) for a frame-attention model."""
        return self.dim + (self.attention.frame_proj.out_features if self.attention is not None else 0)

    @property
    def is_pairwise(self) -> bool:
        """True when video embeddings depend on the sentence (Torabi M3)."""
        return self.attention is not None

    @property
    def device(self) -> torch.device:
        """Where the parameters are; remembered (walking the modules costs more than a search's scoring of a hit)
        until ``.to()`` / ``.cuda()`` / ``.cpu()`` move them (all go through ``_apply``); the CPU for a model with
        none (a zero-shot tower model, ``reelsearch.models.hf``)."""
        device = self.__dict__.get("_device")
        if device is None:
            first = next(self.parameters(), None)
            device = self.__dict__["_device"] = first.device if first is not None else torch.device("cpu")
        return device

    def _apply(self, *args, **kwargs):
        self.__dict__.pop("_device", None)
        return super()._apply(*args, **kwargs)

    @property
    def experts(self) -> dict[str, JointModel]:
        """{name: joint model}: a joint model is its own single expert."""
        return {self.name or "model": self}

    @property
    def fusion_kind(self) -> FusionKind | None:
        """How expert scores combine (a mixture's ``FusionKind``); None: one expert, nothing to fuse."""
        return None

    def weight(self, expert: str) -> float:
        return 1.0

    # ---- tensors (training)
    def text_forward(self, text_batch: dict) -> torch.Tensor:
        """Caption embeddings [N, D] (unit norm) from a text batch."""
        x = text_batch["ids"] if "ids" in text_batch else text_batch["feats"]
        lengths = _lengths(text_batch, None, x)
        x = x.to(self.device) if x.dtype == torch.long else x.to(self.device, torch.float32)
        return self.text_projection(self.text_encoder(x, lengths.to(self.device)))

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

    def video_forward(self, video_batch: dict) -> torch.Tensor | FrameStates:
        """Video embeddings [M, D] (unit norm); ``FrameStates`` for a frame-attention model."""
        if self.attention is not None:
            name = self.modalities[0]
            feats, lengths = self._modality(video_batch, name)
            h, _ = self.video_encoders[name].states(feats, lengths)
            return FrameStates(self.attention.keys(h), self.video_projection.linear(h), lengths.clamp_min(1))
        parts = [self.video_encoders[n](*self._modality(video_batch, n)) for n in self.modalities]
        return self.video_projection(torch.cat(parts, dim=-1))

    # ---- numpy (the model interface)
    @torch.inference_mode()
    def _encode_text(self, texts, batch_size: int = 256, cached: bool = False, batches: dict | None = None
                     ) -> np.ndarray:
        """``encode_text`` by the text tower: caption embeddings [N, D] (float32, unit norm) of ``texts``. ``batches``:
        text batches made by other experts' towers in this call, by their processor's ``batch_key`` (read and
        added to: experts over one tower make each batch once)."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if self.text_processor is None:
            raise ConfigError(f"model {self.name!r} has no text processor")
        features = None
        if cached:
            features = caption_features(texts, self.text_processor, progress=False)
        was_training = self.training
        if was_training:  # (walking the modules costs ~0.3 ms a query: only when needed)
            self.eval()
        out = []
        for i in range(0, len(texts), batch_size):
            chunk = texts[i:i + batch_size]
            if features is not None:
                batch = self.text_processor.from_features(features[i:i + batch_size])
            elif batches is not None:
                key = (self.text_processor.batch_key(), i)
                batch = batches[key] = batches[key] if key in batches else self.text_processor(chunk)
            else:
                batch = self.text_processor(chunk)
            out.append(self.text_forward(batch).float().cpu().numpy())
        if was_training:
            self.train()
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    @torch.inference_mode()
    def _embed_feature_batch(self, items: list[dict], frames: bool = True) -> VideoEmbeddings:
        """Rows of several videos from their feature dicts {modality: [T, D]}: the video row (all frames) and one
        row per frame (each frame alone as a one-frame video; frame-attention models: keys and values)."""
        was_training = self.training
        if was_training:  # (walking the modules costs ~0.3 ms a query: only when needed)
            self.eval()
        for item in items:
            missing = [m for m in self.modalities if m not in item]
            if missing:
                raise ConfigError(f"model {self.name!r} reads {self.modalities}; features lack {missing}")
        whole = {"feats": {}, "lengths": {}}
        for m in self.modalities:
            whole["feats"][m], whole["lengths"][m] = pad_sequences([item[m] for item in items])
        if self.attention is not None:
            states = self.video_forward(whole)
            frames = [torch.cat([states.keys[i, :n], states.values[i, :n]], 1).float().cpu().numpy()
                      for i, n in enumerate(states.lengths.tolist())]
            video = np.stack([f.mean(0) for f in frames])
        else:
            video = self.video_forward(whole).float().cpu().numpy()
            frames = self._frame_rows(items) if frames else [None] * len(items)
        if was_training:
            self.train()
        return VideoEmbeddings(video.astype(np.float32), frames)

    def _frame_rows(self, items: list[dict]) -> list[np.ndarray]:
        """Each frame of each video embedded alone. Modalities with as many rows as the first one are taken frame
        by frame; any other (e.g. audio over the whole clip) is given whole to every frame."""
        ref = self.modalities[0]
        counts = [len(item[ref]) for item in items]
        batch = {"feats": {}, "lengths": {}}
        for m in self.modalities:
            seqs = []
            for item, t in zip(items, counts):
                x = np.asarray(item[m], np.float32)
                seqs += [x[j:j + 1] for j in range(t)] if len(x) == t else [x] * t
            batch["feats"][m], batch["lengths"][m] = pad_sequences(seqs)
        rows = self.video_forward(batch).float().cpu().numpy()
        return list(np.split(rows, np.cumsum(counts)[:-1]))

    def _states(self, frames: list[np.ndarray]) -> FrameStates:
        """FrameStates of a frame-attention model from stored frame rows [T_i, A + D]."""
        padded, lengths = pad_sequences(frames)
        a = self.row_dim - self.dim
        padded = padded.to(self.device)
        return FrameStates(padded[:, :, :a], padded[:, :, a:], lengths.to(self.device))

    def score(self, text, video, axis: int = 1) -> np.ndarray:
        """Similarity [N, M] of caption embeddings ``text`` [N, D] and videos (VideoEmbeddings, or rows [M, D] for
        a model without frame attention). ``axis`` is for mixtures' rank fusion; a joint model ignores it."""
        if self.attention is None and self.similarity_name == "cosine" and self.device.type == "cpu":
            # unit rows on both sides: the plain product (``similarity``), in numpy: a search scores each hit's
            # experts one row at a time, where a torch call costs more than the product
            t, v = np.asarray(text, np.float32), as_rows(video)
            if t.ndim != 2 or v.ndim != 2 or t.shape[1] != v.shape[1]:
                raise ValueError(f"expected [N, D] and [M, D] embeddings of one size, got {t.shape} and {v.shape}")
            return t @ v.T
        return self._score_torch(text, video)

    @torch.inference_mode()
    def _score_torch(self, text, video) -> np.ndarray:
        t = torch.as_tensor(np.asarray(text, np.float32), device=self.device)
        if self.attention is not None:
            if not isinstance(video, VideoEmbeddings):
                raise ConfigError(f"model {self.name!r} attends over frames: score needs VideoEmbeddings")
            return self.similarity(t, self._states(video.frames)).float().cpu().numpy()
        v = torch.as_tensor(as_rows(video), device=self.device)
        return self.similarity(t, v).float().cpu().numpy()

    def expert_scores(self, text, video) -> dict[str, np.ndarray]:
        """{name: [N, M]}: a joint model is its own single expert."""
        (name,) = self.experts
        return {name: self.score(text, video)}

    def fuse(self, scores: dict[str, np.ndarray], axis: int = 1) -> np.ndarray:
        """The one matrix of ``expert_scores`` (a joint model has nothing to fuse)."""
        (matrix,) = scores.values()
        return np.asarray(matrix, np.float32)

    @torch.inference_mode()
    def frame_scores(self, text_row, frames: np.ndarray) -> np.ndarray:
        """[T]: each frame's match with one caption (per-frame similarity; attention weights for M3)."""
        t = torch.as_tensor(np.asarray(text_row, np.float32).reshape(1, -1), device=self.device)
        if self.attention is not None:
            states = self._states([frames])
            return self.attention.weights(t, states.keys, states.lengths)[0, 0].float().cpu().numpy()
        return self.similarity(t, torch.as_tensor(as_rows(frames), device=self.device))[0].cpu().numpy()

    def ann_query(self, text: np.ndarray) -> np.ndarray:
        """Query rows whose inner product with stored rows is the score (``SearchMode.ANN`` only)."""
        if not self.inner_product:
            raise ConfigError(f"model {self.name!r} is searched by {self.search_mode}, not by inner product")
        return np.asarray(text, np.float32)

    # ---- similarity
    def _pair_similarity(self, c: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """S for paired embeddings c [n, 1, D] and v [n, m, D] -> [n, m]."""
        if self.similarity_name == "order":
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
        """Similarity matrix [N, M] of a text batch against a video batch (tensors, with gradients)."""
        return self.similarity(self.text_forward(text_batch), self.video_forward(video_batch))


    # ---- the model folder (reelsearch.models.folder)
    def parts(self) -> list:
        """Its config (with its recipe and vocabulary; a tail's or a bundled encoder's file relative to the folder),
        its weights, its tuned CNN tails, its tuned text tail and its adapted text encoder."""
        config = config_to_dict(self.config)
        tails = []
        for modality, recipe in config["features"]["video"].items():
            if recipe.get("options", {}).get("tail"):
                tails.append(CnnTail(modality, recipe["options"]["tail"]))
                recipe["options"]["tail"] = tails[-1].file
        encoder = []
        if self.config.features.text.tail:
            encoder.append(TextTail(self.config.features.text.tail))
            config["features"]["text"]["tail"] = TEXT_TAIL_FILE
        if self.config.features.text.adapted:
            encoder.append(TextEncoder(self.config.features.text.encoder))
            config["features"]["text"]["encoder"] = BUNDLED_NAME
        vocab = self.text_processor.words if isinstance(self.text_processor, VocabTextProcessor) else None
        state = {k: t.detach().cpu().contiguous() for k, t in self.state_dict().items()}
        document = {"format": FORMAT, "version": self.config.version, "config": config, "vocabulary": vocab}
        return [ConfigPart(CONFIG_FILE, document), Weights(state, FORMAT), *tails, *encoder]

    @classmethod
    def from_parts(cls, parts) -> JointModel:
        """The model of a folder's parts (``folder.Parts``); version-1 configs are read too."""
        config_part = parts.one("config")
        config_dict, vocab = _stored_config(config_part.of_format(FORMAT))
        tails = {tail.modality: tail.path for tail in parts.all("cnn-tail")}
        for modality, recipe in config_dict.get("features", {}).get("video", {}).items():
            if (recipe.get("options") or {}).get("tail"):  # tuned CNN weights in the folder (reelsearch tune-cnn)
                if modality not in tails:
                    raise DataFormatError(parts.manifest, f"no cnn-tail part for modality {modality!r}, whose recipe "
                                                          "names tuned CNN weights")
                recipe["options"]["tail"] = str(tails[modality])
        text = config_dict.get("features", {}).get("text", {})
        if text.get("kind") == "minilm" and text.get("encoder") and not is_tower(text["encoder"]):  # bundled adapted
            text["encoder"] = str(parts.one("text-encoder").path)
        if text.get("tail"):  # tuned text layers (reelsearch tune-text): its own, or its mixture's
            tail = parts.optional("text-tail")
            if tail is None:
                raise DataFormatError(parts.manifest, "no text-tail part, whose tuned text layers the text recipe "
                                                      "names (an expert of a mixture reads its mixture's: load the "
                                                      "mixture's folder)")
            text["tail"] = str(tail.path)
        config = config_from_dict(config_dict, str(config_part.path))
        processor = VocabTextProcessor(vocab, min_count=config.features.text.min_count) if vocab else None
        model = cls(config, processor)
        weights = parts.one("weights")
        try:
            model.load_state_dict(weights.tensors)
        except RuntimeError as exc:
            raise DataFormatError(weights.path, f"weights do not fit the config: {exc}") from exc
        return model


def _checked_processor(processor: TextProcessor | None, config: ModelConfig) -> TextProcessor:
    """``processor`` if it gives the text inputs the recipe names; ConfigError otherwise."""
    recipe = config.features.text
    if processor is None:
        raise ConfigError(f"model {config.name!r} learns its vocabulary: pass a VocabTextProcessor "
                          "(VocabTextProcessor.build(training captions))")
    if processor.kind != recipe.kind:
        raise ConfigError(f"model {config.name!r} reads {recipe.kind!r} text, got a {processor.kind!r} processor")
    if recipe.kind == "minilm" and getattr(processor, "layer", None) != recipe.layer:
        def name(k):
            return "the last layer" if k is None else f"layer {k}"

        raise ConfigError(f"model {config.name!r} reads MiniLM features after {name(recipe.layer)}; the text "
                          f"processor gives {name(processor.layer)} (MiniLMTextProcessor(layer=...))")
    if recipe.kind == "minilm":
        given = tower_key(processor.model_dir)
        wanted = tower_key(recipe.encoder)
        if given != wanted:
            raise ConfigError(f"model {config.name!r} reads MiniLM features of {wanted or 'the package model'}; the "
                              f"text processor runs {given or 'the package model'}")
        given = Path(processor.tail).resolve() if getattr(processor, "tail", None) else None
        wanted = Path(recipe.tail).resolve() if recipe.tail else None
        if given != wanted:
            raise ConfigError(f"model {config.name!r} reads MiniLM features with the tuned layers of "
                              f"{wanted or 'no tail'}; the text processor runs {given or 'none'}")
    return processor


def _stored_config(meta: dict) -> tuple[dict, list[str] | None]:
    """(version-2 config dict, vocabulary) of a config.json, version 1 (``text_processor`` state) or 2; a copy."""
    config = json.loads(json.dumps(meta["config"]))
    if meta.get("version", 1) >= 2:
        return config, meta.get("vocabulary")
    state = meta.get("text_processor") or {}
    if state.get("model_dir"):
        config.setdefault("model", {}).setdefault("text", {})["encoder_dir"] = state["model_dir"]
    return migrate_v1(config), state.get("words")
