"""Distilling a model's static text encoder (`reelsearch distill-text`; ``reelsearch.models.static_text``), and
giving a model the student text encoder a tune-text run distilled from it (`reelsearch distill-text --student`;
``reelsearch.models.student_text``).

1. Every token of the text tower's WordPiece vocabulary runs alone (``[CLS] token [SEP]``) through the tower and each
   expert's text side: one row of the model's joint space per token.
2. PCA reduces the rows to ``dims`` (centred); with ``sif`` = a > 0 each row is scaled by its SIF weight
   a / (a + p(token)), p counted over the training captions' tokens (a token they never hold weighs 1). Off by
   default: on Flickr8k it cost the bundled model 58 dev RSum at a = 1e-3 (docs/benchmarks.md, "A static text
   encoder"): a caption corpus's most frequent tokens are its content words ("dog", "man", "water").
3. Re-fit: a ridge regression from the mean of a training caption's rows to the full model's embedding of it
   (``model.encode_text``, float32), with a bias.

Only models whose experts read one MiniLM tower's last-layer token features (the bundled default, ``-linear``
models) are distilled; another text recipe is refused.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.features.caches import DatasetSource
from reelsearch.io import atomic_write_json, read_text
from reelsearch.models import load_model
from reelsearch.models.checkpoint import derived_run
from reelsearch.models.static_text import StaticText, load_tokenizer
from reelsearch.models.student_text import STORES, student_of
from reelsearch.training.run import derived_report_text, evaluate_model

logger = logging.getLogger(__name__)

REPORT_FILES = {"static_text": "static-text.json", "student_text": "student-text.json"}
SIF = 0.0  # SIF's a (tokens far more frequent than a weigh less); 0: no frequency weighting
RIDGE = 1e-3  # ridge penalty of the map, relative to the mean diagonal of X'X
BATCH = 512  # vocabulary tokens run through the tower at a time


def tower_of(model):
    """The one MiniLMEncoder that every expert of ``model`` reads last-layer token features of; ConfigError
    otherwise."""
    processors = [e.text_processor for e in model.experts.values()]
    if not all(getattr(p, "kind", "") == "minilm" and p.layer is None for p in processors):
        raise ConfigError(f"model {model.name!r}: a static text encoder is distilled from a MiniLM text tower's "
                          "last-layer token features; this model reads other text features")
    if len({id(p.encoder) for p in processors}) != 1:
        raise ConfigError(f"model {model.name!r}: its experts read different text towers")
    encoder = processors[0].encoder
    if not (encoder.folder / "tokenizer.json").is_file():
        raise ConfigError(f"{encoder.folder}: the text tower has no tokenizer.json")
    return encoder


def token_rows(model, encoder, tokens: np.ndarray, vocab_size: int, cls: int, sep: int,
               progress: bool = True) -> np.ndarray:
    """[V, D]: each token id of ``tokens`` alone through the tower and the model's text side (experts side by side);
    the rows of the other ids are zero."""
    out = np.zeros((vocab_size, model.dim), np.float32)
    starts = range(0, len(tokens), BATCH)
    for start in tqdm(starts, desc="vocabulary", unit="batch", disable=not progress):
        ids = np.asarray(tokens[start:start + BATCH], np.int64)
        rows = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        states = list(encoder.id_features(rows))
        with torch.inference_mode():
            parts = [e.text_forward(e.text_processor.from_features(states)).float().cpu().numpy()
                     for e in model.experts.values()]
        out[ids] = np.concatenate(parts, axis=1)
    return out


def principal_components(rows: np.ndarray, dims: int) -> np.ndarray:
    """[V, dims]: ``rows`` centred and projected on their ``dims`` principal axes (eigenvectors of the [D, D]
    scatter matrix, largest first; cheaper than an SVD of the [V, D] rows)."""
    centred = rows - rows.mean(0)
    scatter = centred.T.astype(np.float64) @ centred.astype(np.float64)
    _, vectors = np.linalg.eigh(scatter)
    return (centred @ vectors[:, ::-1][:, :dims]).astype(np.float32)


def mean_rows(table: np.ndarray, ids: list[np.ndarray]) -> np.ndarray:
    """[N, d]: the mean of each caption's token rows."""
    out = np.zeros((len(ids), table.shape[1]), np.float32)
    for i, row in enumerate(ids):
        if len(row):
            out[i] = table[row].mean(axis=0)
    return out


def ridge_fit(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> tuple[np.ndarray, np.ndarray]:
    """(map [d, D], bias [D]) minimising |x map + bias - y|^2 + ridge * mean(diag(x'x)) * |map|^2 (float64)."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    mx, my = x.mean(0), y.mean(0)
    xc = x - mx
    gram = xc.T @ xc
    gram[np.diag_indices_from(gram)] += ridge * np.trace(gram) / len(gram)
    proj = np.linalg.solve(gram, xc.T @ (y - my))
    return proj.astype(np.float32), (my - mx @ proj).astype(np.float32)


def distill(model, captions: list[str], dims: int = 256, sif: float = SIF, ridge: float = RIDGE, source: str = "",
            progress: bool = True, vocabulary: list[int] | None = None) -> StaticText:
    """The static text encoder of ``model`` (see the module docstring), re-fitted on ``captions``; ``vocabulary``:
    the token ids run through the tower (default: all; the others' rows are zero: a quick trial's)."""
    if not captions:
        raise ReelsearchError("no training captions to distil the static text encoder on")
    was = model.text_encoder_name
    model.use_text_encoder("float32")
    try:
        encoder = tower_of(model)
        tokenizer_json = read_text(encoder.folder / "tokenizer.json")
        tokenizer = load_tokenizer(tokenizer_json)
        vocab = max(tokenizer.get_vocab().values()) + 1
        tokens = np.arange(vocab) if vocabulary is None else np.unique(np.asarray(vocabulary, np.int64))
        cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        if cls is None or sep is None:
            raise ConfigError(f"{encoder.folder}: a tokenizer without [CLS] and [SEP] (not BERT's WordPiece)")
        if not 1 <= dims <= model.dim:
            raise ConfigError(f"dims must be 1..{model.dim}, got {dims}")
        rows = token_rows(model, encoder, tokens, vocab, cls, sep, progress)
        table = principal_components(rows, dims)
        ids = [np.asarray(e.ids, np.int64) for e in tokenizer.encode_batch(captions, add_special_tokens=False)]
        counts = np.bincount(np.concatenate(ids), minlength=vocab).astype(np.float64)
        if sif > 0:
            table *= (sif / (sif + counts / counts.sum())).astype(np.float32)[:, None]
        target = model.encode_text(captions, cached=True)
        proj, bias = ridge_fit(mean_rows(table, ids), target, ridge)
    finally:
        model.use_text_encoder(was)
    widths = [e.dim for e in model.experts.values()]
    return StaticText(table, proj, bias, widths, tokenizer_json, model.fingerprint(), source)


def make_static_text(checkpoint, data: str, out: str | Path, split: str = "train", dims: int = 256, sif: float = SIF,
                     ridge: float = RIDGE, val_split: str | None = None, features: Path | None = None,
                     device: str | None = None, progress: bool = True, evaluate: bool = True,
                     vocabulary: list[int] | None = None, **data_options) -> dict:
    """Distil ``checkpoint``'s static text encoder on the captions of ``data``'s ``split`` and save the model with
    it in the run folder ``out`` (``out/best/``); return the report (also ``out/static-text.json``): the part and,
    with ``evaluate``, the saved model's metrics on ``val_split`` (default: val or dev) with its float32 and its
    static text encoder; ``vocabulary``: as :func:`distill` takes it."""
    directory, best = derived_run(checkpoint, out)
    model = load_model(directory)
    source, _ = DatasetSource.open(data, features, **data_options)
    split = source.check_split(split)
    val_split = source.check_split(val_split) if val_split else source.default_val_split()
    captions = [c for item in source.dataset.items(split) for c in item.captions]
    model.static_text = distill(model, captions, dims, sif, ridge, f"{source.label}:{split}", progress, vocabulary)
    model.save(best)
    report = {"model": str(checkpoint), "data": source.label, "split": split, "val_split": val_split}
    return _measured(best, Path(out), "static_text", report, source, evaluate, device, progress)


def make_student_text(checkpoint, student, data: str, out: str | Path, val_split: str | None = None,
                      features: Path | None = None, device: str | None = None, progress: bool = True,
                      evaluate: bool = True, store: str = STORES[0], **data_options) -> dict:
    """Give ``checkpoint`` the student text encoder of ``student`` (a model or run folder that ``reelsearch
    tune-text`` distilled from it: its text tower cut short, ``reelsearch.models.student_text``) and save the model
    with it in the run folder ``out`` (``out/best/``); return the report (also ``out/student-text.json``): the part
    and, with ``evaluate``, the saved model's metrics on ``data``'s ``val_split`` (default: val or dev; with the
    model's querybank) with float32 MiniLM and with the student as saved (its weights stored in ``store``:
    ``reelsearch.models.student_text.STORES``), whose RSums the part records. ConfigError naming both folders when
    ``student`` was not distilled from this model."""
    directory, best = derived_run(checkpoint, out)
    model = load_model(directory)
    source, _ = DatasetSource.open(data, features, **data_options)
    val_split = source.check_split(val_split) if val_split else source.default_val_split()
    model.student_text = student_of(model, load_model(student), str(student), str(directory), store)
    model.save(best)
    report = {"model": str(checkpoint), "student_model": str(student), "data": source.label, "val_split": val_split}
    return _measured(best, Path(out), "student_text", report, source, evaluate, device, progress)


def _measured(best: Path, out: Path, attribute: str, report: dict, source, evaluate: bool, device: str | None,
              progress: bool) -> dict:
    """``report`` with the fast text encoder ``model.<attribute>`` of the model saved at ``best`` described and,
    with ``evaluate``, its metrics and float32 MiniLM's on the report's ``val_split``: the two RSums recorded in the
    part (whether ``serve`` runs it by default) and the model saved again; written to ``out`` too."""
    saved = load_model(best)
    part = getattr(saved, attribute)
    names = ("float32", part.name)
    if evaluate and report["val_split"] is not None:
        for name in names:
            saved.use_text_encoder(name)
            report[name] = evaluate_model(saved, source, report["val_split"], device, progress)
        part.checked = {name: report[name]["RSum"] for name in names}
        part.checked["split"] = f"{source.label}:{report['val_split']}"
        saved.save(best)
    report[attribute] = part.describe()
    atomic_write_json(out / REPORT_FILES[attribute], report)
    return report


def report_text(report: dict, out: str | Path) -> str:
    """:func:`make_static_text`'s or :func:`make_student_text`'s report in a few lines."""
    if "student_text" in report:
        part = report["student_text"]
        head = f"student text encoder: {report['student_model']}, its text tower cut after {part['depth']} layers"
        return derived_report_text(head, report, ("float32", "student"), Path(out), REPORT_FILES["student_text"])
    part = report["static_text"]
    head = (f"static text encoder: {part['vocabulary']} tokens x {part['dims']} dims -> {part['width']}-d, "
            f"re-fitted on {part['source']}")
    return derived_report_text(head, report, ("float32", "static"), Path(out), REPORT_FILES["static_text"])
