"""Caption-video pairs of one split, with video features held in memory and text turned into model inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from reelsearch.errors import ReelsearchError


@dataclass
class PairData:
    """Every caption of a split paired with its video.

    captions[i] describes video cap2vid[i]; video_feats[modality][j] is video j's [T, D] feature sequence (kept in
    float16 to halve memory). ``text_fn(captions)`` turns caption strings into the model's text batch (the model's
    text processor); ``text_cache`` optionally holds precomputed per-caption inputs (e.g. transformer token
    features) that ``text_fn`` accepts through its ``features=`` argument.
    """

    captions: list[str]
    cap2vid: np.ndarray
    video_keys: list[str]
    video_feats: dict[str, list[np.ndarray]]
    text_fn: Callable[..., dict]
    text_cache: list[np.ndarray] | None = None
    skipped: list[str] = field(default_factory=list)

    @classmethod
    def concat(cls, parts: list[PairData]) -> PairData:
        """One PairData of several (e.g. two datasets' train splits), in order; text handling of the first."""
        if len(parts) == 1:
            return parts[0]
        mods = set(parts[0].video_feats)
        if any(set(p.video_feats) != mods for p in parts):
            raise ReelsearchError(f"datasets carry different modalities: {[sorted(p.video_feats) for p in parts]}")
        if len({p.text_cache is None for p in parts}) != 1:
            raise ReelsearchError("cannot mix datasets with and without precomputed text features")
        offsets = np.cumsum([0] + [len(p.video_keys) for p in parts[:-1]])
        return cls(
            captions=[c for p in parts for c in p.captions],
            cap2vid=np.concatenate([p.cap2vid + off for p, off in zip(parts, offsets)]),
            video_keys=[k for p in parts for k in p.video_keys],
            video_feats={m: [f for p in parts for f in p.video_feats[m]] for m in parts[0].video_feats},
            text_fn=parts[0].text_fn,
            text_cache=None if parts[0].text_cache is None else [f for p in parts for f in p.text_cache],
            skipped=[k for p in parts for k in p.skipped],
        )

    def text_batch(self, idx: np.ndarray, device: torch.device) -> dict:
        caps = [self.captions[i] for i in idx]
        if self.text_cache is not None:
            batch = self.text_fn(caps, features=[self.text_cache[i] for i in idx])
        else:
            batch = self.text_fn(caps)
        return _to_device(batch, device)

    def video_batch(self, vid_idx: np.ndarray, device: torch.device) -> dict:
        out = {}
        for mod, seqs in self.video_feats.items():
            feats, lengths = pad_sequences([seqs[j] for j in vid_idx])
            out[mod] = {"feats": feats.to(device), "lengths": lengths.to(device)}
        if len(out) == 1:  # single-modality models take {"feats", "lengths"} directly
            return next(iter(out.values()))
        return out


def pad_sequences(seqs: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack [T_i, D] arrays into a zero-padded float32 [B, T_max, D] tensor and a [B] length tensor."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    dim = seqs[0].shape[1]
    out = torch.zeros(len(seqs), int(lengths.max()), dim, dtype=torch.float32)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.from_numpy(np.asarray(s, dtype=np.float32))
    return out, lengths


def _to_device(batch, device):
    if torch.is_tensor(batch):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def build_pair_data(items, store, modalities: list[str], text_fn: Callable[..., dict],
                    text_features: Callable[[list[str]], list[np.ndarray]] | None = None,
                    desc: str = "loading features") -> PairData:
    """Pairs of ``items`` (dataset Items) whose features exist in ``store`` for every modality.

    Items lacking a modality are skipped (listed in ``PairData.skipped``) so one missing video never stops training;
    items without captions are skipped too. ``text_features`` precomputes per-caption inputs once (e.g. MiniLM token
    features) instead of on every batch.
    """
    for mod in modalities:
        if mod not in store.modalities():
            raise ReelsearchError(f"feature store {store.root} has no {mod!r} features "
                                  f"(it has: {', '.join(store.modalities()) or 'none'})")
    captions: list[str] = []
    cap2vid: list[int] = []
    keys: list[str] = []
    feats: dict[str, list[np.ndarray]] = {m: [] for m in modalities}
    skipped: list[str] = []
    for it in tqdm(items, desc=desc, unit="item", leave=False):
        if not it.captions or not all(store.has(m, it.key) for m in modalities):
            skipped.append(it.id)
            continue
        j = len(keys)
        keys.append(it.key)
        for m in modalities:
            feats[m].append(np.asarray(store.get_raw(m, it.key), dtype=np.float16))
        captions += it.captions
        cap2vid += [j] * len(it.captions)
    if not keys:
        raise ReelsearchError(f"none of the {len(items)} items has features for {', '.join(modalities)} "
                              f"in {store.root}")
    cache = text_features(captions) if text_features is not None else None
    return PairData(captions, np.asarray(cap2vid, dtype=np.int64), keys, feats, text_fn, cache, skipped)
