"""Score multiple-choice candidates with any model (joint or mixture) through its own interface."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np
from tqdm import tqdm

from reelsearch.mc.mcfile import N_CHOICES, Question


def model_scores(model, questions: Sequence[Question], video_features: Callable[[list[str]], list[dict]],
                 batch_size: int = 64, progress: bool = True) -> list[list[float]]:
    """The model's similarity of each question's five candidates to its video, question by question.

    ``video_features(ids)`` gives each question's video features (dicts {feature name: [T, D]}). Captions and
    videos are encoded in batches of ``batch_size`` questions; of each expert's [5B, B] similarity matrix only each
    question's own five entries are kept and fused, so rank fusion ranks a question's five candidates among
    themselves.
    """
    out: list[list[float]] = []
    starts = range(0, len(questions), batch_size)
    for s in tqdm(starts, desc="scoring choices", unit="batch", disable=not progress, file=sys.stderr):
        chunk = questions[s : s + batch_size]
        text = model.encode_text([c for q in chunk for c in q.candidates])
        video = model.encode_video(video_features([q.id for q in chunk]), batch_size=batch_size,
                                   frames=model.is_pairwise)
        sims = model.expert_scores(text, video)  # {expert: [5B, B]}
        for i in range(len(chunk)):
            rows = slice(i * N_CHOICES, (i + 1) * N_CHOICES)
            own = {k: np.asarray(m)[rows, i : i + 1] for k, m in sims.items()}
            out.append(model.fuse(own, axis=0)[:, 0].tolist())
    return out
