"""Turn caption strings into a model's text batch, as the model's text recipe (``features.text``) says; a vocab
processor's word list is saved in the model's config.json.

Kinds (``model.text.features`` in a config):
  glove   {"feats": [N, L, 50] GloVe vectors, "lengths"}; out-of-vocabulary words are dropped (GloVe 6B is
          lower-cased and covers 400k words); a caption with no known word becomes one zero vector. Torabi B.1.
  vocab   {"ids": [N, L] long, "lengths"}; a vocabulary built from the training captions (Mithun §3.2), id 0 is
          padding and id 1 is <unk>; words seen fewer than ``min_count`` times map to <unk>.
  minilm  {"feats": [N, L, 384] frozen MiniLM token features, "lengths", "mask"} (SCDE §3.2's BERT stage); with
          ``layer=k`` the hidden states after MiniLM's layer k, for a model whose Transformer continues from there.
  hf      {"feats": [N, 1, D] the unit-norm caption embedding of a CLIP- or SigLIP-family text tower, "lengths",
          "mask"} (``reelsearch.towers``): a zero-shot model's text side is that embedding as it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

from reelsearch.errors import ConfigError
from reelsearch.text.glove import load_glove
from reelsearch.text.int8 import resolve_int8
from reelsearch.text.minilm import shared_encoder
from reelsearch.text.tokenize import tokenize
from reelsearch.text.towers import tower_key
from reelsearch.towers.clip import shared_towers

PAD, UNK = "<pad>", "<unk>"


def _default_tokenizer() -> Callable[[str], list[str]]:
    return tokenize


def pad_features(rows: Sequence[torch.Tensor], dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack variable-length [L_i, dim] rows into [N, max L, dim] (zero padded) and lengths [N] (at least 1)."""
    lengths = torch.tensor([max(1, int(r.shape[0])) for r in rows], dtype=torch.long)
    out = torch.zeros(len(rows), int(lengths.max()) if len(rows) else 1, dim)
    for i, r in enumerate(rows):
        if r.shape[0]:
            out[i, : r.shape[0]] = r
    return out, lengths


class TextProcessor:
    """Base: ``processor(captions) -> text_batch``; ``state()`` is JSON; ``from_state`` rebuilds it."""

    kind = ""

    def __call__(self, captions: Sequence[str]) -> dict:
        raise NotImplementedError

    def from_features(self, rows: Sequence) -> dict:
        """A text batch from precomputed per-caption inputs (only processors whose inputs can be cached)."""
        raise ConfigError(f"{self.kind} text inputs are not precomputed")

    def batch_key(self):
        """What its batch of some captions is made of beside them: processors with one key give one batch (the
        experts of a mixture over one tower make it once: ``JointModel._encode_text``'s ``batches``)."""
        return self

    @property
    def vocab_size(self) -> int | None:
        return None


class GloveTextProcessor(TextProcessor):
    """Captions -> GloVe word vectors (frozen); ``glove`` defaults to reelsearch.text.glove.load_glove()."""

    kind = "glove"

    def __init__(self, glove=None, tokenizer: Callable[[str], list[str]] | None = None):
        self._glove, self._tokenizer, self._vectors = glove, tokenizer, None

    @property
    def glove(self):
        if self._glove is None:
            self._glove = load_glove()
        return self._glove

    @property
    def tokenizer(self):
        """The injected tokenizer, else GloVe's own (PTB-style, splitting hyphenated words it lacks)."""
        return self._tokenizer or self.glove.tokenize

    def __call__(self, captions: Sequence[str]) -> dict:
        glove = self.glove
        if self._vectors is None:
            self._vectors = torch.as_tensor(glove.vectors, dtype=torch.float32)
        vectors = self._vectors
        rows = []
        for caption in captions:
            ids = [glove.index[t] for t in self.tokenizer(caption) if t in glove.index]
            rows.append(vectors[torch.tensor(ids, dtype=torch.long)] if ids else torch.zeros(0, vectors.shape[1]))
        feats, lengths = pad_features(rows, vectors.shape[1])
        return {"feats": feats, "lengths": lengths}


class VocabTextProcessor(TextProcessor):
    """Captions -> vocabulary ids for learned word embeddings (Mithun §3.2); the word list is the state."""

    kind = "vocab"

    def __init__(self, words: Sequence[str], min_count: int = 1, tokenizer: Callable[[str], list[str]] | None = None):
        words = list(words)
        if words[:2] != [PAD, UNK]:
            words = [PAD, UNK] + [w for w in words if w not in (PAD, UNK)]
        self.words, self.min_count, self._tokenizer = words, min_count, tokenizer
        self.index = {w: i for i, w in enumerate(words)}

    @classmethod
    def build(cls, captions: Iterable[str], min_count: int = 1,
              tokenizer: Callable[[str], list[str]] | None = None) -> VocabTextProcessor:
        """Vocabulary of the words seen at least ``min_count`` times in ``captions`` (use training captions only)."""
        tok = tokenizer or _default_tokenizer()
        counts = Counter(t for c in captions for t in tok(c))
        words = sorted(w for w, n in counts.items() if n >= min_count)
        return cls(words, min_count=min_count, tokenizer=tokenizer)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = _default_tokenizer()
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def __call__(self, captions: Sequence[str]) -> dict:
        seqs = [[self.index.get(t, 1) for t in self.tokenizer(c)] or [1] for c in captions]
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        ids = torch.zeros(len(seqs), int(lengths.max()) if seqs else 1, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
        return {"ids": ids, "lengths": lengths}



class MiniLMTextProcessor(TextProcessor):
    """Captions -> frozen MiniLM token features (reelsearch.text.minilm.MiniLMEncoder); ``model_dir``: an adapted
    MiniLM folder (``reelsearch adapt-text``, SCDE stage 1) or another tower by name (``reelsearch.text.towers``)
    instead of the package model; ``layer``: the hidden
    states after that layer instead of the last layer's; ``tail``: the tuned top layers (``reelsearch tune-text``)
    over it; ``int8``: run MiniLM in int8 (query encoding at search time; ``reelsearch.text.int8``)."""

    kind = "minilm"

    def __init__(self, encoder=None, dim: int = 384, model_dir: str | None = None, layer: int | None = None,
                 int8: bool = False, tail: str | None = None):
        self._encoder, self.dim = encoder, dim
        self.model_dir = str(model_dir) if model_dir else None
        self.layer = None if layer is None else int(layer)
        self.tail = str(tail) if tail else None
        self.int8 = bool(getattr(encoder, "int8", False)) if encoder is not None else resolve_int8(int8)

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = shared_encoder(self.model_dir, int8=self.int8, tail=self.tail)
        return self._encoder

    def use_int8(self, enabled: bool = True) -> bool:
        """Switch MiniLM to int8 (or back to float32; the model is reloaded on next use); returns whether int8
        runs (False, with a warning, where it cannot)."""
        enabled = resolve_int8(enabled)
        if enabled != self.int8:
            self.int8, self._encoder = enabled, None
        return self.int8

    def __call__(self, captions: Sequence[str]) -> dict:
        return self.from_features(self.encoder.token_features(list(captions), layer=self.layer))

    def batch_key(self):
        return self.kind, self.encoder, self.layer, self.dim

    def from_features(self, rows: Sequence) -> dict:
        """The batch of token features [L_i, dim] computed earlier (e.g. cached for training)."""
        feats, lengths = pad_features([torch.as_tensor(np.asarray(f, dtype=np.float32)) for f in rows], self.dim)
        mask = torch.arange(feats.size(1))[None, :] < lengths[:, None]
        return {"feats": feats, "lengths": lengths, "mask": mask}


class TowerTextProcessor(TextProcessor):
    """Captions -> the text tower's unit-norm embedding of each, as a one-step sequence [N, 1, dim] (``checkpoint``:
    ``hf:NAME_OR_DIR``); ``int8``: the tower in int8 in ONNX Runtime (a run-time choice, as for MiniLM)."""

    kind = "hf"

    def __init__(self, checkpoint: str, dim: int, int8: bool = False):
        self.checkpoint, self.dim = str(checkpoint), int(dim)
        self.int8 = resolve_int8(int8)

    @property
    def towers(self):
        return shared_towers(self.checkpoint, int8=self.int8)

    def use_int8(self, enabled: bool = True) -> bool:
        """Run the text tower in int8 (or float32); returns whether int8 runs (False, with a warning, where it
        cannot)."""
        self.int8 = resolve_int8(enabled)
        return self.int8

    def __call__(self, captions: Sequence[str]) -> dict:
        return self.from_features(list(self.towers.encode_text(list(captions))[:, None, :]))

    def from_features(self, rows: Sequence) -> dict:
        feats, lengths = pad_features([torch.as_tensor(np.asarray(f, dtype=np.float32)) for f in rows], self.dim)
        return {"feats": feats, "lengths": lengths, "mask": torch.ones(feats.shape[:2], dtype=torch.bool)}


def processor_for_recipe(recipe) -> TextProcessor:
    """The processor of a GloVe or MiniLM text recipe (``reelsearch.config.TextRecipe``); a vocab processor is built
    from training captions (``VocabTextProcessor.build``) or a saved word list instead."""
    if recipe.kind == "glove":
        return GloveTextProcessor()
    if recipe.kind == "hf":
        return TowerTextProcessor(recipe.encoder, recipe.dim)
    if recipe.kind == "minilm":
        return MiniLMTextProcessor(dim=recipe.dim or 384, model_dir=tower_key(recipe.encoder), layer=recipe.layer,
                                   tail=recipe.tail)
    raise ConfigError("a vocab text recipe needs its word list: VocabTextProcessor.build(captions) or the saved words")
