"""A small, learnable caption-video dataset (manifest + FeatureStore) for trainer tests.

Each of K concepts has its own words (real English, all in GloVe) and a prototype frame feature; a video of a
concept is a few frames of prototype + noise, captioned with the concept's words in varying templates.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SUBJECTS = ["dog", "man", "woman", "child", "cat", "horse", "bird", "girl", "boy", "team"]
ACTIONS = ["runs", "jumps", "swims", "climbs", "sleeps", "eats", "dances", "sings", "rides", "throws"]
PLACES = ["beach", "street", "forest", "snow", "water", "field", "stage", "kitchen", "park", "mountain"]


#: What the synthetic features are recorded as (a feature recipe no extractor can remake: "precomputed").
SYNTHETIC = "synthetic"


def synthetic_recipe(dim: int = 32):
    from reelsearch.features.importers import imported_recipe

    return imported_recipe(SYNTHETIC, dim)


def make_dataset(root: Path, n_train: int = 240, n_val: int = 60, dim: int = 32, seed: int = 0,
                 max_frames: int = 5, distinct: bool = False) -> tuple[Path, Path]:
    """Write ``root/manifest.jsonl`` and the FeatureStore ``root/features``; return (manifest, store).
    ``max_frames=1`` makes images (one-frame videos). ``distinct``: no two videos share a (subject, action, place)
    and every caption names all three, so no two captions are the same (identical captions score exactly alike,
    ties that rounding breaks one way or the other)."""
    from reelsearch.features.store import FeatureStore

    rng = np.random.default_rng(seed)
    k = len(SUBJECTS)
    protos = {(s, a): rng.normal(size=dim) for s in range(k) for a in range(k)}
    root.mkdir(parents=True, exist_ok=True)
    store = FeatureStore(root / "features")
    lines = []
    combos = rng.permutation(k ** 3)[: n_train + n_val] if distinct else None
    with store.writer("appearance", dim, dtype="float32", recipe=synthetic_recipe(dim)) as w:
        for i in range(n_train + n_val):
            s, a, p = rng.integers(k), rng.integers(k), rng.integers(k)
            if distinct:
                s, a, p = np.unravel_index(combos[i], (k, k, k))
            t = int(rng.integers(1, max_frames + 1))
            feats = protos[(s, a)] + 0.3 * rng.normal(size=(t, dim)) + 0.5 * np.eye(dim)[p % dim]
            key = f"v{i:04d}"
            w.add(key, feats.astype(np.float32))
            caps = [f"a {SUBJECTS[s]} {ACTIONS[a]} near the {PLACES[p]}", f"the {SUBJECTS[s]} {ACTIONS[a]}"]
            if distinct:
                caps[1] += f" in the {PLACES[p]}"
            lines.append({"id": key, "path": None, "captions": caps, "split": "train" if i < n_train else "val"})
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return manifest, root / "features"


def small(name: str, dim: int = 32, joint: int = 48, epochs: int | None = None, **more) -> dict:
    """Overrides (dotted config paths) shrinking a named model for tests: synthetic ``dim``-d appearance features,
    small hidden and joint sizes; ``epochs`` and ``more`` (``train__lr=...``) are added."""
    from reelsearch.config.typed import to_dict
    from reelsearch.models import model_config

    cfg = model_config(name)
    over = {"features.video.appearance": to_dict(synthetic_recipe(dim)), "model.video.projection.dim": joint,
            "model.text.projection.dim": joint, "train.batch_size": 32, "train.checkpoint_every": 3}
    if cfg.model.text.encoder.hidden_size:
        over["model.text.encoder.hidden_size"] = joint
    if cfg.model.video.encoder.hidden_size:
        over["model.video.encoder.hidden_size"] = 16
    if epochs is not None:
        over["train.epochs"] = epochs
    over.update({k.replace("__", "."): v for k, v in more.items()})
    return over


def stop_loss_at(task, monkeypatch, stop_at: int | None) -> None:
    """Make ``task.loss`` raise KeyboardInterrupt at its ``stop_at``-th call (0-based; None: never): a run killed
    in the middle of an epoch."""
    calls, loss = iter(range(1 << 30)), task.loss

    def stopping_loss(batch, epoch):
        if next(calls) == stop_at:
            raise KeyboardInterrupt
        return loss(batch, epoch)

    monkeypatch.setattr(task, "loss", stopping_loss)
