"""The image tower of a CLIP- or SigLIP-family checkpoint (``hf:NAME_OR_DIR``) as a frame extractor: one unit-norm
image embedding per frame, made by the checkpoint's own image processor (``reelsearch.towers.clip``), in batches.

Options (a recipe's): ``checkpoint`` (``hf:NAME_OR_DIR``), ``preprocessing`` (the checkpoint's image and text
settings when the recipe was made: a checkpoint whose settings changed since is refused, its features would
differ), ``runtime`` (torch | onnxruntime | auto; ``$REELSEARCH_CLIP_RUNTIME``), ``batch_size`` (16).
"""

from __future__ import annotations

import numpy as np

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.towers.clip import shared_towers

from .appearance import check_frames

NAME = "hf-image"


class ImageTower:
    """Frames -> the checkpoint's image embeddings, float32 [T, dim] (see the module docstring)."""

    modality = "appearance"
    input = "frames"
    per_frame = True  # row i depends on frame i only: frames of several items may share one call
    threads: int | None = None

    def __init__(self, name: str = NAME, checkpoint: str | None = None, preprocessing: dict | None = None,
                 runtime: str | None = None, batch_size: int | None = None, device: str | None = "cpu"):
        if not checkpoint:
            raise ReelsearchError(f"{name}: option 'checkpoint' (hf:NAME_OR_DIR) is required")
        if device not in (None, "cpu", "auto"):
            raise ReelsearchError(f"{name}: runs on the CPU (torch or ONNX Runtime); device {device!r} asked for")
        self.name, self.checkpoint = name, str(checkpoint)
        self.towers = shared_towers(self.checkpoint, runtime=runtime)
        if preprocessing is not None and preprocessing != self.towers.preprocessing:
            raise ConfigError(f"{self.checkpoint}: its preprocessing is not the one the recipe was made with "
                              f"(recipe {preprocessing}, checkpoint {self.towers.preprocessing}); its features "
                              "would differ: index again with the checkpoint as it is now")
        self.dim, self.weights_id = self.towers.dim, self.towers.weights
        self.batch_size = int(batch_size or 16)

    def extract_frames(self, frames: np.ndarray) -> np.ndarray:
        """One unit-norm embedding per frame: uint8 [T, H, W, 3] RGB -> float32 [T, dim]."""
        frames = check_frames(frames)
        return self.towers.encode_images(frames, self.batch_size)
