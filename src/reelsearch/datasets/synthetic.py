"""Synthetic clips whose captions depend on time: coloured shapes that appear, disappear and move, in an order.

A clip is a sequence of *shots*, one per event, each ``frames_per_event`` frames long and rendered from the event
alone (its own seed): "a red square appears, then a blue circle moves left" is a shot of a red square appearing
on a dark, slightly noisy background, followed by a shot of a blue circle sliding left. Because a shot's pixels do
not depend on where it sits in the clip, a clip and its order-swapped twin (:meth:`Clip.swapped`, the same events in
reverse order) hold exactly the same multiset of frames: any model that pools frames without looking at their order
(mean pooling; a sentence-conditioned weighted average of frames such as Torabi's M3) gives the two clips identical
embeddings and cannot tell their captions apart. See docs/temporal-check.md.

Frames are real RGB pixels (uint8, ``size`` x ``size``); :func:`frame_features` is the fast feature path for tests
(block-averaged pixels, no labels), :func:`write_dataset` writes mp4 files + a ``manifest.jsonl`` that the
``manifest`` dataset format (and so ``reelsearch extract manifest:DIR``) reads.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.errors import ReelsearchError
from reelsearch.io import atomic_path, atomic_write_text

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 190, 60),
    "blue": (50, 90, 235),
    "yellow": (235, 215, 40),
}
SHAPES = ("square", "circle", "triangle")
#: Actions, in pairs that are each other played backwards ("appears" played backwards is "disappears").
ACTIONS = ("appears", "disappears", "moves left", "moves right", "moves up", "moves down")
_MOVES = {"moves left": (-1, 0), "moves right": (1, 0), "moves up": (0, -1), "moves down": (0, 1)}
BACKGROUND = (24, 24, 28)
NOISE_STD = 6.0


@dataclass(frozen=True)
class Event:
    """One shot: a ``colour`` ``shape`` of half-width ``radius`` doing ``action``, centred at (x, y) (fractions of the
    frame) when still, or travelling ``travel`` (fraction of the frame) from (x, y) when moving; ``seed`` fixes the
    shot's pixel noise."""

    colour: str
    shape: str
    action: str
    x: float = 0.5
    y: float = 0.5
    radius: float = 0.16
    travel: float = 0.4
    seed: int = 0

    def __post_init__(self):
        if self.colour not in COLOURS or self.shape not in SHAPES or self.action not in ACTIONS:
            raise ReelsearchError(f"unknown event {self.colour!r} {self.shape!r} {self.action!r}; colours "
                                  f"{list(COLOURS)}, shapes {list(SHAPES)}, actions {list(ACTIONS)}")

    @property
    def phrase(self) -> str:
        """'a red square appears'."""
        return f"a {self.colour} {self.shape} {self.action}"

    def centre(self, t: float) -> tuple[float, float]:
        """Centre (x, y) at time t in [0, 1] of the shot (fractions of the frame)."""
        dx, dy = _MOVES.get(self.action, (0, 0))
        return self.x + dx * self.travel * t, self.y + dy * self.travel * t

    def visible(self, t: float) -> bool:
        """Whether the shape is drawn at time t in [0, 1) of the shot."""
        if self.action == "appears":
            return t >= 0.5
        if self.action == "disappears":
            return t < 0.5
        return True


@dataclass(frozen=True)
class Clip:
    """Events shown one after another; the caption says them in the same order."""

    id: str
    events: tuple[Event, ...]
    frames_per_event: int = 6

    @property
    def caption(self) -> str:
        """'a red square appears, then a blue circle moves left'."""
        return ", then ".join(e.phrase for e in self.events)

    @property
    def n_frames(self) -> int:
        return len(self.events) * self.frames_per_event

    def swapped(self, suffix: str = "-swapped") -> Clip:
        """The same events in reverse order (same shots, so the same multiset of frames)."""
        return Clip(self.id + suffix, tuple(reversed(self.events)), self.frames_per_event)

    def to_json(self) -> dict:
        return {"id": self.id, "frames_per_event": self.frames_per_event, "events": [asdict(e) for e in self.events]}

    @classmethod
    def from_json(cls, obj: dict) -> Clip:
        return cls(obj["id"], tuple(Event(**e) for e in obj["events"]), int(obj.get("frames_per_event", 6)))


# --------------------------------------------------------------------------------------------- rendering
@lru_cache(maxsize=8)
def _pixel_centres(size: int) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    return yy, xx


def _shape_mask(shape: str, cx: float, cy: float, r: float, size: int) -> np.ndarray:
    """Boolean [size, size] mask of a shape centred at pixel (cx, cy) with half-width r pixels."""
    yy, xx = _pixel_centres(size)
    dx, dy = xx - cx, yy - cy
    if shape == "square":
        return (np.abs(dx) <= r) & (np.abs(dy) <= r)
    if shape == "circle":
        return dx * dx + dy * dy <= r * r
    # upward-pointing isosceles triangle inscribed in the square of half-width r
    inside_y = (dy >= -r) & (dy <= r)
    half_width = r * (dy + r) / (2 * r)
    return inside_y & (np.abs(dx) <= half_width)


def render_event(event: Event, n_frames: int, size: int = 64) -> np.ndarray:
    """The shot of ``event``: uint8 RGB frames [n_frames, size, size, 3]."""
    rng = np.random.default_rng(event.seed)
    colour = np.asarray(COLOURS[event.colour], dtype=np.float32)
    imgs = rng.standard_normal((n_frames, size, size, 3), dtype=np.float32) * np.float32(NOISE_STD)
    imgs += np.asarray(BACKGROUND, dtype=np.float32)
    for i in range(n_frames):
        if event.visible((i + 0.5) / n_frames):
            cx, cy = event.centre(i / max(1, n_frames - 1))
            mask = _shape_mask(event.shape, cx * size, cy * size, event.radius * size, size)
            imgs[i][mask] = colour + imgs[i][mask] - np.asarray(BACKGROUND, dtype=np.float32)
    np.clip(np.rint(imgs, out=imgs), 0, 255, out=imgs)
    return imgs.astype(np.uint8)


def render_clip(clip: Clip, size: int = 64) -> np.ndarray:
    """All frames of ``clip``: uint8 RGB [len(events) * frames_per_event, size, size, 3]."""
    return np.concatenate([render_event(e, clip.frames_per_event, size) for e in clip.events], axis=0)


def frame_features(frames: np.ndarray, grid: int = 8) -> np.ndarray:
    """Fast per-frame features: each frame block-averaged to grid x grid RGB, scaled to [0, 1] and flattened.

    [T, H, W, 3] uint8 -> [T, grid * grid * 3] float32 (H and W divisible by ``grid``). Pixels only: no label, no
    time stamp, so the features of a frame do not depend on where it sits in the clip.
    """
    t, h, w, c = frames.shape
    if h % grid or w % grid:
        raise ReelsearchError(f"frame size {h}x{w} is not divisible by grid {grid}")
    blocks = frames.reshape(t, grid, h // grid, grid, w // grid, c).astype(np.float32).mean(axis=(2, 4))
    return (blocks / 255.0).reshape(t, grid * grid * c)


# --------------------------------------------------------------------------------------------- sampling
def random_event(rng: np.random.Generator, colours: Sequence[str] = tuple(COLOURS), shapes: Sequence[str] = SHAPES,
                 actions: Sequence[str] = ACTIONS) -> Event:
    """An event with random colour, shape, action, size and position (a moving shape stays inside the frame)."""
    colour = str(rng.choice(list(colours)))
    shape = str(rng.choice(list(shapes)))
    action = str(rng.choice(list(actions)))
    radius = float(rng.uniform(0.13, 0.18))
    travel = float(rng.uniform(0.3, 0.4))
    lo, hi = radius + 0.02, 1 - radius - 0.02
    dx, dy = _MOVES.get(action, (0, 0))
    # start so that the end position (start + d * travel) is inside [lo, hi] too
    x = float(rng.uniform(lo - min(0, dx) * travel, hi - max(0, dx) * travel))
    y = float(rng.uniform(lo - min(0, dy) * travel, hi - max(0, dy) * travel))
    return Event(colour, shape, action, x, y, radius, travel, int(rng.integers(2**31)))


def random_clip(rng: np.random.Generator, clip_id: str, n_events: int = 2, frames_per_event: int = 6,
                distinct: bool = True, **event_kwargs) -> Clip:
    """A clip of ``n_events`` random events; ``distinct``: no two events share colour and shape (so the order of
    the caption's phrases is well defined)."""
    if distinct and n_events > len(event_kwargs.get("colours", COLOURS)) * len(event_kwargs.get("shapes", SHAPES)):
        raise ReelsearchError(f"cannot draw {n_events} events with distinct colour and shape from "
                              f"{event_kwargs.get('colours', list(COLOURS))} x {event_kwargs.get('shapes', SHAPES)}")
    events: list[Event] = []
    while len(events) < n_events:
        e = random_event(rng, **event_kwargs)
        if distinct and any((e.colour, e.shape) == (o.colour, o.shape) for o in events):
            continue
        events.append(e)
    return Clip(clip_id, tuple(events), frames_per_event)


def order_pairs(n_pairs: int, seed: int = 0, prefix: str = "pair", n_events: int = 2, frames_per_event: int = 6,
                exclude: Iterable[Clip] = (), **event_kwargs) -> list[tuple[Clip, Clip]]:
    """``n_pairs`` (clip, clip.swapped()) pairs: the same events in opposite orders.

    Clips whose event content (colour, shape, action of each event, in any order) matches a clip in ``exclude``
    (e.g. the training set) are redrawn, so held-out pairs are new combinations.
    """
    rng = np.random.default_rng(seed)
    seen = {_content(c) for c in exclude}
    pairs: list[tuple[Clip, Clip]] = []
    misses = 0
    while len(pairs) < n_pairs:
        if misses > 10_000:
            raise ReelsearchError(f"order_pairs: found only {len(pairs)} of {n_pairs} new event combinations; "
                                  "ask for fewer pairs or allow more colours, shapes or actions")
        clip = random_clip(rng, f"{prefix}{len(pairs):05d}", n_events, frames_per_event, **event_kwargs)
        key = _content(clip)
        if key in seen:
            misses += 1
            continue
        misses = 0
        seen.add(key)
        pairs.append((clip, clip.swapped()))
    return pairs


def _content(clip: Clip) -> frozenset:
    return frozenset((e.colour, e.shape, e.action) for e in clip.events)


def swap_accuracy(sims: np.ndarray, tol: float = 1e-5) -> tuple[float, float]:
    """Order accuracy on swapped pairs: ``sims`` [2P, 2P] (rows captions, columns clips) of clips laid out as
    pairs (2i, 2i+1) = (clip, clip.swapped()), each caption row matching its own clip column.

    Each caption counts 1 when its own clip scores above the twin by more than ``tol``, 0.5 on a tie (|diff| <=
    tol: the model cannot tell the orders apart), else 0. Returns (accuracy, fraction of ties); chance is 0.5.
    """
    s = np.asarray(sims, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1] or s.shape[0] % 2:
        raise ReelsearchError(f"swap_accuracy needs a square [2P, 2P] matrix, got shape {s.shape}")
    a = np.arange(0, len(s), 2)
    b = a + 1
    diff = np.concatenate([s[a, a] - s[a, b], s[b, b] - s[b, a]])
    tie = np.abs(diff) <= tol
    return float(np.mean((diff > tol) + 0.5 * tie)), float(np.mean(tie))


# --------------------------------------------------------------------------------------------- outputs
def synthetic_clip_recipe(dim: int) -> dict:
    """The feature recipe of ``clip_features`` (block colour averages, made here, not by an extractor), as a dict
    for a model config's ``features.video.appearance``."""
    return {"extractor": "synthetic-clip-blocks", "dim": int(dim), "weights": None, "sampling": None,
            "max_frames": None, "short_side": None}


def clip_features(clips: Sequence[Clip], size: int = 64, grid: int = 8) -> list[np.ndarray]:
    """:func:`frame_features` of every rendered clip ([T, grid*grid*3] float32 each); each distinct shot is
    rendered once (a clip and its swapped twin share their shots)."""
    shots: dict[tuple[Event, int], np.ndarray] = {}
    out = []
    for c in clips:
        for e in c.events:
            if (e, c.frames_per_event) not in shots:
                shots[e, c.frames_per_event] = frame_features(render_event(e, c.frames_per_event, size), grid)
        out.append(np.concatenate([shots[e, c.frames_per_event] for e in c.events], axis=0))
    return out


def write_mp4(frames: np.ndarray, path: str | Path, fps: int = 8) -> Path:
    """Encode uint8 RGB frames [T, H, W, 3] to an H.264 (yuv444p, near-lossless) mp4 with PyAV, atomically."""
    import av  # noqa: PLC0415 - optional package (media extra)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".mp4") as tmp:
        with av.open(str(tmp), "w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=fps)
            stream.width, stream.height = frames.shape[2], frames.shape[1]
            stream.pix_fmt = "yuv444p"
            stream.options = {"crf": "4", "preset": "veryfast"}
            for img in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
    return path


def write_dataset(out_dir: str | Path, splits: dict[str, Sequence[Clip]], size: int = 64, fps: int = 8,
                  progress: bool = True) -> Path:
    """Write ``out_dir/videos/<id>.mp4`` for every clip and ``out_dir/manifest.jsonl`` (the ``manifest`` format:
    id, path, captions = [caption], split, and the event script under ``events``). Returns the manifest path."""
    out = Path(out_dir)
    lines = []
    todo = [(split, c) for split, clips in splits.items() for c in clips]
    for split, clip in tqdm(todo, desc="rendering clips", unit="clip", disable=not progress):
        rel = f"videos/{clip.id}.mp4"
        write_mp4(render_clip(clip, size), out / rel, fps)
        lines.append(json.dumps({"id": clip.id, "path": rel, "captions": [clip.caption], "split": split,
                                 "frames_per_event": clip.frames_per_event,
                                 "events": [asdict(e) for e in clip.events]}))
    path = out / "manifest.jsonl"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def clip_from_manifest_item(item) -> Clip:
    """Rebuild the :class:`Clip` of a manifest ``Item`` written by :func:`write_dataset` (from ``item.meta``)."""
    try:
        return Clip.from_json({"id": item.id, **item.meta})
    except (KeyError, TypeError, ValueError) as exc:
        raise ReelsearchError(f"{item.id}: not a synthetic clip (its manifest line lacks a valid 'events' "
                              f"script: {exc})") from exc


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m reelsearch.datasets.synthetic OUT [--pairs N] [--seed S]``: train / test order pairs as mp4s."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("out", help="output folder (videos/ + manifest.jsonl)")
    p.add_argument("--train-pairs", type=int, default=200)
    p.add_argument("--test-pairs", type=int, default=50)
    p.add_argument("--events", type=int, default=2)
    p.add_argument("--frames-per-event", type=int, default=6)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    train = order_pairs(a.train_pairs, a.seed, "train", a.events, a.frames_per_event)
    test = order_pairs(a.test_pairs, a.seed + 1, "test", a.events, a.frames_per_event,
                       exclude=[c for pair in train for c in pair])
    splits = {"train": [c for pair in train for c in pair], "test": [c for pair in test for c in pair]}
    path = write_dataset(a.out, splits, a.size)
    print(path)


if __name__ == "__main__":
    main()
