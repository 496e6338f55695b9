"""hof-mbh motion features: histogram maths against brute force, synthetic motion, a real MSR-VTT clip."""

from __future__ import annotations

import math

import av
import cv2
import numpy as np
import pytest

from conftest import shared_path
from reelsearch.errors import ReelsearchError
from reelsearch.features.extractors import create_extractor
from reelsearch.features.extractors.motion import FlowHistograms, cell_index, hellinger, orientation_histograms

RIGHT, DOWN, LEFT, UP, STILL = 0, 2, 4, 6, 8  # HOF bins with 8 orientations (y points down) + the no-motion bin


@pytest.fixture(scope="module")
def hof_mbh() -> FlowHistograms:
    return create_extractor("hof-mbh")


def brute_force_histograms(vx, vy, cells, n_cells, bins, zero_threshold=None):
    """Pixel-by-pixel loop, written from the definition."""
    width = bins + (zero_threshold is not None)
    out = np.zeros((n_cells, width))
    for (i, j), c in np.ndenumerate(cells):
        x, y = float(vx[i, j]), float(vy[i, j])
        mag = math.sqrt(x * x + y * y)
        if zero_threshold is not None and mag <= zero_threshold:
            out[c, bins] += 1
            continue
        angle = math.degrees(math.atan2(y, x)) % 360
        pos = angle / (360 / bins)
        k = int(pos)
        out[c, k % bins] += mag * (1 - (pos - k))
        out[c, (k + 1) % bins] += mag * (pos - k)
    return out


def test_orientation_histograms_match_a_brute_force_loop():
    rng = np.random.default_rng(0)
    vx, vy = rng.normal(0, 1, (2, 13, 17)).astype(np.float32)
    cells = cell_index(13, 17, (2, 3))
    for zero in (None, 0.4):
        got = orientation_histograms(vx, vy, cells, 6, 8, zero)
        np.testing.assert_allclose(got, brute_force_histograms(vx, vy, cells, 6, 8, zero), rtol=1e-5, atol=1e-6)


def test_orientation_histograms_hand_worked():
    one = np.ones((4, 4), np.float32)
    cells = np.zeros((4, 4), np.int64)
    right = orientation_histograms(one, 0 * one, cells, 1, 8, 0.4)[0]
    assert right.tolist() == [16, 0, 0, 0, 0, 0, 0, 0, 0]  # 16 pixels, magnitude 1, all in bin 0
    up = orientation_histograms(0 * one, -2 * one, cells, 1, 8)[0]
    assert up[UP] == pytest.approx(32) and up.sum() == pytest.approx(32)
    c, s = math.cos(math.radians(22.5)), math.sin(math.radians(22.5))
    between = orientation_histograms(2 * c * one, 2 * s * one, cells, 1, 8)[0]  # 22.5 deg: half to bins 0 and 1
    np.testing.assert_allclose(between[:2], [16, 16], rtol=1e-5)
    slow = orientation_histograms(0.3 * one, 0 * one, cells, 1, 8, 0.4)[0]
    assert slow[STILL] == 16 and slow[:STILL].sum() == 0


def test_cell_index_partitions_the_frame_row_major():
    cells = cell_index(5, 7, (2, 2))
    assert np.bincount(cells.ravel()).tolist() == [3 * 4, 3 * 3, 2 * 4, 2 * 3]
    assert cells[0, 0] == 0 and cells[0, -1] == 1 and cells[-1, 0] == 2 and cells[-1, -1] == 3


def test_hellinger_normalisation():
    np.testing.assert_allclose(hellinger(np.array([[1.0, 3.0], [0.0, 0.0]])), [[0.5, math.sqrt(0.75)], [0, 0]])
    weak = hellinger(np.array([[1.0, 1.0]]), floor=8.0)  # sum 2 < floor 8: divided by 8, norm sqrt(2 / 8)
    assert np.linalg.norm(weak) == pytest.approx(0.5)


TEXTURE = cv2.GaussianBlur(np.random.default_rng(7).integers(0, 256, (600, 700, 3), dtype=np.uint8), (0, 0), 3)


def moving_texture(dx: int, dy: int, n: int = 3, h: int = 256, w: int = 320) -> np.ndarray:
    """Frames of a textured scene whose content moves by (dx, dy) px per frame (+x right, +y down)."""
    return np.stack([TEXTURE[100 - i * dy:100 - i * dy + h, 100 - i * dx:100 - i * dx + w] for i in range(n)])


def hof_fractions(extractor: FlowHistograms, row: np.ndarray) -> np.ndarray:
    """Per region the L1 fraction of HOF mass in each bin (Hellinger values squared)."""
    return row[extractor.slices["hof"]].reshape(extractor.regions, extractor.bins + 1) ** 2


@pytest.mark.parametrize(("dx", "dy", "bin_"), [(6, 0, RIGHT), (-6, 0, LEFT), (0, 6, DOWN), (0, -6, UP)])
def test_known_translation_puts_hof_mass_in_its_direction(hof_mbh, dx, dy, bin_):
    feats = hof_mbh.extract_frames(moving_texture(dx, dy))  # 256 x 320 -> 128 x 160: 3 px per frame there
    assert feats.shape == (2, hof_mbh.dim) and np.isfinite(feats).all()
    for row in feats:
        fractions = hof_fractions(hof_mbh, row)
        assert (fractions[:, bin_] > 0.9).all(), np.round(fractions, 2)  # every cell and the whole frame


def test_horizontal_and_vertical_motion_are_distinguishable(hof_mbh):
    horizontal = hof_mbh.extract_frames(moving_texture(6, 0, n=2))[0]
    vertical = hof_mbh.extract_frames(moving_texture(0, 6, n=2))[0]
    again = hof_mbh.extract_frames(moving_texture(4, 0, n=2))[0]
    cosine = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    hof = hof_mbh.slices["hof"]
    assert cosine(horizontal[hof], vertical[hof]) < 0.1
    assert cosine(horizontal[hof], again[hof]) > 0.95


def test_static_frames_are_all_no_motion(hof_mbh):
    feats = hof_mbh.extract_frames(moving_texture(0, 0))
    fractions = hof_fractions(hof_mbh, feats[0])
    np.testing.assert_allclose(fractions[:, STILL], 1.0, atol=1e-6)
    mbh = feats[0, hof_mbh.slices["mbhx"].start:].reshape(2 * hof_mbh.regions, hof_mbh.bins)
    assert np.linalg.norm(mbh, axis=1).max() < 0.15  # damped, not noise blown up to unit norm


def test_an_object_moving_on_a_still_background_lights_up_its_cell(hof_mbh):
    still = TEXTURE[:128, :160].copy()
    patch = TEXTURE[300:340, 400:440]
    frames = np.stack([still.copy(), still.copy()])
    frames[0, 15:55, 15:55] = patch  # inside the top-left cell once the 8-px margin is dropped
    frames[1, 15:55, 19:59] = patch  # moved 4 px right
    row = hof_mbh.extract_frames(frames)[0]
    fractions = hof_fractions(hof_mbh, row)
    assert fractions[0, RIGHT] > 0.5 and fractions[0, STILL] < 0.5
    np.testing.assert_allclose(fractions[1:4, STILL], 1.0, atol=0.02)  # other cells still
    mbhx = np.linalg.norm(row[hof_mbh.slices["mbhx"]].reshape(hof_mbh.regions, hof_mbh.bins), axis=1)
    assert mbhx[0] > 0.5 and mbhx[1:4].max() < 0.2


def test_shapes_dim_and_single_frame(hof_mbh):
    assert (hof_mbh.modality, hof_mbh.input, hof_mbh.dim) == ("motion", "frames", 5 * 9 + 2 * 5 * 8)
    assert hof_mbh.extract_frames(moving_texture(2, 0, n=5)).shape == (4, 125)
    single = hof_mbh.extract_frames(moving_texture(0, 0, n=1))
    assert single.shape == (1, 125) and not single.any()
    assert hof_mbh.extract_frames(np.zeros((0, 64, 64, 3), np.uint8)).shape == (0, 125)
    other = FlowHistograms("hof-mbh", bins=9, grid=3)  # 3 x 3 cells
    assert other.dim == 10 * 10 + 2 * 10 * 9


def test_bad_options_and_frames_are_user_errors(hof_mbh):
    with pytest.raises(ReelsearchError, match="grid"):
        FlowHistograms("hof-mbh", grid=(0, 2))
    with pytest.raises(ReelsearchError, match="grid"):
        FlowHistograms("hof-mbh", grid=[2, 2, 2])
    with pytest.raises(ReelsearchError, match="uint8"):
        hof_mbh.extract_frames(np.zeros((2, 64, 64, 3), np.float64))


def test_real_msrvtt_clip_gives_finite_varied_features(hof_mbh):
    path = shared_path("msrvtt", "clips", "video9770.mp4")
    frames = []
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i % 6 == 0:
                frames.append(frame.to_ndarray(format="rgb24"))
            if len(frames) == 6:
                break
    feats = hof_mbh.extract_frames(np.stack(frames))
    assert feats.shape == (5, 125) and feats.dtype == np.float32 and np.isfinite(feats).all()
    assert feats.min() >= 0 and feats.max() <= 1
    hof = feats[:, hof_mbh.slices["hof"]].reshape(5, hof_mbh.regions, -1)
    np.testing.assert_allclose(np.linalg.norm(hof, axis=2), 1.0, rtol=1e-5)  # every HOF block has unit norm
    assert (hof[:, -1, STILL] ** 2 < 0.5).all()  # the clip moves: most of each frame is not still
    assert np.linalg.norm(feats[:, hof_mbh.slices["mbhx"]], axis=1).min() > 0.5  # real motion boundaries
    assert feats.std(axis=0).mean() > 0.02  # pairs differ
