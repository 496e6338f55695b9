"""Metrics as JSON and as a printed table."""

from __future__ import annotations

import json
import re
from pathlib import Path

from reelsearch.evaluation.ranking import METRIC_KEYS
from reelsearch.io import atomic_write_text

_FORMATS = {"MedR": "{:.1f}", "MeanR": "{:.1f}", "mAP": "{:.4f}"}


def to_json(results: dict, path: str | Path | None = None, indent: int | None = 2) -> str:
    """``results`` as JSON text; also written (atomically) to ``path`` when given."""
    text = json.dumps(results, indent=indent)
    if path is not None:
        atomic_write_text(path, text + "\n")
    return text


def result_file_name(results: dict, querybank: bool = True) -> str:
    """Where ``reelsearch eval`` saves a checkpoint's ``results`` by default: ``eval-MODEL-FORMAT-SPLIT.json``, with
    ``-int8`` / ``-static`` / ``-student`` for captions encoded by int8 MiniLM / the static / the student text
    encoder and ``-raw`` for a model's raw scores (``querybank`` False)."""
    model = re.sub(r"[^A-Za-z0-9_.-]+", "_", results.get("model") or "model")
    encoder = results.get("text_encoder", "float32")
    precision = "" if encoder == "float32" else f"-{encoder}"
    precision += "" if querybank else "-raw"  # --no-querybank: not what the model ranks by
    return f"eval-{model}-{results['data'].split(':', 1)[0]}-{results['split']}{precision}.json"


def _rows(results: dict, label: str = "") -> list[tuple[str, dict]]:
    if all(k in results for k in METRIC_KEYS):
        return [(label or "all", results)]
    rows = []
    for key, value in results.items():
        if isinstance(value, dict):
            rows += _rows(value, f"{label} {key}".strip())
    return rows


def format_table(results: dict) -> str:
    """A fixed-width table: one row per direction (or per named result), then RSum when present.

    Accepts ``rank_metrics`` output, ``retrieval_metrics`` output, or a dict of names -> either of those.
    """
    rows = _rows(results)
    if not rows:
        raise ValueError("no metrics to format: expected keys " + ", ".join(METRIC_KEYS))
    width = max(9, *(len(label) for label, _ in rows))
    header = f"{'':<{width}}" + "".join(f"{k:>9}" for k in METRIC_KEYS)
    lines = [header]
    for label, m in rows:
        cells = "".join(f"{_FORMATS.get(k, '{:.2f}').format(m[k]):>9}" for k in METRIC_KEYS)
        lines.append(f"{label:<{width}}{cells}")
    rsums = _rsums(results)
    for label, value in rsums:
        lines.append(f"{(label + ' RSum').strip():<{width}}{value:>9.2f}")
    return "\n".join(lines)


def _rsums(results: dict, label: str = "") -> list[tuple[str, float]]:
    out = []
    if isinstance(results.get("RSum"), (int, float)):
        out.append((label, float(results["RSum"])))
    for key, value in results.items():
        if isinstance(value, dict) and not all(k in value for k in METRIC_KEYS):
            out += _rsums(value, f"{label} {key}".strip())
    return out
