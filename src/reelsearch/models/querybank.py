"""Querybank normalisation (Bogolin et al. 2022, "Cross Modal Retrieval with Querybank Normalisation").

A few gallery items ("hubs") are close to very many queries and crowd the top of every ranking. The inverted softmax
rescores a query q against a gallery item g by how much more g likes q than it likes a bank of *training* queries:

    s'(q, g) = exp(beta s(q, g)) / sum_b exp(beta s(b, g)),   ranked as   s(q, g) - logsumexp_b(beta s(b, g)) / beta

so each gallery item gets one offset, computed from the bank alone (no test query takes part). For text-to-video the
bank holds training captions and the offsets belong to the videos; for video-to-text it holds training videos and
the offsets belong to the captions. The bank lives beside the model (``querybank.safetensors``), tied to its
fingerprint, and ``reelsearch eval`` applies it; ``reelsearch querybank`` builds it. Only models scored by an inner
product of their rows (``search_mode == "ann"``) take a bank: there the offsets are exact and cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError, DataFormatError

BANK_FILE = "querybank.safetensors"
FORMAT = "reelsearch.querybank"
DEFAULT_BETA = 20.0  # the paper's released code's default
CHUNK = 2048  # gallery rows scored against the whole bank at a time


def _logsumexp_rows(bank: np.ndarray, gallery: np.ndarray, beta: float) -> np.ndarray:
    """logsumexp_b(beta <bank_b, gallery_g>) / beta for every gallery row g, in chunks (float64 sums)."""
    out = np.empty(len(gallery), np.float64)
    for start in range(0, len(gallery), CHUNK):
        s = beta * (gallery[start:start + CHUNK] @ bank.T).astype(np.float64)  # [chunk, bank]
        top = s.max(axis=1, keepdims=True)
        out[start:start + CHUNK] = (top[:, 0] + np.log(np.exp(s - top).sum(axis=1))) / beta
    return out


def check_bank_model(model) -> None:
    """ConfigError unless ``model`` scores by an inner product of its rows (what a querybank normalises)."""
    try:
        mode = model.search_mode
    except ConfigError as exc:
        mode = str(exc)
    if mode != "ann":
        raise ConfigError(f"model {getattr(model, 'name', '')!r} is scored by {mode}, not by an inner product of its "
                          "rows: querybank normalisation needs a cosine model or a score fusion of them")


@dataclass
class QueryBank:
    """Training queries of both directions, as the model scores them: ``text`` [Nt, W] (captions through
    ``model.ann_query(model.encode_text(...))``) and ``video`` [Nv, W] (videos' rows); ``model`` the fingerprint of
    the model they came from; ``source`` where they came from (e.g. "flickr8k:...:train")."""

    text: np.ndarray
    video: np.ndarray
    beta: float = DEFAULT_BETA
    model: str = ""
    source: str = ""

    def __post_init__(self):
        self.text = np.ascontiguousarray(self.text, np.float32)
        self.video = np.ascontiguousarray(self.video, np.float32)
        if self.text.ndim != 2 or self.video.ndim != 2 or self.text.shape[1] != self.video.shape[1]:
            raise ConfigError(f"querybank rows must be two matrices of one width, got {self.text.shape} and "
                              f"{self.video.shape}")
        if not len(self.text) or not len(self.video):
            raise ConfigError("a querybank needs at least one caption and one video")
        if not np.isfinite(self.beta) or self.beta <= 0:
            raise ConfigError(f"querybank beta must be a positive number, got {self.beta}")

    def video_offsets(self, video_rows: np.ndarray) -> np.ndarray:
        """Each video's offset for text-to-video ranking (subtract it from the query's scores)."""
        return _logsumexp_rows(self.text, np.asarray(video_rows, np.float32), self.beta)

    def caption_offsets(self, query_rows: np.ndarray) -> np.ndarray:
        """Each caption's offset for video-to-text ranking (rows as ``model.ann_query`` gives them)."""
        return _logsumexp_rows(self.video, np.asarray(query_rows, np.float32), self.beta)

    def normalise(self, scores: np.ndarray, query_rows: np.ndarray, video_rows: np.ndarray) -> tuple[np.ndarray,
                                                                                                       np.ndarray]:
        """(text-to-video, video-to-text) score matrices [captions x videos] from the raw ``scores``."""
        scores = np.asarray(scores, np.float64)
        return (scores - self.video_offsets(video_rows)[None, :],
                scores - self.caption_offsets(query_rows)[:, None])

    def describe(self) -> dict:
        return {"beta": self.beta, "captions": len(self.text), "videos": len(self.video), "source": self.source}

    # ---- persistence
    def save(self, directory: str | Path) -> Path:
        from safetensors.numpy import save_file

        from reelsearch.io import atomic_path

        path = Path(directory) / BANK_FILE
        with atomic_path(path) as tmp:
            save_file({"text": self.text.astype(np.float16), "video": self.video.astype(np.float16)}, str(tmp),
                      metadata={"format": FORMAT, "beta": repr(float(self.beta)), "model": self.model,
                                "source": self.source})
        return path

    @classmethod
    def load(cls, directory: str | Path, model=None) -> QueryBank | None:
        """The bank saved in ``directory`` (None without one); with ``model``, a bank of another model's
        fingerprint is an error naming the file (its offsets would be wrong)."""
        from safetensors import safe_open

        path = Path(directory) / BANK_FILE
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
                rows = {k: f.get_tensor(k) for k in ("text", "video")}
            if meta.get("format") != FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT!r}")
            bank = cls(rows["text"], rows["video"], float(meta["beta"]), meta.get("model", ""),
                       meta.get("source", ""))
        except Exception as exc:  # noqa: BLE001 (safetensors raises its own error types)
            raise DataFormatError(path, f"unreadable querybank: {exc}") from exc
        if model is not None:
            check_bank_model(model)
            if bank.model != model.fingerprint():
                raise DataFormatError(path, f"a querybank of another model (fingerprint {bank.model}, this model "
                                            f"{model.fingerprint()}): rebuild it with `reelsearch querybank`")
            if bank.text.shape[1] != model.row_dim:
                raise DataFormatError(path, f"rows of width {bank.text.shape[1]}, the model's are {model.row_dim}")
        return bank


def build_querybank(model, source, split: str = "train", beta: float = DEFAULT_BETA, max_captions: int | None = None,
                    max_videos: int | None = None, seed: int = 0, device: str | None = None,
                    progress: bool = True) -> QueryBank:
    """The bank of ``split`` of ``source`` (a DatasetSource) embedded by ``model``; ``max_captions`` /
    ``max_videos`` keep a random subset (``seed``) to bound its size."""
    from reelsearch.training.run import model_pairs

    check_bank_model(model)
    pairs = model_pairs(model, source, split, device, progress)
    rng = np.random.default_rng(seed)
    captions, items = list(pairs.captions), pairs.video_items()
    if max_captions is not None and len(captions) > max_captions:
        captions = [captions[i] for i in sorted(rng.choice(len(captions), max_captions, replace=False))]
    if max_videos is not None and len(items) > max_videos:
        items = [items[i] for i in sorted(rng.choice(len(items), max_videos, replace=False))]
    text = model.ann_query(model.encode_text(captions, cached=True))
    video = model.encode_video(items, frames=False, progress=progress).video
    return QueryBank(text, video, beta, model.fingerprint(), f"{source.label}:{split}")


def make_querybank(checkpoint, data: str, out: str | Path, split: str = "train", beta: float = DEFAULT_BETA,
                   max_captions: int | None = None, max_videos: int | None = None, val_split: str | None = None,
                   features: Path | None = None, seed: int = 0, device: str | None = None, progress: bool = True,
                   evaluate: bool = True, **data_options) -> dict:
    """Build the querybank of ``checkpoint`` from ``data``'s ``split``, save the model with it at ``out`` and
    return the report (also ``out/querybank.json``): the bank and, with ``evaluate``, the model's raw and
    normalised metrics on ``val_split`` (default: val or dev; never the bank's split)."""
    import shutil

    from reelsearch.errors import ReelsearchError
    from reelsearch.features.caches import DatasetSource
    from reelsearch.io import atomic_write_json
    from reelsearch.models import load_model, resolve_checkpoint
    from reelsearch.training.run import evaluate_model

    directory = resolve_checkpoint(checkpoint)
    model = load_model(directory)
    source, _ = DatasetSource.open(data, features, **data_options)
    split = source.check_split(split)
    val_split = source.check_split(val_split) if val_split else source.default_val_split()
    if val_split == split:
        raise ReelsearchError(f"the bank's split {split!r} is the split to report on: a querybank holds training "
                              "queries (pass --val-split)")
    bank = build_querybank(model, source, split, beta, max_captions, max_videos, seed, device, progress)
    out = Path(out)
    if out.resolve() != directory.resolve():
        if out.exists() and any(out.iterdir()):
            raise ReelsearchError(f"{out}: exists and is not empty; pass a new folder or the model's own")
        shutil.copytree(directory, out, dirs_exist_ok=True)
    bank.save(out)
    report = {"model": str(checkpoint), "data": source.label, "split": split, "val_split": val_split,
              "querybank": bank.describe()}
    if evaluate and val_split is not None:
        saved = load_model(out)
        report["raw"] = evaluate_model(saved, source, val_split, device, progress, querybank=False)
        report["normalised"] = evaluate_model(saved, source, val_split, device, progress)
    atomic_write_json(out / "querybank.json", report)
    return report
