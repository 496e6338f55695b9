"""The one interface of every reelsearch model (a ``JointModel`` or a ``MixtureOfExperts``), numpy in and out.

    model.modalities                        video modalities it reads
    model.recipes                           {modality: ModalityRecipe} of its inputs (a mixture: the union)
    model.encode_text(texts) -> [N, Dt]     caption embeddings (inference mode, batched)
    model.encode_video(videos) -> VideoEmbeddings
                                            ``videos``: media paths (decoded and extracted by the model's
                                            FeaturePipeline) or feature dicts {modality: [T, D]}
    model.score(text, video) -> [N, M]      the model's own similarity (cosine, order, frame attention, fusion)
    model.expert_scores(text, video)        {expert: [N, M]} (a joint model is its own single expert)
    model.frame_scores(text_row, frames)    [T]: how well each frame alone matches one caption (the best moment)
    model.use_text_encoder(name)            what encode_text runs: "float32" or "int8" MiniLM, the "static" text
                                            encoder (``model.static_text``) or the "student" one
                                            (``model.student_text``); ``model.text_encoder_name`` says which
    model.use_int8_text(enabled)            use_text_encoder("int8" or "float32")
    model.querybank, model.card             its querybank (or None) and model card text (or None)
    model.static_text                       its static text encoder (or None; ``reelsearch distill-text``)
    model.student_text                      its student text encoder, a tower cut short (or None; ``reelsearch
                                            distill-text --student``)
    model.calibration                       its scores' confidence curve (or None; ``reelsearch calibrate``);
                                            ``model.student_calibration``: its student's own (``calibrate
                                            --text-encoder student``), what a search by the student reads
    model.save(dir), Model.load(dir)        the model folder with every part (``reelsearch.models.folder``)
    model.search_mode                       how an index serves it: a :class:`SearchMode`, decided when the model is
                                            built or loaded
    model.inner_product                     whether the score is that inner product (``SearchMode.ANN``)

Rows: a video's row ``VideoEmbeddings.video[i]`` and its frame rows ``frames[i]`` are what an index stores; for a
mixture they hold the experts' rows side by side; for a frame-attention model (Torabi M3) a frame row is the
frame's attention key and projected value, and the video row their mean (bookkeeping only).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from reelsearch.errors import EMPTY_QUERY, ConfigError, DataFormatError, QueryError
from reelsearch.features.pipeline import FeaturePipeline

from .embeddings import SearchMode, VideoEmbeddings
from .folder import read_model, write_model

#: What ``encode_text`` may run (``use_text_encoder``): MiniLM in float32 or int8, the static text encoder, or the
#: student (a tower cut short).
TEXT_ENCODERS = ("float32", "int8", "static", "student")
#: The fast text encoders a model may carry as parts (attribute, encoder), fastest first: what ``auto`` tries before
#: float32 MiniLM (docs/search.md, "Choosing the text encoder").
FAST_ENCODERS = (("static_text", "static"), ("student_text", "student"))


class EmbeddingModel:
    """What JointModel and MixtureOfExperts share on top of their own ``_embed_feature_batch``."""

    querybank = None  # a QueryBank (reelsearch.models.querybank): a part of the model, saved and loaded with it
    calibration = None  # a Calibration (reelsearch.models.parts): its scores' confidence, saved and loaded with it
    card: str | None = None  # the model card (MODEL_CARD.md), saved and loaded with it
    static_text = None  # a StaticText (reelsearch.models.static_text): saved and loaded with it
    student_text = None  # a StudentText (reelsearch.models.student_text): saved and loaded with it
    text_encoder_name = "float32"  # what encode_text runs (TEXT_ENCODERS; ``use_text_encoder``)

    def encode_text(self, texts, batch_size: int = 256, cached: bool = False) -> np.ndarray:
        """Caption embeddings [N, D] (float32, each expert's rows of unit norm), by the model's text tower or, after
        ``use_text_encoder("static")`` / ``("student")``, by its static / student text encoder. ``cached``: read (and
        keep) the captions' MiniLM token features in the cache (``reelsearch.features.caches.caption_features``), as
        evaluation does for captions it sees every epoch. QueryError for an empty or blank text (as a search's empty
        query)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        blank = next((i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()), None)
        if blank is not None:
            raise QueryError(EMPTY_QUERY if len(texts) == 1 else f"{EMPTY_QUERY} (text {blank + 1} of {len(texts)})")
        if self.text_encoder_name == "static":
            return self.static_text.encode(texts)
        if self.text_encoder_name == "student":
            return self.student_text.encode(self, texts, batch_size, cached)
        return self._encode_text(texts, batch_size, cached)

    @property
    def serving_text_encoder(self) -> str:
        """The text encoder ``reelsearch serve`` runs unless told: the fastest of the model's fast text encoders
        (``FAST_ENCODERS``: static, then student) whose measured dev RSum is within 3 of float32 MiniLM's (their
        ``serves()``), else float32 MiniLM (docs/search.md, "Choosing the text encoder"; int8 is never measured)."""
        for attribute, name in FAST_ENCODERS:
            part = getattr(self, attribute, None)
            if part is not None and part.serves():
                return name
        return "float32"

    @property
    def student_calibration(self):
        """The student text encoder's own calibration (None without one): what a search whose query it encodes
        reads (``reelsearch.models.calibration.search_calibration``)."""
        return getattr(self.student_text, "calibration", None)

    def save(self, directory: str | Path) -> Path:
        """Save the model with every part (weights, config, CNN tails, text encoder, querybank, card) as a model
        folder (``reelsearch.models.folder``); returns ``directory``."""
        return write_model(self, directory)

    @classmethod
    def load(cls, directory: str | Path, map_location: str | torch.device = "cpu"):
        """The model saved in ``directory`` with every part, in eval mode (``load_model`` also takes a training
        run's folder or ``"default"``); DataFormatError when the folder holds another kind of model."""
        model = read_model(directory, map_location)
        if not isinstance(model, cls):
            raise DataFormatError(directory, f"holds a {type(model).__name__}, not a {cls.__name__} (load_model "
                                             "loads either)")
        return model

    @property
    def inner_product(self) -> bool:
        """Whether the score is the inner product of ``ann_query``'s rows with the stored rows (an ANN index serves
        it, a querybank normalises it)."""
        return self.search_mode is SearchMode.ANN

    def feature_pipeline(self, device: str | None = None):
        """The FeaturePipeline of this model's recipe (decode + extract), created once."""
        pipe = getattr(self, "_pipeline", None)
        if pipe is None:
            pipe = FeaturePipeline(self.recipes, device=device)
            object.__setattr__(self, "_pipeline", pipe)
        return pipe

    def encode_video(self, videos, batch_size: int = 16, progress: bool = False,
                     frames: bool = True) -> VideoEmbeddings:
        """Video embeddings of media paths (decoded and extracted with the model's recipe) or feature dicts.

        ``frames=False`` skips the per-frame rows where ranking does not need them (their list holds None).
        A path that cannot be decoded raises a MediaError naming it; use ``reelsearch index`` to skip bad files.
        """
        if isinstance(videos, (str, Path, dict)):
            videos = [videos]
        videos = list(videos)
        pieces, batch = [], []
        bar = tqdm(total=len(videos), desc="embedding videos", unit="video", disable=not progress, leave=False)
        for item in videos:
            if isinstance(item, (str, Path)):
                item = self.feature_pipeline().extract(item).features
            elif not isinstance(item, dict):
                raise ConfigError(f"encode_video takes media paths or feature dicts, got {type(item).__name__}")
            batch.append(item)
            if len(batch) >= batch_size:
                pieces.append(self._embed_feature_batch(batch, frames))
                bar.update(len(batch))
                batch = []
        if batch:
            pieces.append(self._embed_feature_batch(batch, frames))
            bar.update(len(batch))
        bar.close()
        if not pieces:
            raise ConfigError("encode_video: no videos given")
        return VideoEmbeddings.concat(pieces)

    def use_text_encoder(self, name: str) -> str:
        """Encode text with ``name`` (``TEXT_ENCODERS``): "float32" or "int8" MiniLM features for every expert, or
        the model's static or student text encoder ("auto": ``serving_text_encoder``); returns what now runs
        ("float32" where int8 cannot: GloVe / vocabulary text, or a warning says why). ConfigError for another name,
        or "static" / "student" on a model without that part. A run-time choice: the weights, the recipe, the
        fingerprint and the querybank stay as they are; a search reads the calibration of what encodes its query
        (``reelsearch.models.calibration.search_calibration``)."""
        if name == "auto":
            name = self.serving_text_encoder
        if name not in TEXT_ENCODERS:
            raise ConfigError(f"unknown text encoder {name!r}; one of auto, {', '.join(TEXT_ENCODERS)}")
        for attribute, fast in FAST_ENCODERS:
            if name == fast and getattr(self, attribute, None) is None:
                raise ConfigError(f"model {getattr(self, 'name', '')!r} has no {fast} text encoder: make one with "
                                  f"`reelsearch distill-text{' --student' if fast == 'student' else ''}`")
        processors = [e.text_processor for e in self.experts.values()]
        int8 = any([p.use_int8(name == "int8") for p in processors if hasattr(p, "use_int8")])
        fast = name in {encoder for _, encoder in FAST_ENCODERS}
        self.text_encoder_name = name if fast else "int8" if int8 else "float32"
        return self.text_encoder_name

    def use_int8_text(self, enabled: bool = True) -> bool:
        """``use_text_encoder("int8")`` (``enabled``) or ``use_text_encoder("float32")``; returns whether int8 now
        runs."""
        return self.use_text_encoder("int8" if enabled else "float32") == "int8"

    def fingerprint(self) -> str:
        """Short hash of every weight and of the feature recipes, a tuned text tail's identity included (changes
        whenever the embeddings would)."""
        h = hashlib.sha256()
        for key, tensor in sorted(self.state_dict().items()):
            h.update(key.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        for name, recipe in sorted(self.recipes.items()):
            h.update(f"{name}:{recipe.key}".encode())
        for name, expert in sorted(self.experts.items()):
            text = expert.config.features.text
            if text.tail:  # (models without one keep the fingerprint they always had)
                h.update(f"text:{name}:{text.weights}".encode())
        return h.hexdigest()[:12]
