"""Search sources: one query's scores over a catalog's videos, as the one fusion (``reelsearch.search.fusion``) reads
them. A source gives its top n (with the bound a threshold test needs) and scores given ids::

    source.top(n) -> Top(ids, scores, bound)   at most n ids with their scores; every other video scores <= bound
                                               (-inf: the ids are every video)
    source.scores(ids) -> [len(ids)]           the scores of any ids
    source.constant                            True when every video scores alike (one round of the fusion suffices)
    source.by_segment(id, segments) -> [S]     its score of each of a video's segments (None: its score of the video,
                                               in every segment)
    source.timed                               True when its evidence has times (the cues): a video of several
                                               segments with such evidence is fused segment by segment
    source.pictured                            True when it scores pictures (the model's, an example's): its top
                                               never holds a video without a picture (sound alone), which scores 0
                                               in it (no evidence either way); the cues score every video

The model's part of a search (its *visual* sources) is chosen once per model by :func:`visual_sources` — inner
product through the vector index, an exact scan with the model's score (order similarity), frame attention over
frame rows (Torabi M3), or one exhaustive source per expert (rank fusion, zscore normalisation) — never by a mode
string tested per query. The text cues are sources too (``reelsearch.search.cues``), and so is an example's row
(query by example: ``reelsearch.search.example``). Sources read the library through the catalog interface
(``reelsearch.index.catalog``) only.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from reelsearch.config.schema import FusionKind, Normalize
from reelsearch.index.catalog import Catalog, StoredSegments, segment_key
from reelsearch.models.interface import SearchMode, VideoEmbeddings

#: Name of the model's single source (a joint model's expert is shown under this name too).
VISUAL = "visual"
#: Name of the source of a query by example (``reelsearch.search.example``).
LIKE = "like"
#: Videos scored per block by frame attention (their frame rows are read in one query per block).
SCAN_VIDEOS = 256

T = TypeVar("T")


def widened(ask: Callable[[int], T | None], n: int) -> T:
    """``ask(n)``, ``ask(2n)``, ``ask(4n)``, ... until it answers (anything but None): the one way a search asks a
    source for more (the fusion's threshold test, a filtered search's vector index). ``ask`` answers at the latest
    when ``n`` reaches every video."""
    n = max(n, 1)
    while (answer := ask(n)) is None:
        n *= 2
    return answer


@dataclass(frozen=True)
class Top:
    """A source's top n: ``ids`` with their ``scores`` (float64); no other video scores above ``bound`` (-inf when
    ``ids`` are every video)."""

    ids: list[str]
    scores: np.ndarray
    bound: float


class Source(Protocol):
    """One query's scores over a catalog's videos (see the module docstring)."""

    constant: bool
    timed: bool
    pictured: bool

    def top(self, n: int) -> Top: ...

    def scores(self, ids: Sequence[str]) -> np.ndarray: ...

    def by_segment(self, id_: str, segments: StoredSegments) -> np.ndarray | None: ...


class NearestSource:
    """A query vector's score with the stored rows: the inner product, top n from the catalog's vector index (exact
    or HNSW), or ``score_fn(queries [1, D], rows [m, D])`` (e.g. order similarity), top n by an exact scan;
    ``biased``: plus each video's stored bias (a querybank's offset, negated: part of the model's score), which the
    vector index holds, so one search gives the top n of the sum. A video without a picture (no row) scores 0."""

    constant = False
    timed = False
    pictured = True

    def __init__(self, catalog: Catalog, vector: np.ndarray, score_fn=None, *, biased: bool = False):
        self.catalog, self.vector, self.score_fn = catalog, np.asarray(vector, np.float32).reshape(-1), score_fn
        self.biased = biased

    def top(self, n: int) -> Top:
        total = len(self.catalog)
        m = min(n, total)
        ids, scores = self.catalog.nearest(self.vector, m, self.score_fn, biased=self.biased)
        exhausted = m >= total or len(ids) < m
        return Top(ids, np.asarray(scores, np.float64), -np.inf if exhausted or not ids else float(scores[-1]))

    def scores(self, ids: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(ids))
        sound = self.catalog.sound_only()
        rowed = [j for j, i in enumerate(ids) if i not in sound]
        if rowed:
            some = [ids[j] for j in rowed]
            biases = self.catalog.biases(some) if self.biased else None
            out[rowed] = self.segment_scores(self.catalog.rows(some), biases)
        return out

    def segment_scores(self, rows: np.ndarray, biases: np.ndarray | None) -> np.ndarray:
        """The scores of some stored ``rows`` [m, D] (video or segment rows) with their ``biases`` [m]."""
        if self.score_fn is None:
            scores = (rows @ self.vector).astype(np.float64)
        else:
            scores = np.asarray(self.score_fn(self.vector[None], rows), np.float64)[0]
        return scores + biases if self.biased else scores

    def by_segment(self, id_: str, segments: StoredSegments) -> np.ndarray | None:
        return None  # a video scores by its row, alike in every segment


def best_segment_source(catalog: Catalog, vector: np.ndarray, score_fn=None, *, biased: bool = False) -> Source:
    """A ``SegmentSource``, or the ``NearestSource`` that ranks alike (faster: one vector index, no segment reads)
    when no video has several segments (``Catalog.several_segments``)."""
    if catalog.several_segments():
        return SegmentSource(catalog, vector, score_fn, biased=biased)
    return NearestSource(catalog, vector, score_fn, biased=biased)


def row_source(catalog: Catalog, row: np.ndarray, score_fn=None) -> Source:
    """A video row's score with each video (query by example's first stage, near-duplicates' candidates): the score
    with its row, or where some video has several segments the higher of that and its best segment's
    (``BestOfSource``), so a clip cut from a long video finds the segment it was cut from."""
    whole = NearestSource(catalog, row, score_fn)
    if not catalog.several_segments():  # each video's one segment is its row
        return whole
    return BestOfSource(whole, SegmentSource(catalog, row, score_fn))


class SegmentSource(NearestSource):
    """A query vector's score with each video's best segment (the unit of retrieval): top n videos from the segments'
    vector index (inner product, or ``score_fn`` by an exact scan), asked for more segments until n distinct videos
    are among them (``widened``); ``biased``: each segment's own bias added. A video missing from the answer has
    every segment at most the last segment's score, so that is the bound (or the next video's best, if higher)."""

    def top(self, n: int) -> Top:
        total = self.catalog.segment_count()

        def ask(m: int) -> Top | None:
            m = min(m, total)
            keys, scores = self.catalog.nearest_segments(self.vector, m, self.score_fn, biased=self.biased)
            exhausted = m >= total or len(keys) < m
            best: dict[str, float] = {}
            for key, score in zip(keys, np.asarray(scores, np.float64).tolist(), strict=True):
                best.setdefault(segment_key(key)[0], score)
            if len(best) < n and not exhausted:
                return None
            ids = list(best)
            out = np.array([best[i] for i in ids[:n]], np.float64)
            if len(ids) <= n:
                bound = -np.inf if exhausted or not keys else float(scores[-1])
            else:
                bound = best[ids[n]] if exhausted else max(best[ids[n]], float(scores[-1]))
            return Top(ids[:n], out, bound)

        return widened(ask, 2 * n) if total else Top([], np.zeros(0), -np.inf)

    def scores(self, ids: Sequence[str]) -> np.ndarray:
        if not ids:
            return np.zeros(0)
        segs, sound = self.catalog.segments(ids), self.catalog.sound_only()
        return np.array([self.segment_scores(segs[i].rows, segs[i].biases).max() if i in segs else
                         0.0 if i in sound else -np.inf for i in ids], np.float64)

    def by_segment(self, id_: str, segments: StoredSegments) -> np.ndarray:
        return self.segment_scores(segments.rows, segments.biases)


class BestOfSource:
    """Each video's higher score of several sources (a video row and its best segment): the top n among the
    sources' own tops, each scored by every source; a video outside all of them scores at most the highest bound."""

    constant = False
    pictured = True

    def __init__(self, *parts: Source):
        self.parts = parts

    def top(self, n: int) -> Top:
        tops = [p.top(n) for p in self.parts]
        ids = list(dict.fromkeys(i for t in tops for i in t.ids))
        scores = self.scores(ids)
        order = np.argsort(-scores, kind="stable")
        bound = max((t.bound for t in tops), default=-np.inf)
        if len(order) > n:  # those left out of the top n: no higher than the n-th, but the bound covers them
            bound = max(bound, float(scores[order[n]]))
        return Top([ids[j] for j in order[:n]], scores[order[:n]], bound)

    def scores(self, ids: Sequence[str]) -> np.ndarray:
        if not ids:
            return np.zeros(0)
        return np.max([p.scores(ids) for p in self.parts], axis=0)

    def by_segment(self, id_: str, segments: StoredSegments) -> np.ndarray | None:
        return None  # its score of the video, in every segment


class ScoredSource:
    """Scores of every video, computed once (``score_all() -> (ids, scores)``) and looked up: an exhaustive source,
    whose top n is every video with a picture (one without scores 0)."""

    constant = False
    timed = False
    pictured = True

    def __init__(self, score_all):
        self._score_all = score_all
        self._ids: list[str] | None = None

    def _all(self) -> tuple[list[str], np.ndarray]:
        if self._ids is None:
            self._ids, self._scores = self._score_all()
            self._where = {i: j for j, i in enumerate(self._ids)}
        return self._ids, self._scores

    def top(self, n: int) -> Top:
        ids, scores = self._all()
        return Top(ids, scores, -np.inf)

    def scores(self, ids: Sequence[str]) -> np.ndarray:
        every, scores = self._all()
        if ids == every:
            return scores
        return np.array([scores[j] if (j := self._where.get(i)) is not None else 0.0 for i in ids], np.float64)

    def by_segment(self, id_: str, segments: StoredSegments) -> np.ndarray | None:
        return None  # a video scored as a whole, alike in every segment


class Visual(ABC):
    """The model's part of a search, chosen once per model and catalog (:func:`visual_sources`): its sources for a
    query and their weights, each expert's own score, and the per-frame scores that place the best moment.

    ``exhaustive``: every video must be scored (the fusion ranks among all of them, or normalises over them);
    ``kind`` / ``normalize``: the fusion of the model's experts (``reelsearch.scoring.fusion.fuse_experts``), used
    for the whole search (``reelsearch.search.fusion.fuse``).
    """

    exhaustive = False
    segmented = False  # the VISUAL source ranks a video by its best segment (``SegmentSource``)
    #: the VISUAL source ranks by the model's score plus each video's stored bias (its querybank offset, negated);
    #: False: by the model's score alone (``with_bias``), the bias still part of what a confidence reads
    biased = True
    kind = FusionKind.SCORE
    normalize = Normalize.NONE

    def __init__(self, model, catalog: Catalog):
        self.model, self.catalog = model, catalog
        names = list(model.experts)
        #: {shown name: the model's expert}: a joint model's one expert is shown as "visual"
        self.experts = {VISUAL: names[0]} if len(names) == 1 else {n: n for n in names}

    def on(self, catalog: Catalog) -> Visual:
        """The same model's sources over another catalog (a filtered search's ``reelsearch.search.subset``)."""
        other = copy.copy(self)
        other.catalog = catalog
        return other

    def with_bias(self, biased: bool) -> Visual:
        """The same sources with or without each video's stored bias (a query the querybank does not normalise:
        ``reelsearch.scoring.calibration.banked``)."""
        if biased == self.biased:
            return self
        other = copy.copy(self)
        other.biased = biased
        return other

    @abstractmethod
    def sources(self, query: np.ndarray) -> dict[str, Source]:
        """The sources of a query embedding [1, D] (``model.encode_text``)."""

    def weights(self, weight: float) -> dict[str, float]:
        """Each source's weight when the model as a whole weighs ``weight``."""
        return {VISUAL: weight}

    def bias_of(self, ids: list[str]) -> np.ndarray:
        """Each of ``ids``' stored bias (a querybank offset, negated): part of its ``VISUAL`` score when ``biased``."""
        return np.asarray(self.catalog.biases(ids), np.float64) if ids else np.zeros(0)

    def ranked_bias(self, bias: np.ndarray) -> np.ndarray:
        """The part of the ``VISUAL`` scores that is the stored ``bias``: itself when ``biased``, else 0."""
        return bias if self.biased else np.zeros_like(bias)

    def expert_scores(self, query: np.ndarray, ids: list[str], rows: dict[str, np.ndarray],
                      best: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """{shown name: each expert's own score of ``ids``, without the stored bias} (``rows``: the fusion's source
        scores of them; ``best``: each one's best segment's row [N, D] and bias [N], scored instead of the video's
        row when the source ranks segments)."""
        if len(self.experts) == 1:
            return {VISUAL: rows[VISUAL] - self.ranked_bias(self.bias_of(ids) if best is None else best[1])}
        video_rows = self.catalog.rows(ids) if best is None else best[0]
        scores = self.model.expert_scores(query, video_rows) if ids else {}
        return {shown: np.asarray(scores[name], np.float64)[0] if ids else np.zeros(0)
                for shown, name in self.experts.items()}

    def frame_scorer(self, query: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """``frame_rows [T, D] -> [T]``: how well each frame alone matches the query (its best is the moment)."""
        return lambda frame_rows: np.asarray(self.model.frame_scores(query[0], frame_rows), np.float32)


class InnerProduct(Visual):
    """A model scored by an inner product of its query rows (``ann_query``) with the stored rows: a cosine joint
    model or a score-fused mixture of them. Top n videos by their best segment, from the segments' vector index."""

    segmented = True

    def sources(self, query: np.ndarray) -> dict[str, Source]:
        return {VISUAL: best_segment_source(self.catalog, self.model.ann_query(query)[0], biased=self.biased)}

    def frame_scorer(self, query: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        vector = np.asarray(self.model.ann_query(query)[0], np.float32)
        return lambda frame_rows: frame_rows @ vector


class ExactScan(Visual):
    """A model whose score no vector index serves (order similarity; a score fusion with such an expert): top n by
    an exact scan of every stored segment row with ``model.score`` (a video scores by its best segment)."""

    segmented = True

    def sources(self, query: np.ndarray) -> dict[str, Source]:
        return {VISUAL: best_segment_source(self.catalog, query[0], self.model.score, biased=self.biased)}

    def frame_scorer(self, query: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        return lambda frame_rows: np.asarray(self.model.score(query[:1], frame_rows), np.float32)[0]


class FrameAttention(Visual):
    """Sentence-conditioned frame attention (Torabi M3): a video's score needs its frame rows; every video is
    scored, SCAN_VIDEOS at a time (their frame rows read in one query)."""

    def sources(self, query: np.ndarray) -> dict[str, Source]:
        def score_all():
            ids = self.catalog.ids()
            scores = []
            for start in range(0, len(ids), SCAN_VIDEOS):
                block = ids[start:start + SCAN_VIDEOS]
                stored = self.catalog.stored(block)
                videos = VideoEmbeddings(self.catalog.rows(block), [stored[i].frame_rows for i in block])
                scores.append(np.asarray(self.model.score(query, videos), np.float64)[0]
                              + self.ranked_bias(self.bias_of(block)))
            return ids, np.concatenate(scores) if scores else np.zeros(0)

        return {VISUAL: ScoredSource(score_all)}


class ExpertScans(Visual):
    """A mixture fused by rank (each expert's rank among *all* videos) or with zscore normalisation (over all
    videos' scores): one exhaustive source per expert, from one scan of every stored row."""

    exhaustive = True

    def __init__(self, model, catalog: Catalog):
        super().__init__(model, catalog)
        self.kind, self.normalize = model.fusion.kind, model.fusion.normalize

    def sources(self, query: np.ndarray) -> dict[str, Source]:
        done: dict[str, np.ndarray] = {}
        ids: list[str] = []

        def scan() -> None:
            per: dict[str, list[np.ndarray]] = {name: [] for name in self.experts.values()}
            for chunk_ids, rows in self.catalog.chunks():
                ids.extend(chunk_ids)
                for name, s in self.model.expert_scores(query, rows).items():
                    per[name].append(np.asarray(s, np.float64)[0])
            done.update({n: np.concatenate(a) if a else np.zeros(0) for n, a in per.items()})

        def expert(name: str):
            def score_all():
                if not done:
                    scan()
                return ids, done[name]
            return score_all

        return {shown: ScoredSource(expert(name)) for shown, name in self.experts.items()}

    def weights(self, weight: float) -> dict[str, float]:
        return {shown: weight * self.model.weight(name) for shown, name in self.experts.items()}

    def bias_of(self, ids: list[str]) -> np.ndarray:
        return np.zeros(len(ids))  # the rank or zscore fusion of the experts has no bias

    def expert_scores(self, query: np.ndarray, ids: list[str], rows: dict[str, np.ndarray],
                      best: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        return {shown: rows[shown] for shown in self.experts}  # the experts' scan of the video rows (no segments)


#: The model's part of a search for each of its search modes.
VISUALS: dict[SearchMode, type[Visual]] = {
    SearchMode.ANN: InnerProduct, SearchMode.SCAN: ExactScan, SearchMode.RANK: ExpertScans,
    SearchMode.ZSCORE: ExpertScans, SearchMode.PAIRWISE: FrameAttention,
}


def visual_sources(model, catalog: Catalog) -> Visual:
    """How ``model`` is searched over ``catalog`` (the one place a model's search mode is read): by the vector
    index's inner product, an exact scan, frame attention, or one exhaustive source per expert."""
    return VISUALS[model.search_mode](model, catalog)
