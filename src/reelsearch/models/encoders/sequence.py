"""One configurable sequence encoder for text and video: [B, T, D] (or token ids [B, T]) + lengths -> [B, out_dim].

Stages (each optional), all batch-first and masked by length:
  embedding  learned word embeddings over vocabulary ids (Mithun et al. 2018 §3.2: 300-d, trained end to end)
  sequence   "lstm" | "gru" | "bigru" (packed sequences, so padding is never read) | "transformer" (key padding mask)
  pool       "mean" over valid steps | "last" valid step (the RNN's final state)
  smsdc      SCDE §3.3 local features over the sequence states, concatenated to the mean-pooled global ones (Eq. 9)

The paper encoders are presets of this class (see ``reelsearch.models.registry``):
  word average (Torabi M1)          sequence=None, pool="mean"
  LSTM last state (Torabi M2, M3)   sequence="lstm", pool="last"
  GRU on word embeddings (Mithun)   vocab_size=V, embed_dim=300, sequence="gru", pool="last"
  mean over frames (Torabi, Mithun) sequence=None, pool="mean"
  bi-GRU + SMSDC video (SCDE)       sequence="bigru", pool="mean", smsdc={"n": 4, "m": 2}
  Transformer + SMSDC text (SCDE)   sequence="transformer", pool="mean", smsdc={"n": 3, "m": 2}
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from reelsearch.errors import ConfigError

from .masking import last_valid, lengths_to_mask, masked_mean, zero_padding
from .smsdc import SMSDC

SEQUENCE_KINDS = (None, "lstm", "gru", "bigru", "transformer")
POOL_KINDS = ("mean", "last")


def sinusoidal_positions(length: int, dim: int, device=None) -> torch.Tensor:
    """Fixed sinusoidal position encodings [length, dim] (Vaswani et al. 2017 §3.5)."""
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, device=device)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : dim // 2]
    return pe


class TransformerStack(nn.Module):
    """K Transformer encoder layers over (frozen) token features, SCDE Eq. (4); d_model = feature size.

    Post-norm layers (BERT's layout); ``activation="gelu"`` and ``layer_norm_eps=1e-12`` make each layer compute what
    a BERT layer computes, so pretrained layers can be loaded (``reelsearch.models.transformer_init``)."""

    def __init__(self, dim: int, num_layers: int, heads: int, ff_dim: int, dropout: float, positional: bool,
                 activation: str = "relu", layer_norm_eps: float = 1e-5):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, heads, ff_dim, dropout=dropout, activation=activation,
                                           layer_norm_eps=layer_norm_eps, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.positional = positional

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.positional:
            x = x + sinusoidal_positions(x.size(1), x.size(2), x.device).to(x.dtype)
        return zero_padding(self.layers(x, src_key_padding_mask=~mask), mask)


class SequenceEncoder(nn.Module):
    """Encode padded sequences to fixed vectors; see the module docstring for the stages."""

    def __init__(
        self,
        input_dim: int,
        sequence: str | None = None,
        hidden_size: int | None = None,
        pool: str = "mean",
        vocab_size: int | None = None,
        embed_dim: int | None = None,
        num_layers: int = 1,
        heads: int = 8,
        ff_dim: int | None = None,
        dropout: float = 0.0,
        positional: bool = True,
        smsdc: dict | None = None,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        input_dropout: float = 0.0,
    ):
        super().__init__()
        if sequence not in SEQUENCE_KINDS:
            raise ConfigError(f"unknown sequence model {sequence!r}; choose one of {SEQUENCE_KINDS}")
        if pool not in POOL_KINDS:
            raise ConfigError(f"unknown pooling {pool!r}; choose one of {POOL_KINDS}")
        if pool == "last" and sequence not in ("lstm", "gru"):
            raise ConfigError("pool='last' needs a unidirectional RNN (sequence='lstm' or 'gru')")
        self.sequence, self.pool = sequence, pool
        self.input_dropout = nn.Dropout(input_dropout) if input_dropout else None
        self.embedding = None
        if vocab_size is not None:
            embed_dim = embed_dim or input_dim
            self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
            input_dim = embed_dim
        self.input_dim = input_dim
        if sequence in ("lstm", "gru", "bigru"):
            rnn_cls = nn.LSTM if sequence == "lstm" else nn.GRU
            self.rnn = rnn_cls(input_dim, hidden_size, num_layers=num_layers, batch_first=True,
                               bidirectional=sequence == "bigru")
            state_dim = hidden_size * (2 if sequence == "bigru" else 1)
        elif sequence == "transformer":
            self.transformer = TransformerStack(input_dim, num_layers, heads, ff_dim or 4 * input_dim, dropout,
                                                positional, activation, layer_norm_eps)
            state_dim = input_dim
        else:
            state_dim = input_dim
        self.state_dim = state_dim
        self.smsdc = SMSDC(state_dim, smsdc["n"], smsdc["m"], smsdc.get("stacked", True)) if smsdc else None
        self.output_dim = state_dim + (self.smsdc.output_dim if self.smsdc is not None else 0)

    def states(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-step states [B, T, state_dim] (zero at padding) and the valid-step mask [B, T]."""
        lengths = lengths.clamp_min(1)
        if self.embedding is not None:
            x = self.embedding(x)
        if self.input_dropout is not None:
            x = self.input_dropout(x)
        mask = lengths_to_mask(lengths, x.size(1))
        if self.sequence in ("lstm", "gru", "bigru"):
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            h, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        elif self.sequence == "transformer":
            h = self.transformer(x, mask)
        else:
            h = zero_padding(x, mask)
        return h, mask

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h, mask = self.states(x, lengths)
        if self.pool == "last":
            pooled = last_valid(h, lengths.clamp_min(1))
        else:
            pooled = masked_mean(h, mask)
        if self.smsdc is None:
            return pooled
        return torch.cat([pooled, self.smsdc(h, mask)], dim=-1)
