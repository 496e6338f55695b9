"""Feature extractors, created by name.

Every extractor has ``name``, ``modality`` ("appearance" | "motion" | "audio"), ``dim`` and ``input``
("frames" | "audio"). Frame extractors implement ``extract_frames(frames: uint8 [T, H, W, 3] RGB) -> float32 [T', D]``
and have a settable ``threads`` (the threads their runtime may use, None: its default; a caller that runs several
extractors at once sets 1);
audio extractors implement ``extract_audio(wave: float32 [N] mono in [-1, 1], sample_rate: int) -> float32 [T', D]``
and expose the ``sample_rate`` they want.
"""

from __future__ import annotations

import importlib

from reelsearch.errors import ReelsearchError

# name -> "module:factory"; imported only when asked for (torch, cv2 and friends are slow to import).
EXTRACTORS: dict[str, str] = {
    "efficientnet-lite0": "reelsearch.features.extractors.appearance:EfficientNetLite",
    "efficientnet-lite2": "reelsearch.features.extractors.appearance:EfficientNetLite",
    "backbone": "reelsearch.features.extractors.appearance:LocalBackbone",
    "hof-mbh": "reelsearch.features.extractors.motion:FlowHistograms",
    "soundnet8": "reelsearch.features.extractors.audio:SoundNet8Extractor",
    "hf-image": "reelsearch.features.extractors.clip_image:ImageTower",
}


def create_extractor(name: str, **options):
    """Create the extractor registered as ``name`` (options go to its constructor, with ``name`` first)."""
    try:
        target = EXTRACTORS[name]
    except KeyError:
        raise ReelsearchError(f"unknown extractor {name!r}; known: {', '.join(sorted(EXTRACTORS))}") from None
    module, factory = target.split(":")
    return getattr(importlib.import_module(module), factory)(name, **options)
