"""Frame sequences compared frame by frame, in the model's own video space: what query by example ranks with
(:func:`sequence_similarities`) and what near-duplicate detection verifies (:func:`align`).

A video's frames are its stored frame rows (each frame embedded alone by the model), compared by their cosine — for
a joint model the cosine of its joint space, for a mixture the mean of its experts' cosines (their rows stand side by
side, each of unit norm) — with their times and which of them are *informative*: a frame whose thumbnail is
near-uniform (detail below :data:`DETAIL_FLOOR`: black, a flat colour, deep in a fade) looks alike in every video and
is no evidence of anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reelsearch.index.catalog import StoredVideo

#: Frame detail (luma standard deviation of the thumbnail, 0-1: ``reelsearch.index.media.frame_detail``) below which a
#: frame is near-uniform. Black frames measure 0, frames a third of the way into a fade from black about 0.03-0.04,
#: the least detailed real frames of the benchmark's clips 0.10 (docs/benchmarks.md).
DETAIL_FLOOR = 0.04


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` [..., D] scaled to unit length (float32; a zero row stays zero)."""
    rows = np.asarray(rows, np.float32)
    norm = np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows / np.where(norm > 0, norm, 1.0)


def cosine_scores(queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Cosine similarity [Q, M] of ``queries`` [Q, D] and ``rows`` [M, D] (a ``score_fn`` for exact scans of rows
    that are not all of one length)."""
    return unit_rows(queries) @ unit_rows(rows).T


@dataclass
class FrameSequence:
    """A video's frames: unit ``rows`` [T, D], ``times`` [T] (seconds), ``informative`` [T] (bool)."""

    rows: np.ndarray
    times: np.ndarray
    informative: np.ndarray

    @classmethod
    def of(cls, frame_rows: np.ndarray, times: np.ndarray, detail: np.ndarray | None) -> FrameSequence:
        """From stored frame rows, their times and detail (None: every frame counts as informative)."""
        rows = unit_rows(frame_rows)
        informative = np.ones(len(rows), bool) if detail is None else np.asarray(detail) >= DETAIL_FLOOR
        return cls(rows, np.asarray(times, np.float64), informative)

    @classmethod
    def stored(cls, video: StoredVideo) -> FrameSequence:
        return cls.of(video.frame_rows, video.times, video.detail)

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, index) -> FrameSequence:
        """The frames at ``index`` (a position, slice or mask)."""
        index = np.atleast_1d(np.arange(len(self))[index])
        return FrameSequence(self.rows[index], self.times[index], self.informative[index])

    @property
    def weights(self) -> np.ndarray:
        """[T]: 1 for each informative frame, 0 for the others; all 1 when none is informative (the frames are all
        there is to go by)."""
        return self.informative.astype(np.float32) if self.informative.any() else np.ones(len(self), np.float32)


def sequence_similarities(example: FrameSequence, videos: list[np.ndarray]) -> np.ndarray:
    """How well each video (its frame rows [T_i, D], any length) shows what ``example`` shows: the mean, over the
    example's informative frames, of each one's best cosine with a frame of the video (1 when every frame of the
    example appears in it; order and length are free: a clip matches the longer video it was cut from). -1 for a
    video without frames. One matrix product for all the videos."""
    out = np.full(len(videos), -1.0)
    have = [i for i, rows in enumerate(videos) if len(rows)]
    if not have:
        return out
    w = example.weights
    sim = example.rows @ unit_rows(np.concatenate([videos[i] for i in have])).T  # [T_example, sum T_i]
    starts = np.cumsum([0] + [len(videos[i]) for i in have[:-1]])
    best = np.maximum.reduceat(sim, starts, axis=1)  # [T_example, videos]: each example frame's best in each video
    out[have] = (w @ best) / w.sum()
    return out


def frame_match(example: FrameSequence, rows: np.ndarray) -> np.ndarray:
    """[T]: how well each frame of a video (its unit frame rows) matches the example: its best cosine with one of
    the example's informative frames (the strip of a result; its best is the moment)."""
    keep = example.weights > 0
    return (rows @ example.rows[keep].T).max(1)


@dataclass
class Alignment:
    """Two videos' frames matched in order at one time offset: ``b`` shows ``a``'s moment ``t`` at ``t + offset``.

    ``frames``: informative frames matched in the longest run (counted on the side with fewer); ``coverage``: their
    share of the informative frames of the video that has fewer; ``similarity``: the mean cosine of the matched
    frames; ``a_span`` / ``b_span``: (first, last) matched time in each."""

    offset: float
    frames: int
    coverage: float
    similarity: float
    a_span: tuple[float, float]
    b_span: tuple[float, float]


def _step(times: np.ndarray) -> float:
    return float(np.median(np.diff(times))) if len(times) > 1 else 0.0


def align(a: FrameSequence, b: FrameSequence, threshold: float, at_least: int = 1,
          sim: np.ndarray | None = None, match: np.ndarray | None = None) -> Alignment | None:
    """The longest run of ``a``'s informative frames that appear in ``b`` in order at one consistent time offset
    (each matched by an informative frame of ``b`` within half a sampling step of its time + offset, at cosine >=
    ``threshold``), or None when no run reaches ``at_least`` frames.

    Candidate offsets are those of the matching frame pairs, in bins of half a step, the most supported first (of
    offsets that match as many frames, the one whose frames match best wins: on near-static footage many offsets
    match every frame, and the true one matches them most closely); a run skips the uninformative frames of ``a``
    (they neither count nor break it). A still (one frame) aligns with every video that shows it. ``sim``: the cosines
    ``a.rows @ b.rows.T`` when already computed; ``match`` [len(a), len(b)] bool: which frames match, where more
    than their cosine tells (default ``sim >= threshold``)."""
    sim = a.rows @ b.rows.T if sim is None else sim
    match = sim >= threshold if match is None else match
    ii, jj = np.nonzero(match & a.informative[:, None] & b.informative[None, :])
    if len(np.unique(ii)) < max(1, at_least):  # no offset can match more frames of a than match at all
        return None
    tol = 0.5 * max(_step(a.times), _step(b.times), 1e-3) + 1e-6
    gap = b.times[jj] - a.times[ii]  # per matching pair: the offset at which a's frame shows as b's
    bins = np.round(gap / tol).astype(np.int64)
    centers = np.unique(bins)
    bound = np.array([len(np.unique(ii[np.abs(bins - c) <= 1])) for c in centers])  # frames an offset can match
    ia = np.flatnonzero(a.informative)
    position = np.full(len(a), -1)
    position[ia] = np.arange(len(ia))
    best: Alignment | None = None
    order = np.argsort(-bound, kind="stable")
    for c, most in zip(centers[order], bound[order], strict=True):
        need = at_least if best is None else best.frames  # a later offset must match as many frames, or more
        if most < need:
            break
        offset = float(np.median(gap[np.abs(gap - c * tol) <= tol]))
        near = np.flatnonzero(np.abs(gap - offset) <= tol)
        hit = np.zeros(len(ia), bool)
        hit[position[ii[near]]] = True
        start, stop = _longest_run(hit)
        run = near[(position[ii[near]] >= start) & (position[ii[near]] < stop)]
        # each frame of a in the run with its best match in b
        run = run[np.lexsort((-sim[ii[run], jj[run]], ii[run]))]
        run = run[np.concatenate([[True], ii[run][1:] != ii[run][:-1]])]
        frames = min(len(run), len(np.unique(jj[run])))
        similarity = float(sim[ii[run], jj[run]].mean()) if len(run) else 0.0
        if frames < need or (best is not None and frames == best.frames and similarity <= best.similarity):
            continue
        best = Alignment(offset, frames, frames / max(1, min(len(ia), int(b.informative.sum()))), similarity,
                         (float(a.times[ii[run]].min()), float(a.times[ii[run]].max())),
                         (float(b.times[jj[run]].min()), float(b.times[jj[run]].max())))
    return best


def _longest_run(hit: np.ndarray) -> tuple[int, int]:
    """[start, stop) of the longest run of True in ``hit`` (the first when several are as long)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], hit.astype(np.int8), [0]])))
    starts, stops = edges[::2], edges[1::2]
    i = int(np.argmax(stops - starts))
    return int(starts[i]), int(stops[i])
