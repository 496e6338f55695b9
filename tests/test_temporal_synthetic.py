"""The synthetic temporal clips: rendering checked pixel by pixel, captions, order-swapped twins, features, mp4s."""

from __future__ import annotations

import numpy as np
import pytest

from reelsearch.datasets import load_dataset
from reelsearch.datasets.synthetic import (
    BACKGROUND,
    COLOURS,
    NOISE_STD,
    Clip,
    Event,
    clip_features,
    clip_from_manifest_item,
    frame_features,
    order_pairs,
    random_clip,
    render_clip,
    render_event,
    write_dataset,
)
from reelsearch.errors import ReelsearchError


def _foreground(frame: np.ndarray, colour: str) -> np.ndarray:
    """Pixels within 4 noise sigmas of ``colour`` (the hand check of where the shape is)."""
    return (np.abs(frame.astype(float) - COLOURS[colour]) < 4 * NOISE_STD).all(-1)


def test_caption_and_swap():
    a = Event("red", "square", "appears")
    b = Event("blue", "circle", "moves left", x=0.7)
    clip = Clip("c", (a, b))
    assert clip.caption == "a red square appears, then a blue circle moves left"
    twin = clip.swapped()
    assert twin.caption == "a blue circle moves left, then a red square appears"
    assert twin.id == "c-swapped" and twin.swapped("").events == clip.events
    assert Clip.from_json(clip.to_json()) == clip
    with pytest.raises(ReelsearchError, match="unknown event"):
        Event("purple", "square", "appears")


def test_appears_disappears_and_moves_pixel_by_pixel():
    size, n = 64, 6
    appear = render_event(Event("red", "square", "appears", x=0.5, y=0.5, radius=0.125), n, size)
    assert appear.shape == (n, size, size, 3) and appear.dtype == np.uint8
    counts = [_foreground(f, "red").sum() for f in appear]
    assert counts[:3] == [0, 0, 0]
    # a square of half-width 8 px centred at (32, 32) covers pixel centres 24.5 .. 39.5: 16 x 16 = 256 pixels
    assert counts[3:] == [256, 256, 256]
    assert _foreground(appear[3], "red")[24:40, 24:40].all()
    vanish = render_event(Event("green", "circle", "disappears"), n, size)
    assert [bool(_foreground(f, "green").any()) for f in vanish] == [True] * 3 + [False] * 3
    # background: mean and spread of the noise as specified
    empty = appear[0].astype(float)
    assert np.allclose(empty.mean((0, 1)), BACKGROUND, atol=0.5) and abs(empty.std() - NOISE_STD) < 0.5

    for action, axis, sign in [("moves left", 1, -1), ("moves right", 1, 1), ("moves up", 0, -1),
                               ("moves down", 0, 1)]:
        frames = render_event(Event("blue", "triangle", action, x=0.5, y=0.5, travel=0.3), n, size)
        centres = [np.nonzero(_foreground(f, "blue"))[axis].mean() for f in frames]
        steps = np.diff(centres) * sign
        assert (steps > 0).all(), (action, centres)
        assert abs((centres[-1] - centres[0]) * sign - 0.3 * size) < 1.0  # travels 30% of the frame


def test_triangle_and_circle_areas():
    size = 64
    areas = {}
    for shape in ("square", "circle", "triangle"):
        frame = render_event(Event("yellow", shape, "moves left", radius=0.2, travel=0.0), 1, size)[0]
        areas[shape] = _foreground(frame, "yellow").sum()
    r = 0.2 * size
    assert abs(areas["square"] - 4 * r * r) / (4 * r * r) < 0.05
    assert abs(areas["circle"] - np.pi * r * r) / (np.pi * r * r) < 0.05
    assert abs(areas["triangle"] - 2 * r * r) / (2 * r * r) < 0.08


def test_swapped_clip_has_the_same_frames_in_another_order():
    clip = random_clip(np.random.default_rng(3), "x", n_events=3, frames_per_event=5)
    frames, twin = render_clip(clip), render_clip(clip.swapped())
    assert frames.shape == (15, 64, 64, 3)
    assert np.array_equal(frames[:5], twin[10:]) and np.array_equal(frames[10:], twin[:5])
    assert not np.array_equal(frames, twin)


def test_frame_features_match_a_loop():
    frames = render_clip(random_clip(np.random.default_rng(1), "x"), 32)
    feats = frame_features(frames, grid=4)
    assert feats.shape == (12, 48) and feats.dtype == np.float32
    block = 32 // 4
    for t in (0, 7):
        for gy in range(4):
            for gx in range(4):
                for c in range(3):
                    want = frames[t, gy * block:(gy + 1) * block, gx * block:(gx + 1) * block, c].mean() / 255
                    assert feats[t, (gy * 4 + gx) * 3 + c] == pytest.approx(want, abs=1e-6)
    with pytest.raises(ReelsearchError, match="divisible"):
        frame_features(frames, grid=5)
    # the cached shot path equals rendering each clip
    clips = [random_clip(np.random.default_rng(2), "y")]
    clips.append(clips[0].swapped())
    for c, f in zip(clips, clip_features(clips, 32, 4), strict=True):
        assert np.array_equal(f, frame_features(render_clip(c, 32), 4))


def test_order_pairs_are_seeded_distinct_and_held_out():
    train = order_pairs(30, seed=0, prefix="tr")
    assert order_pairs(30, seed=0, prefix="tr") == train
    assert order_pairs(30, seed=1, prefix="tr") != train
    for a, b in train:
        assert b.events == tuple(reversed(a.events)) and a.caption != b.caption
        assert len({(e.colour, e.shape) for e in a.events}) == 2
    test = order_pairs(20, seed=1, prefix="te", exclude=[c for p in train for c in p])
    content = {frozenset((e.colour, e.shape, e.action) for e in c.events) for p in train for c in p}
    assert all(frozenset((e.colour, e.shape, e.action) for e in a.events) not in content for a, _ in test)


def test_written_dataset_decodes_and_reads_as_a_manifest(tmp_path):
    from reelsearch.media.decode import decode_frames

    (a, b), = order_pairs(1, seed=5, frames_per_event=4)
    manifest = write_dataset(tmp_path, {"train": [a], "test": [b]}, size=32, fps=4, progress=False)
    ds = load_dataset("manifest", manifest)
    assert ds.splits() == ["train", "test"]
    item = ds.items("train")[0]
    assert item.captions == [a.caption] and clip_from_manifest_item(item) == a
    decoded = decode_frames(item.path, "all")
    assert decoded.images.shape == (8, 32, 32, 3)
    # near-lossless H.264 in yuv444p: pixels within a few levels of the rendering
    err = np.abs(decoded.images.astype(int) - render_clip(a, 32).astype(int))
    assert err.mean() < 3.0
    assert np.abs(frame_features(decoded.images, 4) - frame_features(render_clip(a, 32), 4)).max() < 0.02


def test_impossible_requests_raise_instead_of_looping():
    with pytest.raises(ReelsearchError, match="distinct colour and shape"):
        random_clip(np.random.default_rng(0), "x", n_events=3, colours=("red",), shapes=("square", "circle"))
    with pytest.raises(ReelsearchError, match="new event combinations"):
        # 2 colours x 1 shape x 1 action: a single unordered combination exists
        order_pairs(2, colours=("red", "blue"), shapes=("square",), actions=("appears",))
