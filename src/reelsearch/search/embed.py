"""From a media file to what the library index stores: the model's FeaturePipeline, then its embeddings.

Frames are decoded and their features extracted exactly as the model's feature recipe says (the same pipeline
made its training features), then the model embeds:

* the video row: ``encode_video`` of all frames (what ranking uses);
* one row per frame: each frame alone as a one-frame video (what the best moment and the UI strip use), with its
  thumbnail and its detail (how much it shows: near-uniform frames are no evidence of near-duplicates);
* with a querybank (``reelsearch.models.querybank``), the video's bias: minus its offset, added to every query's
  score of it at search time.

What a row holds (one joint space, experts' spaces side by side, or attention keys and values) is the model's
business (``reelsearch.models.interface``).
"""

from __future__ import annotations

import threading

import numpy as np

from reelsearch.index.media import EmbeddedMedia, frame_detail, make_thumbnail, shrink


class MediaEmbedder:
    """``embed(path) -> EmbeddedMedia``: the library index's ``embed_fn`` for one model."""

    def __init__(self, model, device: str | None = None):
        self.model = model
        self.pipeline = model.feature_pipeline(device)
        self._lock = threading.Lock()

    def describe(self) -> str:
        """What, besides the model weights, determines the embeddings (part of the index's model id): the feature
        recipe, and the querybank whose offsets become the videos' biases."""
        bank = getattr(self.model, "querybank", None)
        return self.pipeline.describe() + (f";querybank={bank.digest()}" if bank is not None else "")

    def __call__(self, path: str) -> EmbeddedMedia:
        media = self.pipeline.extract(path)
        with self._lock:
            emb = self.model.encode_video([media.features])
        small = [shrink(img) for img in media.images] if media.images is not None else []
        thumbs = [make_thumbnail(img) for img in small]
        detail = np.array([frame_detail(img) for img in small], np.float32) if small else None
        bank = getattr(self.model, "querybank", None)
        bias = -float(bank.video_offsets(emb.video[:1])[0]) if bank is not None else 0.0
        return EmbeddedMedia(emb.video[0], emb.frames[0], np.asarray(media.timestamps, np.float64), media.duration,
                             thumbs, bias, detail)
