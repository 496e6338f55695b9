"""Near-duplicates: the groups of indexed videos that are the same footage — re-encodes at another bitrate or
resolution, crops, trims, copies with a caption burnt in, stills taken from a clip — found in the model's own video
space, frame sequence against frame sequence.

1. **Candidates** from the vector index: each video's nearest videos by its row — with segments, by the higher of
   a video's row and its best segment (``reelsearch.search.sources.row_source``, as query by example), so a clip
   cut from a long video finds the segment it was cut from — and the videos whose row matches one of its
   informative frames (how a still — a one-frame video, its row its frame's — is found from the clip it was taken
   from).
2. **Verification** by temporal alignment over the stored frames (``reelsearch.search.frames.align``): two frames
   match when the cosine of their rows is >= ``threshold``, or their thumbnails' coarse pictures
   (``reelsearch.index.media.thumbnail_picture``) correlate >= :func:`picture_threshold` of it — a copy at a very low
   bitrate blurs away what the model's frame rows see (carphone at 9 kbit/s: cosine 0.26-0.43 with the original's
   frames) but keeps the picture's layout (0.99). The longest run of frames that match in order at one consistent
   time offset must cover at least ``coverage`` of the informative frames of the shorter video. Near-uniform frames
   (black, a flat colour, deep in a fade) are no evidence, and a shared opening (a title card, a logo) covers only
   its own few seconds: clips that share only those are not grouped.
3. **Groups**: the connected components of the verified pairs; each video's ``start`` places it on the timeline of
   the group's longest (a clip cut from a long video: where in it the clip starts).

Files of sound alone take no part: they have no row (``Catalog.ids`` and the vector index never hold them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from reelsearch.index.catalog import Catalog, StoredVideo, file_kind
from reelsearch.index.media import PICTURE_SIDE, thumbnail_picture
from reelsearch.index.paths import display_path, path_b64
from reelsearch.search.frames import FrameSequence, align, cosine_scores
from reelsearch.search.results import doc
from reelsearch.search.sources import row_source

#: Cosine of two frames' rows from which they show the same picture: measured with the bundled model on generated
#: copies of real clips and photos (docs/benchmarks.md#near-duplicates).
DEFAULT_THRESHOLD = 0.65
#: Correlation of two frames' coarse pictures from which they show the same picture at the default threshold (the
#: bar rises with ``threshold``: :func:`picture_threshold`), measured on the same copies (docs/benchmarks.md).
PICTURE_MATCH = 0.95
#: Share of the shorter video's informative frames the aligned run must cover.
MIN_COVERAGE = 0.5
#: Nearest videos of each video's row that are verified.
VIDEO_NEIGHBOURS = 16
#: Informative frames of each video (spread over it) that look for the videos whose row they match (stills)...
FRAME_QUERIES = 8
#: ... and how many videos each of them finds.
FRAME_NEIGHBOURS = 8
#: Videos whose frames are read per step.
BLOCK = 256
#: Frame pairs compared in one matrix product (a long video's frames against its candidates', in parts).
PRODUCT_CELLS = 1 << 24


@dataclass
class DuplicateVideo:
    """One video of a group."""

    id: str
    path: str = doc("Display form of the file's path.")
    name: str = doc("Display form of the file's name.", init=False)
    path_b64: str = doc("The path's exact bytes, base64.", init=False)
    kind: Literal["video", "image"] = field(init=False)
    duration: float | None = doc("Seconds (None for an image).")
    frames: int = doc("Sampled frames stored.")
    start: float = doc("Seconds: where it starts on the timeline of the group's first (longest) file, through the "
                       "verified pairs (0 for that one; a clip cut from it: where it was cut).", default=0.0)

    def __post_init__(self):
        self.name = display_path(os.path.basename(os.fsencode(self.path)))
        self.path_b64 = path_b64(self.path)
        self.kind = file_kind(self.path)


@dataclass
class DuplicatePair:
    """Two videos verified to be the same footage: ``b`` shows ``a``'s moment ``t`` at ``t + offset``."""

    a: str = doc("Id of the video with fewer frames.")
    b: str = doc("Id of the other.")
    offset: float = doc("Seconds: where `a` starts in `b` (negative when `b` starts later in the footage).")
    frames: int = doc("Frames matched in order at that offset (near-uniform frames not counted).")
    coverage: float = doc("Their share of the informative frames of the video that has fewer.")
    similarity: float = doc("Mean cosine of the matched frames' rows.")


@dataclass
class DuplicateGroup:
    """Videos that are the same footage: the connected videos of the verified pairs, longest first."""

    videos: list[DuplicateVideo]
    pairs: list[DuplicatePair]

    def to_json(self) -> dict:
        return {"videos": [{**v.__dict__, "path": display_path(v.path)} for v in self.videos],
                "pairs": [p.__dict__ for p in self.pairs]}

    def best_pair(self, id_: str) -> DuplicatePair:
        """The verified pair of video ``id_`` with the most frames aligned (then the most similar)."""
        return max((p for p in self.pairs if id_ in (p.a, p.b)), key=lambda p: (p.frames, p.similarity))

    def lines(self, number: int) -> str:
        """The group as ``reelsearch duplicates`` prints it: a heading, then each video (its id, where it starts in
        the first) with its best pair: ``9 frames aligned with #4 (#5 at t = #4 at t +1.0 s), similarity 0.842``."""
        out = [f"group {number}: {len(self.videos)} files"]
        first = self.videos[0].id
        for v in self.videos:
            p = self.best_pair(v.id)
            at = f" (starts at {v.start:.1f} s of #{first})" if v.id != first else ""
            out.append(f"  #{v.id} {display_path(v.path, one_line=True)}{at}\n      {p.frames} frames aligned with "
                       f"#{p.b if p.a == v.id else p.a} (#{p.a} at t = #{p.b} at t {p.offset:+.1f} s), "
                       f"similarity {p.similarity:.3f}")
        return "\n".join(out)


def picture_threshold(threshold: float) -> float:
    """The correlation from which two frames' coarse pictures match, for frames whose rows match from cosine
    ``threshold``: PICTURE_MATCH at the default, as much closer to 1 as ``threshold`` is (one knob moves both)."""
    return 1.0 - (1.0 - threshold) * (1.0 - PICTURE_MATCH) / (1.0 - DEFAULT_THRESHOLD)


def find_duplicates(catalog: Catalog, threshold: float = DEFAULT_THRESHOLD, *, coverage: float = MIN_COVERAGE,
                    exact_cosine: bool = False) -> list[DuplicateGroup]:
    """The groups of videos of ``catalog`` that are the same footage, largest first (module docstring).

    ``threshold``: the cosine from which two frames match (their pictures: :func:`picture_threshold`);
    ``coverage``: the share of the shorter video's informative frames the aligned run must cover; ``exact_cosine``:
    the stored rows are not all of one length (a frame-attention model's keys and values), so candidates come from
    exact cosine scans instead of the vector index."""
    ids = catalog.ids()
    verdicts: dict[tuple[str, str], DuplicatePair | None] = {}
    videos: dict[str, DuplicateVideo] = {}
    score_fn = cosine_scores if exact_cosine else None
    for start in range(0, len(ids), BLOCK):
        block = catalog.stored(ids[start:start + BLOCK])
        todo: dict[str, list[str]] = {}
        for a, b in sorted(_candidates(catalog, block, threshold, score_fn)):
            if _key(a, b) not in verdicts:
                verdicts[_key(a, b)] = None
                todo.setdefault(a, []).append(b)
        here = {**block, **catalog.stored(sorted({b for bs in todo.values() for b in bs} - set(block)))}
        frames = {i: FrameSequence.stored(v) for i, v in here.items()}
        pictures = _pictures(catalog, sorted(set(todo).union(*todo.values()) & set(here)), frames)
        for a, partners in todo.items():
            for part in _parts([b for b in partners if b in here], frames, len(frames[a])):
                # one product per video and its candidates: few large matrix products, not many small ones
                sims = frames[a].rows @ np.concatenate([frames[b].rows for b in part]).T
                match = (sims >= threshold) | (pictures[a] @ np.concatenate([pictures[b] for b in part]).T
                                               >= picture_threshold(threshold))
                cuts = np.cumsum([len(frames[b]) for b in part])[:-1]
                for b, sim, hit in zip(part, np.split(sims, cuts, axis=1), np.split(match, cuts, axis=1), strict=True):
                    verdicts[_key(a, b)] = _verify(here[a], here[b], frames[a], frames[b], sim, hit, coverage)
        videos.update({i: DuplicateVideo(i, v.path, v.duration, len(v.times)) for i, v in here.items()})
    return _groups([p for p in verdicts.values() if p is not None], videos)


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def _pictures(catalog: Catalog, ids: list[str], frames: dict[str, FrameSequence]) -> dict[str, np.ndarray]:
    """Each video's frames' coarse pictures [T, PICTURE_SIDE ** 2] (``thumbnail_picture``; zeros where its thumbnails
    are missing or do not match its frames, so that only the rows count)."""
    thumbs = catalog.thumbnails(ids)
    out = {}
    for i in ids:
        got = thumbs.get(i, [])
        pics = np.stack([thumbnail_picture(t) for t in got]) if got else np.zeros((0, PICTURE_SIDE ** 2), np.float32)
        out[i] = pics if len(pics) == len(frames[i]) else np.zeros((len(frames[i]), PICTURE_SIDE ** 2), np.float32)
    return out


def _parts(partners: list[str], frames: dict[str, FrameSequence], rows: int) -> list[list[str]]:
    """``partners`` in consecutive parts whose frames against ``rows`` frames make at most PRODUCT_CELLS pairs (one
    partner at least)."""
    parts: list[list[str]] = []
    cells = 0
    for b in partners:
        size = rows * len(frames[b])
        if not parts or cells + size > PRODUCT_CELLS:
            parts.append([])
            cells = 0
        parts[-1].append(b)
        cells += size
    return parts


def _candidates(catalog: Catalog, block: dict[str, StoredVideo], threshold: float,
                score_fn: Callable | None) -> set[tuple[str, str]]:
    """Pairs (a video of ``block``, another video) worth verifying: each video's VIDEO_NEIGHBOURS nearest by row,
    and the videos whose row matches one of its FRAME_QUERIES informative frames at ``threshold``."""
    ids = list(block)
    if not ids:
        return set()
    out: set[tuple[str, str]] = set()
    rows = catalog.rows(ids)
    if catalog.several_segments():  # a video's row finds the segment of a long video it was cut from
        found = [row_source(catalog, row, score_fn).top(VIDEO_NEIGHBOURS + 1).ids for row in rows]
    else:  # each video's one segment is its row: one batch of queries
        found, _ = catalog.nearest_many(rows, VIDEO_NEIGHBOURS + 1, score_fn)
    out.update((i, j) for i, near in zip(ids, found, strict=True) for j in near if j != i)
    owners, queries = [], []
    for i in ids:
        seq = FrameSequence.stored(block[i])
        pick = np.flatnonzero(seq.informative)
        pick = pick[np.unique(np.linspace(0, len(pick) - 1, min(FRAME_QUERIES, len(pick))).round().astype(int))] \
            if len(pick) else pick
        owners += [i] * len(pick)
        queries.append(block[i].frame_rows[pick])
    if owners:
        queries = np.concatenate(queries)
        found, scores = catalog.nearest_many(queries, FRAME_NEIGHBOURS, score_fn)
        if score_fn is None:  # inner products of rows of one length (the model's): cosines once divided by it
            scores = [s / max(float(q @ q), 1e-12) for s, q in zip(scores, queries, strict=True)]
        for i, near, s in zip(owners, found, scores, strict=True):
            out.update((i, j) for j, c in zip(near, s.tolist(), strict=True) if j != i and c >= threshold)
    return out


def _verify(x: StoredVideo, y: StoredVideo, fx: FrameSequence, fy: FrameSequence, sim: np.ndarray,
            match: np.ndarray, coverage: float) -> DuplicatePair | None:
    """The pair of ``x`` and ``y`` (their frames ``fx``, ``fy``; ``sim`` the cosines of ``fx`` x ``fy``, ``match``
    which of them match) when their frames align over ``coverage`` of the shorter one, else None. The one with fewer
    frames is aligned on the other."""
    if (len(fx), int(x.id)) > (len(fy), int(y.id)):
        x, y, fx, fy, sim, match = y, x, fy, fx, sim.T, match.T
    shorter = max(1, min(int(fx.informative.sum()), int(fy.informative.sum())))
    at_least = max(1, int(np.ceil(coverage * shorter - 1e-9)))
    found = align(fx, fy, 1.0, at_least, sim=sim, match=match)  # ``match`` decides, not a threshold
    if found is None or found.coverage < coverage:
        return None
    return DuplicatePair(x.id, y.id, round(found.offset, 3), found.frames, round(found.coverage, 3),
                         round(found.similarity, 4))


def _groups(pairs: Sequence[DuplicatePair], videos: dict[str, DuplicateVideo]) -> list[DuplicateGroup]:
    """The connected components of ``pairs`` (union-find), largest first, each longest video first."""
    parent: dict[str, str] = {}

    def root(i: str) -> str:
        while parent.setdefault(i, i) != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for p in pairs:
        parent[root(p.a)] = root(p.b)
    members: dict[str, list[str]] = {}
    for i in parent:
        members.setdefault(root(i), []).append(i)
    groups = []
    for ids in members.values():
        shown = sorted((videos[i] for i in ids), key=lambda v: (-(v.duration or 0.0), -v.frames, int(v.id)))
        inside = set(ids)
        group = DuplicateGroup(shown, sorted((p for p in pairs if p.a in inside), key=lambda p: (int(p.a), int(p.b))))
        _place(group)
        groups.append(group)
    return sorted(groups, key=lambda g: (-len(g.videos), int(g.videos[0].id)))


def _place(group: DuplicateGroup) -> None:
    """Set each video's ``start`` on the first video's timeline: from the first, through the verified pairs with the
    most frames aligned (then the most similar) that reach a video not yet placed (``a`` starts at ``offset`` in
    ``b``)."""
    start = {group.videos[0].id: 0.0}
    ranked = sorted(group.pairs, key=lambda p: (-p.frames, -p.similarity, int(p.a), int(p.b)))
    while len(start) < len(group.videos):
        p = next(p for p in ranked if (p.a in start) != (p.b in start))
        if p.b in start:
            start[p.a] = start[p.b] + p.offset
        else:
            start[p.b] = start[p.a] - p.offset
    for v in group.videos:
        v.start = round(start[v.id], 3)
