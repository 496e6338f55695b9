"""Motion extractor ``hof-mbh``: histograms of dense optical flow between consecutive sampled frames.

The "activity" cue when no I3D-style weights are at hand: HOF (flow orientations) and MBH (orientations of the
spatial gradients of each flow component, which cancels constant camera motion), as in the dense-trajectory
descriptors of Wang et al. (IJCV 2013), pooled over a spatial grid of cells plus the whole frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.features.extractors.appearance import check_frames

# Farneback parameters (OpenCV's reference example): pyramid x0.5 over 3 levels, 15 px windows, 3 iterations.
FARNEBACK = dict(pyr_scale=0.5, levels=3, winsize=15, iterations=3, poly_n=5, poly_sigma=1.2, flags=0)


def to_small_gray(frame: np.ndarray, short_side: int) -> np.ndarray:
    """RGB ``uint8 [H, W, 3]`` -> grayscale ``uint8`` with its shorter side resized to ``short_side``."""
    gray = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    h, w = gray.shape
    scale = short_side / min(h, w)
    if scale != 1:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        gray = cv2.resize(gray, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    return gray


def dense_flow(prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """Farneback optical flow ``float32 [h, w, 2]`` (dx, dy in pixels; +x right, +y down) from ``prev`` to ``nxt``."""
    return cv2.calcOpticalFlowFarneback(prev, nxt, None, **FARNEBACK)


def cell_index(h: int, w: int, grid: tuple[int, int]) -> np.ndarray:
    """``int [h, w]`` map of grid cells, numbered row-major (``rows x cols`` equal-as-possible cells)."""
    rows, cols = grid
    r = (np.arange(h) * rows) // h
    c = (np.arange(w) * cols) // w
    return (r[:, None] * cols + c[None, :]).astype(np.int64)


def orientation_histograms(vx: np.ndarray, vy: np.ndarray, cells: np.ndarray, n_cells: int, bins: int,
                           zero_threshold: float | None = None) -> np.ndarray:
    """Magnitude-weighted orientation histograms of the vector field ``(vx, vy)``, one per cell: ``[n_cells, B]``.

    Bin ``k`` is centred on ``k * 360 / bins`` degrees, measured from +x towards +y (image coordinates, y down:
    with 8 bins, 0 = right, 2 = down, 4 = left, 6 = up); each vector's magnitude is split linearly between the two
    nearest bins. With ``zero_threshold``, vectors of magnitude <= it add 1 to an extra last bin ("no motion")
    instead (so ``B = bins + 1``), as HOF in Wang et al.'s DenseTrack code.
    """
    mag = np.hypot(vx, vy).ravel()
    fbin = (np.degrees(np.arctan2(vy, vx)).ravel() % 360.0) * (bins / 360.0)
    lo = np.floor(fbin)
    frac = fbin - lo
    b0 = lo.astype(np.int64) % bins
    b1 = (b0 + 1) % bins
    w0, w1 = mag * (1 - frac), mag * frac
    width = bins + (zero_threshold is not None)
    cell = cells.ravel() * width
    if zero_threshold is not None:
        still = mag <= zero_threshold
        b0 = np.where(still, bins, b0)
        w0 = np.where(still, 1.0, w0)
        w1 = np.where(still, 0.0, w1)
    flat = np.bincount(cell + b0, w0, n_cells * width) + np.bincount(cell + b1, w1, n_cells * width)
    return flat.reshape(n_cells, width)


def hellinger(hists: np.ndarray, floor: np.ndarray | float = 0.0) -> np.ndarray:
    """Divide each row by ``max(its sum, floor)``, then square-root (RootSIFT / Hellinger).

    A row with sum >= floor gets unit L2 norm; a weaker row keeps norm ``sqrt(sum / floor)`` (no amplified noise);
    an empty row stays 0.
    """
    total = np.maximum(hists.sum(axis=-1, keepdims=True), np.reshape(floor, (-1, 1)))
    return np.sqrt(np.divide(hists, total, out=np.zeros_like(hists), where=total > 0))


class FlowHistograms:
    """HOF + MBH of Farneback flow between consecutive frames: ``uint8 [T, H, W, 3]`` -> ``float32 [T-1, dim]``.

    Per pair of consecutive frames (grayscale, shorter side resized to ``short_side`` = 128 px):
      - HOF: flow orientation histogram, ``bins`` (8) magnitude-weighted bins + 1 no-motion bin (|flow| <=
        ``min_flow`` = 0.4 px, counted 1 per pixel);
      - MBHx / MBHy: orientation histograms (``bins`` bins, magnitude-weighted) of the gradients (central
        differences) of the flow's x and y components;
    each over the ``grid`` (2 x 2) cells, row-major, and then the whole frame ("regions" = cells + global);
    each histogram L1-normalised then square-rooted (Hellinger / RootSIFT). An MBH histogram is divided by at least
    ``min_boundary`` (0.05) x its region's pixel count, so flat flow (a still scene, a camera pan) gives small MBH
    instead of amplified noise. Flow within ``margin`` (8) px of the border is dropped first: Farneback is
    unreliable where content enters or leaves the frame. Layout (descriptor-major):
    ``[HOF regions | MBHx regions | MBHy regions]``, so ``dim = R * (bins + 1) + 2 * R * bins`` with
    ``R = rows * cols + 1``: 5 * 9 + 2 * 5 * 8 = 125 by default. A 1-frame input (an image) yields one all-zero row.
    """

    modality = "motion"
    input = "frames"
    threads: int | None = None  # unused: OpenCV runs the flow with its own threads
    per_frame = False  # rows come from consecutive pairs: never concatenate frames of different items
    weights_id = None  # no learned weights

    def __init__(self, name: str = "hof-mbh", short_side: int = 128, bins: int = 8,
                 grid: int | Sequence[int] = (2, 2), min_flow: float = 0.4, min_boundary: float = 0.05,
                 margin: int = 8):
        self.name = name
        self.short_side = int(short_side)
        self.bins = int(bins)
        grid = (grid, grid) if isinstance(grid, int) else tuple(grid)
        self.grid = (int(grid[0]), int(grid[1])) if len(grid) == 2 else None
        self.min_flow = float(min_flow)
        self.min_boundary = float(min_boundary)
        self.margin = int(margin)
        if (self.short_side < 16 or self.bins < 2 or self.grid is None or min(self.grid) < 1 or self.min_flow < 0
                or self.min_boundary < 0 or self.margin < 0 or 2 * self.margin > self.short_side - 8):
            raise ReelsearchError(f"{name}: need short_side >= 16, bins >= 2, grid = [rows, cols] >= 1, min_flow >= 0, "
                                  f"min_boundary >= 0, 0 <= margin <= (short_side - 8) / 2; got {short_side}, {bins}, "
                                  f"{grid}, {min_flow}, {min_boundary}, {margin}")
        self.regions = self.grid[0] * self.grid[1] + 1
        hof, mbh = self.regions * (self.bins + 1), self.regions * self.bins
        self.slices = {"hof": slice(0, hof), "mbhx": slice(hof, hof + mbh), "mbhy": slice(hof + mbh, hof + 2 * mbh)}
        self.dim = hof + 2 * mbh

    def describe_flow(self, flow: np.ndarray) -> np.ndarray:
        """The ``[dim]`` descriptor of one flow field ``[h, w, 2]`` (its ``margin`` border already removed)."""
        h, w = flow.shape[:2]
        n = self.grid[0] * self.grid[1]
        cells = cell_index(h, w, self.grid)
        fx, fy = np.ascontiguousarray(flow[..., 0]), np.ascontiguousarray(flow[..., 1])
        parts = [orientation_histograms(fx, fy, cells, n, self.bins, self.min_flow)]
        for comp in (fx, fy):
            gx = cv2.Sobel(comp, cv2.CV_32F, 1, 0, ksize=1)  # comp[x+1] - comp[x-1]
            gy = cv2.Sobel(comp, cv2.CV_32F, 0, 1, ksize=1)
            parts.append(orientation_histograms(gx, gy, cells, n, self.bins))
        # whole-frame histogram = sum of its cells; normalise every (descriptor, region) histogram on its own
        pixels = np.append(np.bincount(cells.ravel(), minlength=n), h * w).astype(np.float64)
        floors = [0.0, self.min_boundary * pixels, self.min_boundary * pixels]
        return np.concatenate([hellinger(np.vstack([p, p.sum(0, keepdims=True)]), floor).ravel()
                               for p, floor in zip(parts, floors, strict=True)])

    def extract_frames(self, frames: np.ndarray) -> np.ndarray:
        """One row per consecutive pair, ``float32 [T-1, dim]``; ``[1, dim]`` zeros for a single frame."""
        frames = check_frames(frames)
        if len(frames) < 2:
            return np.zeros((len(frames), self.dim), np.float32)
        grays = [to_small_gray(f, self.short_side) for f in frames]
        out = np.empty((len(frames) - 1, self.dim), np.float32)
        for i in range(len(frames) - 1):
            flow = dense_flow(grays[i], grays[i + 1])
            m = self.margin
            out[i] = self.describe_flow(flow[m:flow.shape[0] - m, m:flow.shape[1] - m])
        return out
