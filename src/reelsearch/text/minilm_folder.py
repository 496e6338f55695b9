"""What a sentence-transformers model folder says without loading the model: its BERT's shape, its longest token
sequence and whether it mean-pools, and its WordPiece tokenizer straight from ``tokenizer.json`` (the ``tokenizers``
package, as the Hugging Face fast tokenizer runs it).

This is all that encoding text in ONNX Runtime needs (``reelsearch.text.minilm``), so a query is encoded without
importing sentence-transformers and transformers (several seconds; docs/benchmarks.md, "Cold search"). A folder
these files do not describe plainly — another pipeline or pooling, lower-casing by sentence-transformers, no
``tokenizer.json`` — gets no ``FolderSpec`` and is run by sentence-transformers as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The pipeline of a plain sentence-transformers text model: Transformer -> Pooling -> Normalize.
MEAN_POOLED = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
               "sentence_transformers.models.Normalize")
POOLING_MODES = ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                 "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


@dataclass(frozen=True)
class FolderSpec:
    """A mean-pooled BERT folder: ``hidden`` size, ``layers``, attention ``heads``, ``max_length`` tokens."""

    folder: Path
    hidden: int
    layers: int
    heads: int
    max_length: int

    def tokenizer(self):
        """The folder's tokenizer, truncating at ``max_length`` and padding to the longest of a batch."""
        from tokenizers import Tokenizer  # noqa: PLC0415 - optional package (text extra)

        tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        pad = _special(self.folder, "pad_token", "[PAD]")
        tokenizer.enable_truncation(max_length=self.max_length, strategy="longest_first")
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad), pad_token=pad)
        return tokenizer


def read_spec(folder: Path) -> FolderSpec | None:
    """The FolderSpec of ``folder``; None where its files do not describe a plain mean-pooled BERT with a
    ``tokenizer.json`` (sentence-transformers then loads and runs it)."""
    try:
        modules = _json(folder / "modules.json")
        if tuple(m.get("type") for m in modules) != MEAN_POOLED or not (folder / "tokenizer.json").is_file():
            return None
        pooling = _json(folder / modules[1]["path"] / "config.json")
        sbert = _json(folder / "sentence_bert_config.json")
        config = _json(folder / "config.json")
        if modules[0].get("path") or not pooling.get("pooling_mode_mean_tokens") or \
                any(pooling.get(mode) for mode in POOLING_MODES) or sbert.get("do_lower_case") or \
                config.get("model_type") != "bert":
            return None
        return FolderSpec(folder, int(config["hidden_size"]), int(config["num_hidden_layers"]),
                          int(config["num_attention_heads"]), int(sbert["max_seq_length"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def tokenize(tokenizer, captions: list[str]) -> dict[str, np.ndarray]:
    """``input_ids``, ``attention_mask`` and ``token_type_ids`` ([N, longest], int64) of ``captions``."""
    encodings = tokenizer.encode_batch(captions)
    return {name: np.array([getattr(e, attr) for e in encodings], dtype=np.int64)
            for name, attr in (("input_ids", "ids"), ("attention_mask", "attention_mask"),
                               ("token_type_ids", "type_ids"))}


def _special(folder: Path, name: str, default: str) -> str:
    """A special token's text from ``special_tokens_map.json`` (a string or {"content": ...})."""
    try:
        value = _json(folder / "special_tokens_map.json").get(name, default)
    except (OSError, ValueError):
        return default
    return value.get("content", default) if isinstance(value, dict) else str(value)


def _json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
