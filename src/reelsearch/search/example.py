"""Query by example: videos that show what an example shows, ranked in the model's own video space, frame sequence
against frame sequence.

An example is a clip or an image (a one-frame video), or one moment of one (``FILE@SECONDS``,
``VIDEO_ID@SECONDS``). It is answered in two stages on the one search path (``reelsearch.search.query``):

1. **Candidates**: the example's row — its video row for a clip or an image, the moment's frame row for a moment —
   is a :class:`~reelsearch.search.sources.NearestSource` (the inner product with the stored video rows through the
   vector index, or their cosine by an exact scan for a model whose rows no index serves; the threshold test's
   bound is the source's own: no stored row outside its top n scores above its n-th), and where the catalog has
   segments each video scores the higher of its row's and its best segment's (``BestOfSource``), so a clip cut
   from a long video finds the segment it was cut from. Alone, the candidates are its
   exact top ``max(RESCORED, k + excluded)``. With text (weight :data:`~reelsearch.search.experts.DEFAULT_WEIGHTS`
   ``like``), they are the fusion's exact top ``k + excluded`` by the fused score and the example source's own top
   RESCORED, every source scoring each (:func:`candidates_with`): asking the fusion itself for a top RESCORED of two
   unrelated scores would make the threshold test go deep.
2. **Re-scoring** (:func:`rescore`): each candidate's example score becomes the *sequence similarity* of its stored
   frame rows (``reelsearch.search.frames.sequence_similarities``: the mean over the example's informative frames of
   the best-matching frame's cosine), its fused score changes by the difference, the query's own file (same id or
   same SHA-256) is dropped, and the best ``k`` are kept. This is the exact top k by the re-scored fusion among the
   candidates (which hold the exact top k of the first stage's fused score); it equals the exact top k over the
   whole library whenever the library has at most RESCORED videos, and otherwise whenever no video outside the
   candidates (its row not among the example's nearest) has frames that match the example better than the
   candidates' (docs/search.md). Under rank fusion (a rank-fused mixture with text, every video scored) the
   example ranks by its row only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import Catalog
from reelsearch.index.media import EmbeddedMedia
from reelsearch.search.frames import FrameSequence, cosine_scores, frame_match, sequence_similarities, unit_rows
from reelsearch.search.fusion import Fused, Segments, best_segments
from reelsearch.search.sources import LIKE, Source, Visual, row_source

#: Candidates of the first stage re-scored by sequence similarity (at least k + the excluded ids).
RESCORED = 100


class ExampleError(ReelsearchError):
    """An example a search cannot use: no such file or id, an unreadable file, a moment outside the video."""


@dataclass
class Example:
    """What a query by example looks for: ``row`` [D] (what the vector index is asked with), ``frames`` (what
    candidates are re-scored against), ``exclude`` (the ids of the query's own file: same id or same content) and
    ``label`` (how results and errors name it)."""

    row: np.ndarray
    frames: FrameSequence
    exclude: frozenset[str]
    label: str

    @classmethod
    def of(cls, media: EmbeddedMedia, at: float | None, exclude, label: str) -> Example:
        """The example of ``media``: the whole of it (``at`` None) or its frame nearest ``at`` seconds (an
        ExampleError when ``at`` is outside the video, or when it has no picture: a file of sound alone)."""
        if not media.pictured:
            raise ExampleError(f"{label}: has no picture (sound alone): nothing to look for; search for what is said "
                               "in it instead")
        frames = FrameSequence.of(media.frame_vectors, media.timestamps, media.detail)
        if at is None:
            return cls(np.asarray(media.video_vector, np.float32), frames, frozenset(exclude), label)
        times = np.asarray(media.timestamps, np.float64)
        end = media.duration if media.duration is not None else (float(times[-1]) if len(times) else 0.0)
        if not np.isfinite(at) or at < 0 or at > end + 1e-6 or not len(times):
            raise ExampleError(f"{label}: {at:g} s is outside the video (0 to {end:g} s)")
        i = int(np.argmin(np.abs(times - at)))
        one = frames.select(i)
        one.informative[:] = True  # the moment asked for is evidence, however plain
        return cls(np.asarray(media.frame_vectors[i], np.float32), one, frozenset(exclude), f"{label}@{at:g}")

    def source(self, catalog: Catalog, visual: Visual) -> Source:
        """The first stage's source: the row's inner product with the stored rows through the vector index when
        the model scores by one, else their cosine by an exact scan; with segments, each video's higher score of
        its row and its best segment (a clip cut from a long video matches the segment it was cut from)."""
        return row_source(catalog, self.row, None if visual.model.inner_product else cosine_scores)

    def frame_scores(self, frame_rows: np.ndarray) -> np.ndarray:
        """[T]: how well each stored frame matches the example (a result's strip; its best is the moment)."""
        return frame_match(self.frames, unit_rows(frame_rows))


def split_like(spec: str) -> tuple[str, float | None]:
    """``FILE`` | ``FILE@SECONDS`` | ``VIDEO_ID`` | ``VIDEO_ID@SECONDS`` -> (file or id, seconds or None). A file
    whose name holds an ``@`` is taken whole when it exists."""
    if not isinstance(spec, str) or not spec.strip():
        raise ExampleError("the example is empty (give a file, FILE@SECONDS or VIDEO_ID@SECONDS)")
    if os.path.isfile(spec):
        return spec, None
    target, sep, seconds = spec.rpartition("@")
    if sep:
        try:
            return target, float(seconds)
        except ValueError:
            raise ExampleError(f"{spec}: {seconds!r} is not a number of seconds") from None
    return spec, None


def candidates_with(fused: Fused, sources: Mapping[str, Source], weights: Mapping[str, float],
                    ids: Sequence[str], segments: Segments | None = None) -> Fused:
    """``fused`` (a weighted-score fusion's top) with ``ids`` added as candidates: each source's score of those it
    lacks (of their best segment when the fusion is per segment: ``segments``), their weighted sum (unsorted:
    :func:`rescore` sorts)."""
    extra = [i for i in dict.fromkeys(ids) if i not in set(fused.ids)]
    if not extra:
        return fused
    more = {s: np.array(sources[s].scores(extra), np.float64) for s in weights}
    if segments is not None:
        best_segments(extra, more, sources, weights, segments)
    rows = {s: np.concatenate([fused.rows[s], more[s]]) for s in weights}
    terms = {s: weights[s] * rows[s] for s in weights}
    return Fused(fused.ids + extra, sum(terms.values()), rows, terms, fused.rounds)


def rescore(catalog: Catalog, fused: Fused, example: Example, weight: float, k: int, *,
            sequence: bool = True) -> Fused:
    """The second stage (module docstring): the candidates of ``fused`` without the example's own file, their
    example score (``fused.rows[LIKE]``) replaced by the sequence similarity of their frames (when ``sequence``:
    score fusion), the best ``k`` by the new fused score."""
    keep = [j for j, i in enumerate(fused.ids) if i not in example.exclude]
    ids = [fused.ids[j] for j in keep]
    rows = {s: r[keep] for s, r in fused.rows.items()}
    terms = {s: t[keep] for s, t in fused.terms.items()}
    scores = fused.scores[keep]
    if sequence and ids:
        stored = catalog.stored(ids)
        empty = np.zeros((0, len(example.row)), np.float32)
        like = sequence_similarities(example.frames, [stored[i].frame_rows if i in stored else empty for i in ids])
        scores = scores - terms[LIKE] + weight * like
        rows[LIKE], terms[LIKE] = like, weight * like
    order = np.argsort(-scores, kind="stable")[:k]
    return Fused([ids[j] for j in order], scores[order], {s: r[order] for s, r in rows.items()},
                 {s: t[order] for s, t in terms.items()}, fused.rounds)
