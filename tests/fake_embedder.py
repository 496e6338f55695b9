"""The index tests' stand-in embedder over real files (tests/test_index_library.py and the others), light to import:
the worker processes of tests/test_index_workers.py import it, not torch (3-4 s of CPU each)."""

from __future__ import annotations

import hashlib
import os

import numpy as np

from reelsearch.index import EmbeddedMedia

DIM = 8
N_FRAMES = 4


def fake_vectors(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic (video vector, frame vectors) derived from the file's bytes."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(data).digest()[:8], "little"))
    frames = rng.standard_normal((N_FRAMES, DIM)).astype(np.float32)
    frames /= np.linalg.norm(frames, axis=1, keepdims=True)
    video = frames.mean(0)
    return video / np.linalg.norm(video), frames


class FakeEmbedder:
    """embed_fn over real files: vectors from the bytes, timestamps 0.5 s apart; counts calls, can fail."""

    def __init__(self, fail_on: set[str] = frozenset(), interrupt_after: int | None = None, biased: bool = False):
        self.calls: list[str] = []
        self.fail_on = set(fail_on)
        self.interrupt_after = interrupt_after
        self.biased = biased  # give each file a bias in [-0.6, 0.6) from its bytes

    def __call__(self, path: str) -> EmbeddedMedia:
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls.append(os.path.basename(path))
        if os.path.basename(path) in self.fail_on:
            raise ValueError("cannot decode this one")
        with open(path, "rb") as fh:
            data = fh.read()
        video, frames = fake_vectors(data)
        return EmbeddedMedia(video, frames, np.arange(N_FRAMES) * 0.5, duration=2.0,
                             bias=fake_bias(data) if self.biased else 0.0)


def fake_bias(data: bytes) -> float:
    return (hashlib.sha256(b"bias" + data).digest()[0] - 128) / 128 * 0.6
