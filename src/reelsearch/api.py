"""The public Python API (``import reelsearch``), in the style of sentence-transformers and open_clip::

    import reelsearch
    model = reelsearch.load("default")                      # the bundled model, or a model/run directory
    text = model.encode_text(["a dog catches a frisbee"])   # numpy [1, D]
    video = model.encode_video(["clip.mp4"])                # decoded + extracted with the model's own recipe
    scores = model.score(text, video)                       # [1, 1], the model's similarity
    reelsearch.list_models()                                # architectures (named configs); describe_models()
    reelsearch.list_pretrained()                            # weights that ship with the package, with their metrics
    with reelsearch.Searcher("my-index") as s: s.index(["videos/"]); s.search("a dog", k=5)
    reelsearch.train("scde", "flickr8k:data/flickr8k", "runs/scde", overrides=["train.epochs=5"])
    reelsearch.cache_info(); reelsearch.clear_cache(["onnx"], older_than_days=30)   # the cache folder

Everything returns numpy arrays and runs in inference mode; see docs/python-api.md.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from reelsearch.config import MixtureConfig
from reelsearch.models import load_model, registry
from reelsearch.towers.known import known_table
from reelsearch.training import run


def load(name_or_path: str | Path = "default", device: str = "cpu", text_encoder: str = "float32"):
    """A saved model, ready to use: ``"default"`` (the bundled one), a pretrained name from ``list_pretrained()``,
    a model directory, a training run's directory (its ``best/``) or ``"hf:NAME_OR_DIR"`` (a CLIP- or SigLIP-family
    checkpoint, zero-shot: ``reelsearch.models.hf``). Returns a JointModel or MixtureOfExperts.

    ``text_encoder``: what ``encode_text`` runs (``model.use_text_encoder``): "float32" MiniLM (as trained), "int8"
    MiniLM (faster on a CPU, embeddings slightly off float32), "static" (the model's static text encoder, the
    fastest) or "student" (its text tower cut short; docs/search.md)."""
    pretrained = {p["name"]: p for p in list_pretrained()}
    if str(name_or_path) in pretrained and not Path(name_or_path).exists():
        name_or_path = pretrained[str(name_or_path)]["path"]
    model = load_model(name_or_path, map_location=device)
    if text_encoder != "float32":
        model.use_text_encoder(text_encoder)
    return model


def list_models() -> list[str]:
    """The named architectures ``create_model`` and ``reelsearch train`` accept (``describe_models`` for details)."""
    return registry.list_models()


def describe_models() -> list[dict]:
    """Each named architecture: name, paper, kind (joint | mixture) and the video modalities it reads."""
    out = []
    for name in list_models():
        cfg = registry.model_config(name)
        out.append({"name": name, "paper": cfg.paper, "kind": "mixture" if isinstance(cfg, MixtureConfig) else "joint",
                    "modalities": cfg.modalities})
    return out


def list_pretrained() -> list[dict]:
    """The weights that ship with the package: name, architecture, path, description and measured metrics."""
    assets = Path(str(files("reelsearch") / "assets"))
    entries = json.loads((assets / "pretrained.json").read_text(encoding="utf-8"))
    return [{**e, "path": str(assets / e["path"])} for e in entries]


def models_table() -> str:
    """The named architectures (``describe_models``), the pretrained models (``list_pretrained``) and the hub
    checkpoints known to run (``reelsearch.towers.known``), as ``reelsearch models`` lists them."""
    archs, pretrained = describe_models(), list_pretrained()
    lines = ["architectures (reelsearch train NAME ...):"]
    width = max(len(a["name"]) for a in archs)
    mods = max(len(", ".join(a["modalities"])) for a in archs)
    lines += [f"  {a['name']:<{width}}  {a['kind']:<7}  {', '.join(a['modalities']):<{mods}}  {a['paper']}"
              for a in archs]
    lines.append("\npretrained (--model NAME, reelsearch eval NAME ...):")
    for p in pretrained:
        metrics = "; ".join(f"{split}: " + ", ".join(f"{k} {v}" for k, v in m.items())
                            for split, m in p.get("metrics", {}).items())
        lines.append(f"  {p['name']}  ({p['architecture']})  {metrics}\n    {p['description']}")
    lines.append("\nopen towers (--model hf:NAME, fetched into the Hugging Face cache on first use; any CLIPModel or "
                 "SiglipModel checkpoint, or hf:FOLDER, runs too; docs/models.md):")
    return "\n".join(lines + known_table())


def train(config, data, out, **options) -> dict:
    """Train ``config`` (a named model, a YAML path or a config) on ``data`` ("FORMAT:ROOT", or a list of them) into
    ``out``; options as ``reelsearch.training.run.train`` (``overrides``, ``features``, ``device``, ...)."""
    return run.train(config, data, out, **options)


def evaluate(model, data: str, split: str | None = None, **options) -> dict:
    """Both-direction retrieval metrics of ``model`` (loaded, or a path / "default") on a dataset split."""
    return run.evaluate(model, data, split=split, **options)
