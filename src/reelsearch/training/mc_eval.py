"""A model's accuracy on a multiple-choice test (``reelsearch mc eval``): each video gets the candidate caption the
model scores highest (Torabi et al. 2016, section 3)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.features.caches import DatasetSource
from reelsearch.io import atomic_write_text
from reelsearch.mc import mc_accuracy, read_mc_file
from reelsearch.mc.model_scores import model_scores
from reelsearch.models import load_model
from reelsearch.training.run import resolve_device

logger = logging.getLogger(__name__)


@dataclass
class MCResult:
    """Accuracy in percent over the ``items`` questions whose video has features; ``missing``: the others."""

    accuracy: float
    items: int
    missing: int

    def to_json(self) -> dict:
        return {"accuracy": round(self.accuracy, 4), "items": self.items, "missing": self.missing}

    def line(self) -> str:
        return f"accuracy {self.accuracy:.2f}% over {self.items:,} questions ({self.missing} skipped: no features)"


def evaluate_mc(checkpoint: str | Path, mc_file: str | Path, data: str, features: str | Path | None = None,
                protocol: str | None = None, choices: str | Path | None = None, batch_size: int = 64,
                device: str | None = None, progress: bool = True) -> MCResult:
    """Accuracy of the model at ``checkpoint`` on the questions of ``mc_file`` about videos of ``data``
    (``FORMAT:ROOT[:SPLIT]``; ``features``: a FeatureStore, default the feature caches, extracted on first use with
    the model's recipe); a question whose video is not there is skipped with a warning on stderr. ``choices``: write
    one JSON line per question there."""
    questions = read_mc_file(mc_file)
    try:
        model = load_model(checkpoint).to(resolve_device(device))
    except ReelsearchError as exc:
        raise ReelsearchError(f"{exc} (mc eval needs a trained model: a model directory with config.json + "
                              "model.safetensors, a training run's folder holding best/, or `default`)") from exc
    source, spec_split = DatasetSource.open(data, features, **({"protocol": protocol} if protocol else {}))
    by_id = {it.id: it for it in source.dataset.items(spec_split)}
    asked = [by_id[q.id] for q in questions if q.id in by_id]
    stores = source.stores(list({it.key: it for it in asked}.values()), model.recipes, device, progress=progress)
    usable, missing = [], []
    for q in questions:
        it = by_id.get(q.id)
        ok = it is not None and all(store.has(name, it.key) for store, name in stores.values())
        (usable if ok else missing).append(q)
    for q in missing:
        where = "the dataset" if q.id not in by_id else f"the features ({', '.join(stores)})"
        logger.warning("%s: not in %s; question skipped", q.id, where)
    if not usable:
        raise ReelsearchError(f"none of the {len(questions)} questions of {mc_file} has its video's features")

    def video_features(ids: list[str]) -> list[dict]:
        return [{n: np.asarray(store.get_raw(name, by_id[i].key), np.float32) for n, (store, name) in stores.items()}
                for i in ids]

    scores = model_scores(model, usable, video_features, batch_size, progress=progress)
    table = {(q.id, q.candidates): s for q, s in zip(usable, scores, strict=True)}
    accuracy, records = mc_accuracy(lambda qid, cands: table[qid, tuple(cands)], usable)
    if choices is not None:
        atomic_write_text(choices, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return MCResult(accuracy, len(usable), len(missing))
