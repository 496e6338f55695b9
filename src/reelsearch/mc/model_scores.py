"""Score multiple-choice candidates with a trained joint model and a FeatureStore of the videos' features."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.mc.mcfile import N_CHOICES, Question


def load_checkpoint(path: str | Path):
    """A saved model (a model directory, a training run's folder with ``best/``, or "default"), in eval mode."""
    import reelsearch.models as models

    loader = getattr(models, "load_model", None) or models.JointModel.load
    try:
        return loader(path)
    except ReelsearchError as exc:
        raise ReelsearchError(f"{exc} (mc eval needs a trained checkpoint: a model directory with config.json + "
                              "model.safetensors, or a training run's folder holding best/)") from exc


def model_modalities(model) -> list[str]:
    """Video modalities a model reads (a JointModel's, or the union over a mixture's experts)."""
    if hasattr(model, "modalities"):
        return list(model.modalities)
    experts = getattr(model, "experts", None)
    if experts is not None:
        return sorted({m for e in experts.values() for m in e.modalities})
    raise ReelsearchError(f"cannot tell which video features {type(model).__name__} needs")


def store_video_fn(store, modalities: Sequence[str], key_of: dict[str, str]) -> Callable[[list[str]], dict]:
    """``video_batch(item_ids)`` built from ``store`` (zero-padded per modality, as the trainer does)."""
    from reelsearch.train.data import pad_sequences

    def video_batch(ids: list[str]) -> dict:
        out = {}
        for mod in modalities:
            feats, lengths = pad_sequences([np.array(store.get_raw(mod, key_of[i]), dtype=np.float32)
                                            for i in ids])
            out[mod] = {"feats": feats, "lengths": lengths}
        if len(out) == 1:
            return next(iter(out.values()))
        return {"feats": {m: b["feats"] for m, b in out.items()}, "lengths": {m: b["lengths"] for m, b in out.items()}}

    return video_batch


def model_scores(model, questions: Sequence[Question], video_batch: Callable[[list[str]], dict],
                 batch_size: int = 64, progress: bool = True) -> list[list[float]]:
    """The model's similarity of each question's five candidates to its video, question by question.

    Captions and videos are encoded in batches of ``batch_size`` questions; of the [5B, B] similarity matrix only
    each question's own five entries are kept. A MixtureOfExperts fuses its experts' scores per question, so rank
    fusion ranks a question's five candidates among themselves.
    """
    import torch
    from tqdm import tqdm

    out: list[list[float]] = []
    starts = range(0, len(questions), batch_size)
    with torch.inference_mode():
        for s in tqdm(starts, desc="scoring choices", unit="batch", disable=not progress, file=sys.stderr):
            chunk = questions[s : s + batch_size]
            captions = [c for q in chunk for c in q.candidates]
            text = model.encode_captions(captions)
            video = model.encode_video(video_batch([q.id for q in chunk]))
            rows = torch.arange(len(captions))
            if hasattr(model, "expert_similarities"):  # a mixture: fuse each question's own five scores
                sims = model.expert_similarities(text, video)  # {expert: [5B, B]}
                own = {k: m[rows, rows // N_CHOICES].view(len(chunk), N_CHOICES, 1) for k, m in sims.items()}
                for i in range(len(chunk)):  # axis=0: rank fusion ranks the five captions of the video
                    out.append(model.fuse({k: o[i] for k, o in own.items()}, axis=0)[:, 0].tolist())
                continue
            sim = model.similarity(text, video)  # [5B, B]
            own_scores = sim[rows, rows // N_CHOICES].float().cpu().view(len(chunk), N_CHOICES)
            out.extend(own_scores.tolist())
    return out
