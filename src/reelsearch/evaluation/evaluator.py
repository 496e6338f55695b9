"""The one retrieval evaluator: any model (joint or mixture) on one split's caption-video pairs.

``RetrievalEvaluator(pairs)(model)`` embeds the captions and videos through the model's own interface
(``encode_text``, ``encode_video``), scores them with each expert's similarity (``expert_scores``), fuses as the
model does, and returns ``{"t2v": {...}, "v2t": {...}, "RSum"}`` (``reelsearch.evaluation.retrieval_metrics``).
Trainer validation, ``reelsearch eval`` and ``reelsearch fuse`` use it; ``mc eval`` scores its questions with the same
model interface (``reelsearch.mc.model_scores``).
"""

from __future__ import annotations

import numpy as np

from reelsearch.evaluation.ranking import retrieval_metrics


def fused_metrics(model, scores: dict[str, np.ndarray], caption_to_video) -> dict:
    """Both-direction metrics of the model's fusion of per-expert [captions x videos] matrices (rank fusion ranks
    videos per caption for t2v and captions per video for v2t)."""
    t2v = retrieval_metrics(model.fuse(scores, axis=1), caption_to_video)
    if model.fusion_kind != "rank":
        return t2v
    return _per_direction(t2v, retrieval_metrics(model.fuse(scores, axis=0), caption_to_video))


def _per_direction(t2v: dict, v2t: dict) -> dict:
    """The t2v metrics of one result and the v2t metrics of another (each ranked on its own matrix), with RSum."""
    res = {"t2v": t2v["t2v"], "v2t": v2t["v2t"]}
    res["RSum"] = sum(res[d][k] for d in ("t2v", "v2t") for k in ("R@1", "R@5", "R@10"))
    return res


class RetrievalEvaluator:
    """Retrieval metrics of a model on ``pairs`` (a ``reelsearch.features.pairs.PairData`` whose video features
    are named as the model reads them); caption token features come from the cache."""

    primary_metric = "RSum"

    def __init__(self, pairs, batch_size: int = 512, progress: bool = False, querybank: bool = True):
        self.pairs, self.batch_size, self.progress = pairs, batch_size, progress
        self.querybank = querybank  # apply a model's querybank (reelsearch.models.querybank) when it has one
        self.last_scores: dict[str, np.ndarray] | None = None

    def _embed(self, model):
        """(caption rows, VideoEmbeddings) of the pairs through the model's own interface."""
        return (model.encode_text(self.pairs.captions, self.batch_size, cached=True),
                model.encode_video(self.pairs.video_items(), batch_size=self.batch_size))

    def expert_scores(self, model) -> dict[str, np.ndarray]:
        """Each expert's [captions x videos] similarity matrix."""
        self.last_scores = model.expert_scores(*self._embed(model))
        return self.last_scores

    def __call__(self, model) -> dict:
        bank = getattr(model, "querybank", None) if self.querybank else None
        if bank is None:
            return fused_metrics(model, self.expert_scores(model), self.pairs.cap2vid)
        text, video = self._embed(model)
        self.last_scores = model.expert_scores(text, video)
        t2v, v2t = bank.normalise(model.fuse(self.last_scores, axis=1), model.ann_query(text), video.video)
        res = _per_direction(retrieval_metrics(t2v, self.pairs.cap2vid), retrieval_metrics(v2t, self.pairs.cap2vid))
        res["querybank"] = bank.describe()
        return res
