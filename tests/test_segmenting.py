"""reelsearch.media.segmenting: the least-cost cut of frames into segments, checked against every possible cut, and
on generated footage (a slideshow of Flickr8k dev photos with hard cuts, cross-fades and slow zooms)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import shared_path
from reelsearch.datasets.long_videos import random_video
from reelsearch.errors import ReelsearchError
from reelsearch.media.segmenting import SegmentPolicy, cut, cut_points, segment_ends


def objective(x: np.ndarray, times: np.ndarray, end: float, bounds, penalty: float) -> float:
    """The cost of a cut, computed plainly: per segment, each frame's seconds on screen times its squared distance
    to the segment's duration-weighted mean of unit rows; plus the penalty per segment."""
    unit = [row / np.linalg.norm(row) for row in x]
    on_screen = [(times[k + 1] if k + 1 < len(times) else end) - times[k] for k in range(len(times))]
    total = 0.0
    for a, b in itertools.pairwise(bounds):
        weight = sum(on_screen[a:b])
        mean = sum(on_screen[k] * unit[k] for k in range(a, b)) / weight
        total += sum(on_screen[k] * float(np.sum((unit[k] - mean) ** 2)) for k in range(a, b)) + penalty
    return total


def every_cut(n: int, times: np.ndarray, end: float, max_seconds: float):
    """Every cut of n frames whose segments fit in max_seconds (or are one frame)."""
    stops = [times[k + 1] if k + 1 < n else end for k in range(n)]
    for mask in itertools.product((0, 1), repeat=n - 1):
        bounds = [0] + [k + 1 for k, m in enumerate(mask) if m] + [n]
        if all(b - a == 1 or stops[b - 1] - times[a] <= max_seconds + 1e-9 for a, b in itertools.pairwise(bounds)):
            yield bounds


@pytest.mark.parametrize("seed", range(6))
def test_cut_is_the_least_cost_cut(seed):
    """Against every cut of 11 frames: three noisy 'shots', irregular times, a length limit that binds."""
    rng = np.random.default_rng(seed)
    n = 11
    centres = rng.normal(size=(3, 6))
    x = centres[np.sort(rng.integers(0, 3, n))] + rng.normal(scale=0.4, size=(n, 6))
    times = np.cumsum(rng.uniform(0.3, 1.7, n)) - 0.5
    end = float(times[-1] + 0.8)
    policy = SegmentPolicy(penalty=float(rng.uniform(0.2, 1.5)), max_seconds=float(rng.uniform(3.0, 8.0)))
    got = cut_points(x, times, policy, end).tolist()
    costs = {tuple(b): objective(x, times, end, b, policy.penalty) for b in every_cut(n, times, end,
                                                                                      policy.max_seconds)}
    assert tuple(got) in costs
    assert costs[tuple(got)] == pytest.approx(min(costs.values()), rel=1e-9, abs=1e-9)


def test_one_shot_is_one_segment_and_the_length_limit_splits_long_ones():
    rng = np.random.default_rng(0)
    still = rng.uniform(size=64) + rng.normal(scale=0.01, size=(20, 64))  # a 20 s shot of one thing
    segs = cut(still, np.arange(20.0), end=20.0)
    assert [(s.first, s.stop, s.start, s.end) for s in segs] == [(0, 20, 0.0, 20.0)]
    long = rng.uniform(size=64) + rng.normal(scale=0.01, size=(100, 64))  # 100 s: at least 4 segments of <= 30 s
    segs = cut(long, np.arange(100.0), SegmentPolicy(max_seconds=30.0), end=100.0)
    assert len(segs) == 4 and all(s.end - s.start <= 30.0 for s in segs) and segs[-1].end == 100.0
    assert cut(np.zeros((0, 4)), np.zeros(0)) == []


def test_cut_does_not_depend_on_the_sampling_rate():
    """The same content at 1 and at 2 frames a second (each frame twice) changes at the same times."""
    rng = np.random.default_rng(1)
    shots = rng.uniform(size=(5, 32))
    lengths = [4, 9, 3, 12, 6]
    x = np.concatenate([np.repeat(shots[i:i + 1], n, 0) for i, n in enumerate(lengths)])
    x = x + rng.normal(scale=0.02, size=x.shape)
    once = cut(x, np.arange(len(x), dtype=float), end=len(x))
    twice = cut(np.repeat(x, 2, 0), np.arange(2 * len(x)) / 2.0, end=len(x))
    assert [s.start for s in once] == [0.0, 3.5, 12.5, 15.5, 27.5]  # half way between the frames around a change
    assert [s.start for s in twice] == [0.0, 3.75, 12.75, 15.75, 27.75]  # the same changes, found to 0.25 s


def test_bad_input():
    with pytest.raises(ReelsearchError, match="increasing"):
        cut_points(np.ones((3, 2)), np.array([0.0, 2.0, 1.0]))
    with pytest.raises(ReelsearchError, match=r"\[T, D\]"):
        cut_points(np.ones((3, 2)), np.zeros(4))
    with pytest.raises(ReelsearchError):
        SegmentPolicy(penalty=0)
    assert segment_ends(np.array([0.0, 1.0, 2.0])).tolist() == [1.0, 2.0, 3.0]


# ---- generated footage with the default model's frame features --------------------------------------------------

@pytest.fixture(scope="module")
def lite0():
    pytest.importorskip("av")
    from reelsearch.models.recipes import recipe_pipeline

    return recipe_pipeline("default").extractor("appearance")


def frame_features(path, extractor):
    from reelsearch.media.timeline import FrameStream

    stream = FrameStream(path, 1.0, 256)
    times, images = zip(*stream, strict=True)
    return extractor.extract_frames(np.stack(images)), np.asarray(times), stream.report.end


def test_a_random_timeline_ends_at_the_length_asked_for():
    """Also where a short photo draws a long fade (2 s shots, 2 s fades: such a timeline once stopped there, minutes
    early) and where less than half a second is left (once left out)."""
    photos = [f"p{i}" for i in range(200)]
    for seed in range(40):
        video = random_video("v", photos, 1200.0, seed=seed)
        assert video.duration == pytest.approx(1200.0, abs=0.01), seed
        assert all(s.duration > s.fade for s in video.shots), seed


@pytest.mark.slow
def test_slideshow_cuts_at_the_photo_changes(tmp_path, lite0):
    """A 100 s slideshow of dev photos, 2 to 15 s each (half the changes cross-fades, half the photos zooming):
    nearly every change found within 1 s, and few cuts where nothing changed."""
    from reelsearch.datasets.long_videos import read_truth, write_video

    images = shared_path("flickr8k", "images")
    photos = [line.strip()[:-4] for line in shared_path("flickr8k", "dev.txt").read_text().split()]
    video = random_video("show", photos[100:], 100.0, seed=3, shot_seconds=(2.0, 15.0), fade_share=0.5,
                         zoom_share=0.5, size=(320, 180), fps=10)
    path = write_video(video, tmp_path, images, threads=1)
    truth = read_truth(tmp_path / "show.json")
    assert truth == video and abs(truth.duration - 100.0) < 1e-6
    kinds = {s.transition for s in video.shots[1:]}
    assert kinds == {"cut", "fade"} and any(s.zoom for s in video.shots) and len(video.changes) >= 10
    features, times, end = frame_features(path, lite0)
    found = np.array([s.start for s in cut(features, times, end=end)[1:]])
    hits = [np.any(np.abs(found - c) <= 1.0) for c in video.changes]
    extra = [f for f in found if np.all(np.abs(video.changes - f) > 1.0)]
    assert np.mean(hits) >= 0.9 and len(extra) <= 2, (video.changes, found)


@pytest.mark.slow
def test_a_real_one_shot_clip_is_one_segment(lite0):
    features, times, end = frame_features(shared_path("msrvtt", "clips", "video9770.mp4"), lite0)
    assert [(s.start, s.end) for s in cut(features, times, end=end)] == [(0.0, pytest.approx(11.0))]
