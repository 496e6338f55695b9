"""A retrieval evaluator object in the sentence-transformers style: call it, get a flat dict of named metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reelsearch.evaluation.ranking import DEFAULT_MEMORY_BUDGET_MB, retrieval_metrics
from reelsearch.evaluation.report import to_json
from reelsearch.evaluation.sources import EmbeddingScores


class RetrievalEvaluator:
    """Caption <-> video retrieval on a fixed ground truth (``caption_to_video[caption] = video index``).

    ``evaluator(sims)`` or ``evaluator(text_embeddings=T, video_embeddings=V)`` returns
    ``{"<name>_t2v_R@1": ..., ..., "<name>_RSum": ...}``; the nested result is kept in ``last_results`` and, with
    ``output_path``, written to ``<output_path>/<name>_results.json``. ``primary_metric`` is RSum, the model
    selection criterion of Mithun et al. 2018 §4.2 ("the best sum of recalls on the validation set").
    """

    primary_metric = "RSum"

    def __init__(
        self,
        name: str,
        caption_to_video,
        *,
        chunk_size: int | None = None,
        memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
        device: str | None = None,
    ):
        self.name = name
        self.caption_to_video = np.asarray(caption_to_video)
        self.chunk_size = chunk_size
        self.memory_budget_mb = memory_budget_mb
        self.device = device
        self.last_results: dict | None = None

    def __call__(
        self, sims=None, *, text_embeddings=None, video_embeddings=None, output_path: str | Path | None = None
    ) -> dict[str, float]:
        if (sims is None) == (text_embeddings is None or video_embeddings is None):
            raise ValueError("give either sims or both text_embeddings and video_embeddings")
        if sims is None:
            sims = EmbeddingScores(text_embeddings, video_embeddings)
        results = retrieval_metrics(
            sims, self.caption_to_video, self.chunk_size, self.memory_budget_mb, device=self.device
        )
        self.last_results = results
        if output_path is not None:
            to_json(results, Path(output_path) / f"{self.name}_results.json")
        flat = {f"{self.name}_{d}_{k}": v for d in ("t2v", "v2t") for k, v in results[d].items()}
        flat[f"{self.name}_RSum"] = results["RSum"]
        return flat
