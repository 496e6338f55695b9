"""The static text encoder (``reelsearch distill-text``): a caption's embedding without running the text tower.

Model2Vec's recipe (Tulkens & van Dongen 2024) applied to the whole text side of a model: every token of the
tower's WordPiece vocabulary goes alone through the model's own text tower and text projection (``[CLS] token
[SEP]``), the rows are reduced by PCA, optionally scaled by a frequency weight (SIF, Arora et al. 2017) and
re-fitted to the model's joint space: a linear map (ridge regression) from the mean of a training caption's token
rows to the full model's embedding of that caption (``reelsearch.training.distill_text``). Encoding a text is then its
tokens (the tower's own tokenizer, without special tokens), the mean of their rows, the map, and each expert's slice
L2-normalised: well under a millisecond on one core, numpy only.

A part of the model folder (``model.static_text``, kind ``static-text``: ``static-text/tokenizer.json`` and
``static-text/static-text.safetensors``), tied to the model's fingerprint like the querybank; the model encodes with
it when asked (``model.use_text_encoder("static")``, ``--text-encoder static``). The token rows are stored as int8
with one float32 scale per row (as the querybank's), the map in float32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
from safetensors.numpy import save_file

from reelsearch.errors import ConfigError, DataFormatError, ReelsearchError
from reelsearch.io import atomic_path, atomic_write_text, read_text

from .querybank import dequantise_rows, quantise_rows, read_tensors

FOLDER = "static-text"
TABLE_FILE, TOKENIZER_FILE = "static-text.safetensors", "tokenizer.json"
FORMAT = "reelsearch.static-text"
#: The most dev RSum (with the querybank) a fast text encoder (static, student) may lose to float32 MiniLM and still
#: be what ``serve`` runs by default (``measured_within``).
SERVING_TOLERANCE = 3.0


def load_tokenizer(text: str):
    """A WordPiece tokenizer from the text of a ``tokenizer.json``, without truncation or padding."""
    from tokenizers import Tokenizer  # noqa: PLC0415 - optional package (text extra)

    tokenizer = Tokenizer.from_str(text)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class StaticText:
    """Token rows ``table`` [V, d] (frequency weights folded in), the map ``proj`` [d, D] and ``bias`` [D], the
    ``widths`` of the experts' slices of D (each L2-normalised), the tokenizer (the text of its ``tokenizer.json``),
    the ``model`` fingerprint it was distilled from, the training ``source``, and ``checked``: the RSum of the model
    with float32 MiniLM and with this encoder on a development split (``{"float32", "static", "split"}``; empty until
    ``reelsearch distill-text`` measured it)."""

    kind: ClassVar[str] = "static-text"
    name: ClassVar[str] = "static"  # the text encoder's name (``model.use_text_encoder``)

    def __init__(self, table: np.ndarray, proj: np.ndarray, bias: np.ndarray, widths, tokenizer: str,
                 model: str = "", source: str = "", checked: dict | None = None):
        self.table = np.ascontiguousarray(table, np.float32)
        self.proj = np.ascontiguousarray(proj, np.float32)
        self.bias = np.ascontiguousarray(bias, np.float32).reshape(-1)
        self.widths = tuple(int(w) for w in widths)
        if self.table.ndim != 2 or self.proj.shape != (self.table.shape[1], len(self.bias)) or \
                sum(self.widths) != len(self.bias) or not self.widths or min(self.widths) < 1:
            raise ConfigError(f"static text: table {self.table.shape}, map {self.proj.shape}, bias {self.bias.shape} "
                              f"and widths {self.widths} do not fit together")
        self.tokenizer_json, self.model, self.source = tokenizer, model, source
        self.checked = dict(checked or {})
        self._tokenizer = None

    @property
    def dim(self) -> int:
        return len(self.bias)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_json)
        return self._tokenizer

    def token_ids(self, texts) -> list[np.ndarray]:
        """The vocabulary ids of each text's tokens (no special tokens)."""
        return [np.asarray(e.ids, np.int64) for e in self.tokenizer.encode_batch(list(texts),
                                                                               add_special_tokens=False)]

    def encode(self, texts) -> np.ndarray:
        """Embeddings [N, D] (float32; each expert's slice of unit norm) of ``texts``; ReelsearchError for a text
        without a token (empty or blank)."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ReelsearchError(f"caption {i} is a {type(text).__name__}, not a string")
        mean = np.zeros((len(texts), self.table.shape[1]), np.float32)
        for i, ids in enumerate(self.token_ids(texts)):
            if not len(ids):
                raise ReelsearchError(f"text {i} ({texts[i]!r}) has no tokens: nothing to encode")
            mean[i] = self.table[ids].mean(axis=0)
        return normalise_slices(mean @ self.proj + self.bias, self.widths)

    def serves(self) -> bool:
        """Whether ``serve`` may run this encoder by default: its measured RSum is within ``SERVING_TOLERANCE`` of
        float32 MiniLM's (:func:`measured_within`)."""
        return measured_within(self.checked, self.name)

    def mismatch(self, model) -> str | None:
        """Why these rows do not encode for ``model`` (None when they do): another model's, or of another width."""
        if self.model != model.fingerprint():
            return (f"a static text encoder of another model (fingerprint {self.model}, this model "
                    f"{model.fingerprint()}): distil it again with `reelsearch distill-text`")
        if self.dim != int(model.dim):
            return f"a static text encoder of {self.dim}-d embeddings; the model's are {int(model.dim)}-d"
        return None

    def describe(self) -> dict:
        return {"vocabulary": int(self.table.shape[0]), "dims": int(self.table.shape[1]), "width": self.dim,
                "source": self.source, "checked": self.checked, "serves": self.serves()}

    # ---- a part of the model folder (reelsearch.models.folder)
    def fields(self) -> dict:
        return {}

    def save(self, directory: str | Path) -> list[str]:
        folder = Path(directory) / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        rows, scale = quantise_rows(self.table)
        atomic_write_text(folder / TOKENIZER_FILE, self.tokenizer_json)
        with atomic_path(folder / TABLE_FILE) as tmp:
            save_file({"table": rows, "table_scale": scale, "proj": self.proj, "bias": self.bias}, str(tmp),
                      metadata={"format": FORMAT, "widths": ",".join(map(str, self.widths)), "model": self.model,
                                "source": self.source, "checked": json.dumps(self.checked)})
        return [FOLDER]

    @classmethod
    def load(cls, directory: str | Path, entry: dict) -> StaticText:
        folder = Path(directory) / entry["files"][0]
        path = folder / TABLE_FILE
        if not path.is_file() or not (folder / TOKENIZER_FILE).is_file():
            raise DataFormatError(path, f"missing: the model's static text encoder ({TABLE_FILE} and "
                                        f"{TOKENIZER_FILE} in {FOLDER}/)")
        try:
            meta, stored = read_tensors(path, FORMAT)
            table = dequantise_rows(stored["table"], stored["table_scale"])
            widths = [int(w) for w in meta["widths"].split(",")]
            return cls(table, stored["proj"], stored["bias"], widths, read_text(folder / TOKENIZER_FILE),
                       meta.get("model", ""), meta.get("source", ""), json.loads(meta.get("checked") or "{}"))
        except Exception as exc:  # noqa: BLE001 (safetensors raises its own error types)
            raise DataFormatError(path, f"unreadable static text encoder: {exc}") from exc


def measured_within(checked: dict, name: str) -> bool:
    """Whether the encoder ``name``'s measured RSum (``checked[name]``) is within ``SERVING_TOLERANCE`` of float32
    MiniLM's in the same measurement (``checked["float32"]``); an encoder never measured is not."""
    try:
        return float(checked[name]) >= float(checked["float32"]) - SERVING_TOLERANCE
    except (KeyError, TypeError, ValueError):
        return False


def normalise_slices(x: np.ndarray, widths) -> np.ndarray:
    """``x`` [N, sum(widths)] with each slice of ``widths`` L2-normalised (a mixture's experts' rows side by side)."""
    x = np.asarray(x, np.float32).copy()
    start = 0
    for width in widths:
        part = x[:, start:start + width]
        part /= np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12)
        start += width
    return x
