"""Cutting a video's sampled frames into segments: runs of frames whose features stay alike (a shot, a scene).

The cut is the partition of the frames into consecutive runs that minimises, over all partitions,

    sum over runs of  sum_{t in run} w_t || f_t - mean_w(run) ||^2   +   penalty x (number of runs)

with each ``f_t`` the frame's feature vector scaled to unit length, ``w_t`` the seconds it is on screen (so the
cost does not depend on the sampling rate), ``mean_w`` the mean weighted so, and no run longer than ``max_seconds``
(kernel temporal segmentation with a linear kernel, Potapov et al. 2014, ECCV, sec. 3, with the number of
segments set by a fixed penalty instead of their criterion). A hard cut is a jump between two runs' means; a
cross-fade or a slow change of content (a zoom from a landscape to a face) makes the frames drift away from the
run's mean, and the drift's cost outgrows the penalty; the fade's middle frames go to whichever side they are
closer to. A shot whose frames stay alike (a still, a small zoom or pan) costs less than a cut, so a short clip of
one shot is one segment. The minimum is exact: dynamic programming over the frames, each frame looking back over
the frames that fit in ``max_seconds`` (so linear in the video's length), in blocks of a few thousand frames
(bounded memory).

The default penalty was tuned on slideshows of Flickr8k dev photos (hard cuts, cross-fades of 0.5 to 2 s, slow
zooms) sampled at 1 frame a second, with the default model's per-frame features (EfficientNet-Lite0 with its tuned
tail, :mod:`reelsearch.features.extractors.appearance`): docs/extraction.md, "Segments". Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reelsearch.errors import ReelsearchError

_BLOCK = 4096  # frames whose costs are computed at once (memory: about (block + window) x dim doubles)


@dataclass(frozen=True)
class SegmentPolicy:
    """How frames are cut into segments: the cost of one more segment (``penalty``, in seconds x squared distance
    between unit feature vectors) and the longest a segment may be (``max_seconds``)."""

    penalty: float = 1.0  # tuned: docs/extraction.md, "Segments"
    max_seconds: float = 30.0

    def __post_init__(self):
        if not self.penalty > 0 or not self.max_seconds > 0:
            raise ReelsearchError(f"segment policy needs penalty > 0 and max_seconds > 0, got {self}")

    @property
    def key(self) -> str:
        """What determines the cut, as an index records it: ``"kts:penalty=1,max=30"``."""
        return f"kts:penalty={self.penalty:g},max={self.max_seconds:g}"


@dataclass(frozen=True)
class Segment:
    """Frames ``[first, stop)`` of a video, on screen over ``[start, end)`` seconds (see :func:`cut`)."""

    first: int
    stop: int
    start: float
    end: float

    @property
    def frames(self) -> int:
        return self.stop - self.first


def unit_rows(features: np.ndarray) -> np.ndarray:
    """``features`` [T, D] as float64 rows of unit length (a zero row stays zero)."""
    x = np.asarray(features, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def segment_ends(times: np.ndarray, end: float | None = None) -> np.ndarray:
    """When each frame stops being on screen: the next frame's time, and for the last one ``end`` (default: its
    time plus the median frame interval, or 1 s for a single frame)."""
    times = np.asarray(times, dtype=np.float64)
    if end is None:
        step = float(np.median(np.diff(times))) if len(times) > 1 else 1.0
        end = float(times[-1]) + step if len(times) else 0.0
    return np.append(times[1:], max(float(end), float(times[-1]))) if len(times) else times


def cut_points(features: np.ndarray, times: np.ndarray, policy: SegmentPolicy = SegmentPolicy(),
               end: float | None = None) -> np.ndarray:
    """The segments' bounds as frame indices ``[0, b1, ..., T]`` (int64, increasing): segment s is frames
    ``[bounds[s], bounds[s + 1])``. ``times`` [T]: the frames' times (s, increasing); ``end``: when the last frame
    stops (see :func:`segment_ends`). A frame longer than ``max_seconds`` (a gap) is a segment of its own."""
    x = unit_rows(features)
    times = np.asarray(times, dtype=np.float64)
    if x.ndim != 2 or times.shape != (len(x),):
        raise ReelsearchError(f"cut_points needs features [T, D] and times [T], got {x.shape} and {times.shape}")
    n = len(x)
    if n == 0:
        return np.zeros(1, np.int64)
    if np.any(np.diff(times) < 0):
        raise ReelsearchError("cut_points needs frame times in increasing order")
    stops = segment_ends(times, end)
    # lo[j]: the first frame a segment ending with frame j - 1 may start at (its span fits in max_seconds)
    lo = np.searchsorted(times, stops - policy.max_seconds - 1e-9, side="left")
    lo = np.minimum(lo, np.arange(n))
    best = np.zeros(n + 1)  # best[j]: the least cost of frames [0, j)
    back = np.zeros(n + 1, np.int64)  # back[j]: where the last segment of that best cut starts
    w = np.maximum(stops - times, 1e-6)  # each frame counts for the seconds it is on screen
    wsq = np.concatenate([[0.0], np.cumsum(w * np.einsum("td,td->t", x, x))])  # prefix sums of w ||f||^2
    wsum = np.concatenate([[0.0], np.cumsum(w)])
    for b0 in range(0, n, _BLOCK):
        b1 = min(n, b0 + _BLOCK)
        base = int(lo[b0:b1].min())
        prefix = np.zeros((b1 - base + 1, x.shape[1]))
        np.cumsum(x[base:b1] * w[base:b1, None], axis=0, out=prefix[1:])  # prefix[k]: sum of w f over [base, +k)
        for j in range(b0 + 1, b1 + 1):
            i = np.arange(lo[j - 1], j)  # candidate starts of the segment ending at frame j - 1
            sums = prefix[j - base] - prefix[i - base]
            scatter = wsq[j] - wsq[i] - np.einsum("id,id->i", sums, sums) / (wsum[j] - wsum[i])
            cost = best[i] + scatter + policy.penalty
            k = int(np.argmin(cost))
            best[j], back[j] = cost[k], i[k]
    bounds = [n]
    while bounds[-1] > 0:
        bounds.append(int(back[bounds[-1]]))
    return np.asarray(bounds[::-1], np.int64)


def cut(features: np.ndarray, times: np.ndarray, policy: SegmentPolicy = SegmentPolicy(),
        end: float | None = None) -> list[Segment]:
    """The video's segments (see :func:`cut_points`) with their times: a change between two sampled frames is
    placed half way between them (the best guess, and within half a sampling interval of the truth for a hard cut),
    so a segment runs from that time to the next change (the first from its first frame, the last to ``end``)."""
    times = np.asarray(times, dtype=np.float64)
    bounds = cut_points(features, times, policy, end)
    if len(bounds) < 2:
        return []
    stops = segment_ends(times, end)
    starts = [float(times[0])] + [float(times[b - 1] + times[b]) / 2 for b in bounds[1:-1]]
    ends = starts[1:] + [float(stops[-1])]
    return [Segment(int(a), int(b), s, e) for a, b, s, e in zip(bounds[:-1], bounds[1:], starts, ends, strict=True)]
