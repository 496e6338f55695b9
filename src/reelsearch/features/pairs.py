"""Caption-video pairs of one split with their features in memory: what training and evaluation read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from reelsearch.errors import ReelsearchError


@dataclass
class PairData:
    """Every caption of a split paired with its video.

    captions[i] describes video cap2vid[i]; video_feats[modality][j] is video j's [T, D] feature sequence (kept in
    float16 to halve memory). ``text_features`` optionally holds each caption's precomputed text-processor input
    (e.g. cached MiniLM token features), which ``text_batch`` then uses instead of running the processor.
    """

    captions: list[str]
    cap2vid: np.ndarray
    video_keys: list[str]
    video_feats: dict[str, list[np.ndarray]]
    text_features: list[np.ndarray] | None = None
    skipped: list[str] = field(default_factory=list)

    @classmethod
    def concat(cls, parts: list[PairData]) -> PairData:
        """One PairData of several (e.g. two datasets' train splits), in order."""
        if len(parts) == 1:
            return parts[0]
        mods = set(parts[0].video_feats)
        if any(set(p.video_feats) != mods for p in parts):
            raise ReelsearchError(f"datasets carry different modalities: {[sorted(p.video_feats) for p in parts]}")
        if len({p.text_features is None for p in parts}) != 1:
            raise ReelsearchError("cannot mix datasets with and without precomputed text features")
        offsets = np.cumsum([0] + [len(p.video_keys) for p in parts[:-1]])
        return cls(
            captions=[c for p in parts for c in p.captions],
            cap2vid=np.concatenate([p.cap2vid + off for p, off in zip(parts, offsets)]),
            video_keys=[k for p in parts for k in p.video_keys],
            video_feats={m: [f for p in parts for f in p.video_feats[m]] for m in parts[0].video_feats},
            text_features=None if parts[0].text_features is None else [f for p in parts for f in p.text_features],
            skipped=[k for p in parts for k in p.skipped],
        )

    def text_batch(self, processor, idx, device: torch.device) -> dict:
        """The text batch of captions ``idx`` through ``processor`` (or from the precomputed features)."""
        if self.text_features is not None:
            batch = processor.from_features([self.text_features[i] for i in idx])
        else:
            batch = processor([self.captions[i] for i in idx])
        return _to_device(batch, device)

    def video_batch(self, vid_idx, device: torch.device) -> dict:
        """The video batch of videos ``vid_idx``: {"feats", "lengths"}, per modality when there are several."""
        feats, lengths = {}, {}
        for mod, seqs in self.video_feats.items():
            feats[mod], lengths[mod] = pad_sequences([seqs[j] for j in vid_idx])
        if len(feats) == 1:  # single-modality models take {"feats", "lengths"} directly
            (mod,) = feats
            return {"feats": feats[mod].to(device), "lengths": lengths[mod].to(device)}
        return {"feats": {m: f.to(device) for m, f in feats.items()},
                "lengths": {m: n.to(device) for m, n in lengths.items()}}

    def video_items(self, vid_idx=None) -> list[dict[str, np.ndarray]]:
        """Feature dicts {modality: [T, D]} of videos ``vid_idx`` (default: all), for ``model.encode_video``."""
        idx = range(len(self.video_keys)) if vid_idx is None else vid_idx
        return [{m: seqs[j] for m, seqs in self.video_feats.items()} for j in idx]


def pad_sequences(seqs: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack [T_i, D] arrays into a zero-padded float32 [B, T_max, D] tensor and a [B] length tensor."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    dim = np.asarray(seqs[0]).shape[1]
    out = torch.zeros(len(seqs), max(1, int(lengths.max())), dim, dtype=torch.float32)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.from_numpy(np.require(s, np.float32, ["W"]))  # memory-mapped rows are read-only
    return out, lengths


def _to_device(batch, device):
    if torch.is_tensor(batch):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def build_pair_data(items, stores: Mapping[str, object], desc: str = "loading features",
                    progress: bool = True) -> PairData:
    """Pairs of ``items`` (dataset Items) whose features exist for every feature name of ``stores``:
    ``{name: store}`` (the store holds it under that name) or ``{name: (store, name in the store)}``.

    Items lacking a feature are skipped (listed in ``PairData.skipped``) so one missing video never stops training;
    items without captions are skipped too.
    """
    where = {name: (s if isinstance(s, tuple) else (s, name)) for name, s in stores.items()}
    for store, stored in where.values():
        if stored not in store.modalities():
            raise ReelsearchError(f"feature store {store.root} has no {stored!r} features "
                                  f"(it has: {', '.join(store.modalities()) or 'none'})")
    captions: list[str] = []
    cap2vid: list[int] = []
    keys: list[str] = []
    feats: dict[str, list[np.ndarray]] = {m: [] for m in where}
    skipped: list[str] = []
    for it in tqdm(items, desc=desc, unit="item", leave=False, disable=not progress):
        if not it.captions or not all(store.has(stored, it.key) for store, stored in where.values()):
            skipped.append(it.id)
            continue
        j = len(keys)
        keys.append(it.key)
        for m, (store, stored) in where.items():
            feats[m].append(np.asarray(store.get_raw(stored, it.key), dtype=np.float16))
        captions += it.captions
        cap2vid += [j] * len(it.captions)
    if not keys:
        roots = ", ".join(sorted({str(s.root) for s, _ in where.values()}))
        raise ReelsearchError(f"none of the {len(items)} items has features for {', '.join(where)} in {roots}")
    return PairData(captions, np.asarray(cap2vid, dtype=np.int64), keys, feats, None, skipped)
