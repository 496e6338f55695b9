"""Querybank normalisation (Bogolin et al. 2022, "Cross Modal Retrieval with Querybank Normalisation").

A few gallery items ("hubs") are close to very many queries and crowd the top of every ranking. The inverted softmax
rescores a query q against a gallery item g by how much more g likes q than it likes a bank of *training* queries:

    s'(q, g) = exp(beta s(q, g)) / sum_b exp(beta s(b, g)),   ranked as   s(q, g) - logsumexp_b(beta s(b, g)) / beta

so each gallery item gets one offset, computed from the bank alone (no test query takes part). For text-to-video the
bank holds training captions and the offsets belong to the videos; for video-to-text it holds training videos and
the offsets belong to the captions. The bank is a part of the model (``model.querybank``, saved in its folder as
``querybank.safetensors``), tied to its fingerprint, and ``reelsearch eval`` applies it; ``reelsearch querybank``
builds it (``reelsearch.training.build_querybank``). Only models scored by an inner product of their rows
(``model.inner_product``) take a bank: there the offsets are exact and cheap.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.io import atomic_path

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


def quantise_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 rows, float32 [N, 1] scales) with rows ~= int8 * scale (symmetric, per row)."""
    scale = np.abs(rows).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    return np.clip(np.round(rows / scale), -127, 127).astype(np.int8), scale.astype(np.float32)


def read_tensors(path: str | Path, file_format: str, framework: str = "numpy") -> tuple[dict, dict]:
    """(metadata, {name: tensor}) of the safetensors file ``path`` of a model part (``framework``: "numpy" or
    "pt"); ValueError when its metadata names another ``format`` (the caller names the file)."""
    with safe_open(str(path), framework=framework) as f:
        meta = f.metadata() or {}
        stored = {k: f.get_tensor(k) for k in f.keys()}
    if meta.get("format") != file_format:
        raise ValueError(f"format {meta.get('format')!r}, expected {file_format!r}")
    return meta, stored


def dequantise_rows(rows: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    """Rows as float32 (int8 with their scales, or float rows as an earlier version saved them)."""
    if scale is None:
        return rows.astype(np.float32)
    if rows.dtype != np.int8 or scale.shape != (len(rows), 1):
        raise ValueError(f"int8 rows {rows.dtype} {rows.shape} with scales {scale.shape}")
    return rows.astype(np.float32) * scale


def check_bank_model(model) -> None:
    """ConfigError unless ``model`` scores by an inner product of its rows (what a querybank normalises)."""
    try:
        takes, mode = model.inner_product, model.search_mode
    except ConfigError as exc:  # e.g. a mixture with a frame-attention expert
        takes, mode = False, str(exc)
    if not takes:
        raise ConfigError(f"model {getattr(model, 'name', '')!r} is scored by {mode}, not by an inner product of its "
                          "rows: querybank normalisation needs a cosine model or a score fusion of them")


class _Rows:
    """A bank's float32 rows, ``text`` or ``video``: as given, or, for a bank loaded as int8 rows (``stored``), made
    from them when first read (indexing's offsets) and kept from then on. A serving process never reads them (its
    videos' offsets are stored in its index; the model id's ``digest`` and ``describe`` read the int8 rows without
    keeping anything), so it does not hold the bundled model's 6,000 float32 rows: 23 MiB (docs/benchmarks.md,
    "serve at 100,000 videos of four segments: where its memory goes")."""

    def __set_name__(self, owner, name: str):
        self.name = name

    def __get__(self, bank, owner=None) -> np.ndarray:
        if bank is None:
            raise AttributeError(self.name)  # a dataclass field without a default
        if bank.__dict__[self.name] is None:
            bank.__dict__[self.name] = bank.float_rows(self.name)
        return bank.__dict__[self.name]

    def __set__(self, bank, rows: np.ndarray | None) -> None:
        bank.__dict__[self.name] = None if rows is None else np.ascontiguousarray(rows, np.float32)


@dataclass
class QueryBank:
    """Training queries of both directions, as the model scores them: ``text`` [Nt, W] (captions through
    ``model.ann_query(model.encode_text(...))``) and ``video`` [Nv, W] (videos' rows); ``model`` the fingerprint of
    the model they came from; ``source`` where they came from (e.g. "flickr8k:...:train"); ``stored`` the int8 rows and
    scales it was loaded from (given with ``text`` and ``video`` None: those are made from them when first read). A part
    of the model folder (``model.querybank``, saved and loaded with the model)."""

    kind: ClassVar[str] = "querybank"
    text: np.ndarray | None = _Rows()
    video: np.ndarray | None = _Rows()
    beta: float = DEFAULT_BETA
    model: str = ""
    source: str = ""
    stored: dict[str, np.ndarray] | None = field(default=None, repr=False, compare=False)  # int8 rows as read

    def __post_init__(self):
        if self.stored is None and (self.__dict__["text"] is None or self.__dict__["video"] is None):
            raise ConfigError("a querybank needs its rows: float32 ones, or the int8 ones stored")
        text, video = self.float_rows("text"), self.float_rows("video")
        if text.ndim != 2 or video.ndim != 2 or text.shape[1] != video.shape[1]:
            raise ConfigError(f"querybank rows must be two matrices of one width, got {text.shape} and "
                              f"{video.shape}")
        if not len(text) or not len(video):
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

    def float_rows(self, name: str) -> np.ndarray:
        """The float32 rows ``name`` ("text" or "video"): those held, or made from the int8 ones and not kept."""
        rows = self.__dict__[name]
        return rows if rows is not None else dequantise_rows(self.stored[name], self.stored[f"{name}_scale"])

    def describe(self) -> dict:
        counts = {k: len(self.stored[k] if self.__dict__[k] is None else self.__dict__[k]) for k in ("text", "video")}
        return {"beta": self.beta, "captions": counts["text"], "videos": counts["video"], "source": self.source}

    def digest(self) -> str:
        """A short hash of what the offsets depend on (rows and beta): part of a search index's model id."""
        h = hashlib.sha256(repr(float(self.beta)).encode())
        for name in ("text", "video"):
            h.update(self.float_rows(name).tobytes())
        return h.hexdigest()[:16]

    # ---- a part of the model folder (reelsearch.models.folder)
    def fields(self) -> dict:
        return {}

    def save(self, directory: str | Path) -> list[str]:
        """Write ``querybank.safetensors`` in ``directory``: rows as int8 with one float32 scale per row (a quarter
        of float32; the offsets move by about 1e-4, no Flickr8k dev rank changed at 1,000-30,000 captions). A bank
        that was loaded keeps its stored rows: saved again, it is the same bank (the same digest)."""
        tensors = self.stored
        if tensors is None:
            tensors = {}
            for key, rows in (("text", self.text), ("video", self.video)):
                tensors[key], tensors[f"{key}_scale"] = quantise_rows(rows)
        with atomic_path(Path(directory) / BANK_FILE) as tmp:
            save_file(tensors, str(tmp), metadata={"format": FORMAT, "beta": repr(float(self.beta)),
                                                   "model": self.model, "source": self.source})
        return [BANK_FILE]

    @classmethod
    def load(cls, directory: str | Path, entry: dict) -> QueryBank:
        """The bank stored in the file ``entry`` names (DataFormatError naming it when it is missing or
        unreadable); :meth:`mismatch` tells whether it belongs to a model."""
        path = Path(directory) / entry["files"][0]
        if not path.is_file():
            raise DataFormatError(path, "missing: the model's querybank")
        try:
            meta, stored = read_tensors(path, FORMAT)
            quantised = all(f"{k}_scale" in stored for k in ("text", "video"))
            rows = {k: None if quantised else dequantise_rows(stored[k], None) for k in ("text", "video")}
            return cls(rows["text"], rows["video"], float(meta["beta"]), meta.get("model", ""),
                       meta.get("source", ""), stored if quantised else None)
        except Exception as exc:  # noqa: BLE001 (safetensors raises its own error types)
            raise DataFormatError(path, f"unreadable querybank: {exc}") from exc

    def mismatch(self, model) -> str | None:
        """Why this bank cannot normalise ``model``'s scores (None when it can): a model not scored by an inner
        product, or another model's bank (its offsets would be wrong after any change of weights or recipe)."""
        try:
            check_bank_model(model)
        except ConfigError as exc:
            return str(exc)
        if self.model != model.fingerprint():
            return (f"a querybank of another model (fingerprint {self.model}, this model {model.fingerprint()}): "
                    "rebuild it with `reelsearch querybank`")
        return None
