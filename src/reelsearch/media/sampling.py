"""Which frames a recipe keeps: sampling policies (``every:N``, ``interval:S``, ``uniform:K``, ``all``) and their plans.

Sampling semantics (all times in seconds from the start of the video stream, so the first frame is at ~0):

* ``every:N`` keeps frame indices 0, N, 2N, ... (decode order = presentation order); every frame is decoded.
* ``interval:S`` keeps the frame *displayed* at 0, S, 2S, ... (the last frame whose timestamp is <= the target).
* ``uniform:K`` keeps the frames displayed at the centres of K equal segments of the duration.
* ``all`` keeps every frame.

``max_frames`` caps the count: when more would be sampled, that many are kept, spread uniformly over them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reelsearch.errors import ReelsearchError

TIME_EPS = 1e-6  # seconds: timestamps closer than this are the same time

@dataclass(frozen=True)
class SamplingPolicy:
    """Which frames to keep: kind "every" (value = N), "interval" (seconds), "uniform" (K) or "all"."""

    kind: str = "interval"
    value: float = 0.5
    max_frames: int | None = None

    def __post_init__(self):
        if self.kind not in ("every", "interval", "uniform", "all"):
            raise ReelsearchError(f"unknown sampling kind {self.kind!r}; use every:N, interval:SECONDS, uniform:K, all")
        if self.kind != "all" and not self.value > 0:
            raise ReelsearchError(f"sampling {self.kind} needs a positive value, got {self.value}")
        if self.kind in ("every", "uniform") and self.value != int(self.value):
            raise ReelsearchError(f"sampling {self.kind} needs an integer, got {self.value}")
        if self.max_frames is not None and self.max_frames < 1:
            raise ReelsearchError(f"max_frames must be >= 1, got {self.max_frames}")

    def __str__(self) -> str:
        return "all" if self.kind == "all" else f"{self.kind}:{self.value:g}"


def parse_policy(spec: str, max_frames: int | None = None) -> SamplingPolicy:
    """Parse ``"every:10" | "interval:0.5" | "uniform:16" | "all"`` into a SamplingPolicy."""
    spec = spec.strip()
    if spec == "all":
        return SamplingPolicy("all", 0, max_frames)
    kind, sep, value = spec.partition(":")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not sep or number is None:
        raise ReelsearchError(f"bad sampling {spec!r}; use every:N, interval:SECONDS, uniform:K or all")
    return SamplingPolicy(kind, number, max_frames)


def spread(n: int, k: int) -> np.ndarray:
    """``k`` indices spread uniformly over ``range(n)`` (all of them when k >= n), first and last included."""
    if k >= n:
        return np.arange(n)
    if k == 1:
        return np.array([(n - 1) // 2])
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(int))


def plan_times(policy: SamplingPolicy, duration: float, fps: float, window: tuple[float, float]) -> np.ndarray:
    """Target times (s) of an interval/uniform policy over ``window`` = (begin, end) of the stream."""
    begin, end = window
    length = max(0.0, end - begin)
    if policy.kind == "interval":
        n = max(1, math.floor(length / policy.value - TIME_EPS) + 1) if length > 0 else 1
        times = begin + policy.value * np.arange(n)
    elif policy.kind == "uniform":
        k = int(policy.value)
        times = begin + (np.arange(k) + 0.5) * length / k
    else:
        raise ValueError(policy.kind)
    if policy.max_frames is not None:
        times = times[spread(len(times), policy.max_frames)]
    return times
