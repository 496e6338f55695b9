"""Masks and masked reductions over padded, batch-first sequences [B, T, D] with lengths [B]."""

from __future__ import annotations

import torch


def lengths_to_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean mask [B, max_len]: True at valid steps (t < length)."""
    steps = torch.arange(max_len, device=lengths.device)
    return steps[None, :] < lengths.to(steps.device)[:, None]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x [B, T, D] over valid steps; rows with no valid step give zeros."""
    m = mask.to(x.dtype).unsqueeze(-1)
    return (x * m).sum(1) / m.sum(1).clamp_min(1.0)


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max of x [B, T, D] over valid steps (padding never wins); rows with no valid step give zeros."""
    filled = x.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    out = filled.max(dim=1).values
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


def last_valid(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x[b, lengths[b] - 1] for each row of x [B, T, D] (the last valid step, gathered)."""
    idx = (lengths.clamp_min(1) - 1).to(x.device).view(-1, 1, 1).expand(-1, 1, x.size(-1))
    return x.gather(1, idx).squeeze(1)


def zero_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x with every padded step set to 0, so junk in the padding cannot leak into convolutions."""
    return x.masked_fill(~mask.unsqueeze(-1), 0.0)
