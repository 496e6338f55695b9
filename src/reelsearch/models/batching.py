"""Collate variable-length feature sequences (FeatureStore rows) into the padded batches the models read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch


def collate_sequences(seqs: Sequence[np.ndarray | torch.Tensor], dtype=torch.float32) -> tuple[torch.Tensor,
                                                                                                torch.Tensor]:
    """[T_i, D] sequences -> (feats [B, max T, D] zero padded, lengths [B]); an empty sequence has length 0."""
    if not seqs:
        raise ValueError("cannot collate an empty list of sequences")
    rows = [torch.as_tensor(np.asarray(s) if not isinstance(s, torch.Tensor) else s) for s in seqs]
    dims = {int(r.shape[1]) for r in rows}
    if len(dims) != 1:
        raise ValueError(f"sequences have different feature sizes {sorted(dims)}")
    lengths = torch.tensor([int(r.shape[0]) for r in rows], dtype=torch.long)
    feats = torch.zeros(len(rows), max(1, int(lengths.max())), dims.pop(), dtype=dtype)
    for i, r in enumerate(rows):
        feats[i, : r.shape[0]] = r.to(dtype)
    return feats, lengths


def video_batch(per_modality: Mapping[str, Sequence[np.ndarray | torch.Tensor]]) -> dict:
    """{modality: [T_i, D] sequences per video} -> {"feats": {modality: [B, T, D]}, "lengths": {modality: [B]}}."""
    feats, lengths = {}, {}
    for name, seqs in per_modality.items():
        feats[name], lengths[name] = collate_sequences(seqs)
    return {"feats": feats, "lengths": lengths}
