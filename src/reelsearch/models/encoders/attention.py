"""Sentence-conditioned soft attention over frames, Torabi et al. 2016 model M3 (§4, Fig. 3 right).

The paper: "A soft-attention aligns the output of last hidden state of language LSTM, h_N, with all feature vectors
of frames in V. Video is then encoded using weighted average of frame feature vectors and the video representation
is linearly transformed into joint embedding space"; the "attention model matching space is also 300" (§5.1). It
gives no equation; we use the additive attention of Yao et al. 2015 (the paper's ref. [31], same group):

    e[c, v, t] = w^T tanh(W_f x[v, t] + W_s s_c + b)        (matching space A = 300)
    alpha[c, v, :] = softmax over the valid frames t < len_v of e[c, v, :]
    video embedding for the pair = |W_video sum_t alpha[c, v, t] x[v, t]| / norm

Because W_video is linear it commutes with the weighted average, so each video is stored once as its projected frames
W_video x[v, t] (values) and W_f x[v, t] (keys); a [Nc, Nv] score matrix then needs only tensor ops, chunked over
captions so that the [chunk, Nv, T, A] intermediate stays bounded. s_c is the caption's joint-space embedding
(|h_N| / norm); see docs/models.md for this choice.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .masking import lengths_to_mask


class FrameStates(NamedTuple):
    """What an attention model's ``encode_video`` returns: per-frame keys and projected values, and lengths."""

    keys: torch.Tensor  # [M, T, A]
    values: torch.Tensor  # [M, T, D]
    lengths: torch.Tensor  # [M]

    def to(self, device) -> FrameStates:
        return FrameStates(self.keys.to(device), self.values.to(device), self.lengths.to(device))

    def __len__(self) -> int:  # number of videos
        return self.keys.size(0)

    def select(self, index) -> FrameStates:
        """The videos at ``index`` (slice or index tensor)."""
        return FrameStates(self.keys[index], self.values[index], self.lengths[index])


class SoftFrameAttention(nn.Module):
    """Additive attention scores between sentences and every frame of every video."""

    def __init__(self, frame_dim: int, query_dim: int, attention_dim: int = 300):
        super().__init__()
        self.frame_proj = nn.Linear(frame_dim, attention_dim)
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)
        self.score = nn.Linear(attention_dim, 1, bias=False)

    def keys(self, frames: torch.Tensor) -> torch.Tensor:
        """Per-frame keys W_f x + b: [M, T, Df] -> [M, T, A]."""
        return self.frame_proj(frames)

    def weights(self, queries: torch.Tensor, keys: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Attention weights [Nc, Nv, T]; zero on padded frames, summing to 1 over each video's valid frames."""
        q = self.query_proj(queries)  # [Nc, A]
        logits = self.score(torch.tanh(keys[None, :, :, :] + q[:, None, None, :])).squeeze(-1)
        mask = lengths_to_mask(lengths.clamp_min(1), keys.size(1))
        logits = logits.masked_fill(~mask[None], float("-inf"))
        return torch.softmax(logits, dim=-1)
