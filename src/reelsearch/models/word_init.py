"""Initialise learned word embeddings (Mithun's 300-d) from our 50-d GloVe vectors.

Mithun et al. 2018 §3.2 train the word embeddings end to end from scratch (the default, ``glove_init: null``).
As an option, words found in GloVe start from their vector, mapped from 50 to 300 dimensions:
  pad      the 50 GloVe values in the first 50 dimensions, zeros after
  project  a fixed orthonormal map R [300, 50] (seeded QR), e = R g, which keeps norms and inner products
Words missing from GloVe keep their random initialisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from reelsearch.errors import ConfigError

GLOVE_INIT_MODES = ("pad", "project")


@torch.no_grad()
def init_from_glove(embedding: nn.Embedding, words: Sequence[str], glove, mode: str = "pad", seed: int = 0) -> int:
    """Overwrite rows of ``embedding`` for words in ``glove``; returns how many rows were set."""
    if mode not in GLOVE_INIT_MODES:
        raise ConfigError(f"unknown glove_init {mode!r}; choose one of {GLOVE_INIT_MODES}")
    vectors = torch.as_tensor(glove.vectors, dtype=torch.float32)
    d_in, d_out = vectors.shape[1], embedding.embedding_dim
    if d_in > d_out:
        raise ConfigError(f"GloVe vectors ({d_in}-d) are larger than the embeddings ({d_out}-d)")
    if mode == "project":
        gen = torch.Generator().manual_seed(seed)
        basis, _ = torch.linalg.qr(torch.randn(d_out, d_in, generator=gen))  # orthonormal columns
    rows = [(i, glove.index[w]) for i, w in enumerate(words) if i > 1 and w in glove.index]
    if not rows:
        return 0
    target = torch.tensor([r[0] for r in rows])
    g = vectors[torch.tensor([r[1] for r in rows])]
    if mode == "pad":
        new = torch.zeros(len(rows), d_out)
        new[:, :d_in] = g
    else:
        new = g @ basis.T
    embedding.weight[target] = new.to(embedding.weight.dtype)
    return len(rows)
