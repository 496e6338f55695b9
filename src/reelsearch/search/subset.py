"""Some of a catalog's videos as a catalog of their own: what a filtered search ranks over.

Every source reads the library through the catalog interface, so over a :class:`Subset` every source yields only
allowed ids, with bounds that hold for them, and the fusion's top k is the exact top k of the allowed videos (as
exact as the vector index's own top n) — never a short list filtered afterwards. ``nearest``:

* a selective filter (at most :data:`EXACT_ROWS` videos), or a score no vector index serves: an exact scan of the
  allowed rows (one matrix product per block);
* else the catalog's own ``nearest`` (exact, HNSW or pgvector), asked for more until ``n`` allowed ids are among
  them: about ``n x all / allowed`` rows, doubled until enough, and an exact scan when that reaches every video.
  Any allowed video outside the answer scores at most its n-th allowed score, so that is the source's bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from reelsearch.index.catalog import Catalog, StoredSegments, StoredVideo, VideoFacts, segment_key
from reelsearch.index.vectors import ScoreFn, inner_product_score, plus_bias, scan_chunks, with_biases
from reelsearch.search.sources import widened

#: Allowed videos up to which ``nearest`` scans their rows exactly (beyond: the catalog's vector index).
EXACT_ROWS = 4096
#: Rows per block of an exact scan.
BLOCK = 4096


@dataclass
class Selection:
    """A filter's allowed videos: their ids (newest first) and ``mask`` [N] over the positions of the ``facts`` they
    were selected from (``VideoFacts``), for membership tests that build nothing per query."""

    ids: list[str]
    mask: np.ndarray
    facts: VideoFacts

    def without(self, banned: set[str]) -> Selection:
        """This selection less ``banned``."""
        if not banned:
            return self
        mask = self.mask.copy()
        mask[[self.facts.position[i] for i in banned if i in self.facts.position]] = False
        return Selection([i for i in self.ids if i not in banned], mask, self.facts)


class Subset:
    """``catalog`` restricted to ``allowed`` (a :class:`Selection`, or ids). Ids the catalog no longer holds (another
    process committed since they were selected), and those without a picture (no row), are left out where rows are
    read (``ids``, ``chunks``: checked once, when first needed); ``len`` counts the ids given."""

    def __init__(self, catalog: Catalog, allowed: Selection | Sequence[str]):
        self.catalog = catalog
        self._selection = allowed if isinstance(allowed, Selection) else None
        self._given = allowed.ids if isinstance(allowed, Selection) else list(allowed)
        self._set: set[str] | None = None  # without a selection's mask: made when first needed
        self._held: list[str] | None = None

    def _allows(self, ids: Sequence[str]) -> list[bool]:
        """Whether each of ``ids`` is allowed."""
        if self._selection is not None:
            mask, where = self._selection.mask, self._selection.facts.position
            return [(j := where.get(i)) is not None and bool(mask[j]) for i in ids]
        if self._set is None:
            self._set = set(self._given)
        return [i in self._set for i in ids]

    def _ids(self) -> list[str]:
        if self._held is None:
            known, sound = self.catalog.known(self._given) if self._given else [], self.catalog.sound_only()
            self._held = self._given if all(known) and not sound else [
                i for i, ok in zip(self._given, known, strict=True) if ok and i not in sound]
        return self._held

    def __len__(self) -> int:
        return len(self._given)

    def ids(self) -> list[str]:
        return list(self._ids())

    def known(self, ids: Sequence[str]) -> list[bool]:
        held = self.catalog.known(ids) if len(ids) else []
        return [ok and allowed for ok, allowed in zip(held, self._allows(ids), strict=True)]

    def chunks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        ids = self._ids()
        for start in range(0, len(ids), BLOCK):
            block = ids[start:start + BLOCK]
            yield block, self.catalog.rows(block)

    def nearest(self, query: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                biased: bool = False) -> tuple[list[str], np.ndarray]:
        n = min(n, len(self._given))
        if n <= 0:
            return [], np.zeros(0, np.float32)
        total = len(self.catalog)
        if score_fn is not None or len(self._given) <= EXACT_ROWS:
            return self._scan(query, n, score_fn, biased)

        def ask(m: int) -> tuple[list[str], np.ndarray] | None:
            if m >= total:
                return self._scan(query, n, None, biased)
            ids, scores = self.catalog.nearest(query, m, biased=biased)
            keep = [j for j, ok in enumerate(self._allows(ids)) if ok]
            if len(keep) >= n:
                keep = keep[:n]
                return [ids[j] for j in keep], np.asarray(scores)[keep]
            if len(ids) < m:  # the index answered fewer than asked (HNSW): scan instead
                return self._scan(query, n, None, biased)
            return None

        return widened(ask, min(total, max(2 * n, -(-2 * n * total // len(self._given)))))

    def _scan(self, query: np.ndarray, n: int, score_fn: ScoreFn | None,
              biased: bool) -> tuple[list[str], np.ndarray]:
        """The exact top ``n`` of the allowed rows by inner product or ``score_fn`` (+ bias when ``biased``): the
        catalog's chunked scan (``reelsearch.index.vectors.scan_chunks``) over ``chunks``."""
        chunks, fn = self.chunks(), score_fn or inner_product_score
        if biased:  # each block's biases as one more column, as the catalog's own scan holds them
            chunks, fn = with_biases(chunks, self.catalog.biases, fn)
        found, scores = scan_chunks(chunks, np.asarray(query, np.float32).reshape(1, -1), n, fn)
        return found[0], scores[0][: len(found[0])]

    def nearest_many(self, queries: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                     biased: bool = False) -> tuple[list[list[str]], list[np.ndarray]]:
        found = [self.nearest(q, n, score_fn, biased=biased) for q in np.asarray(queries, np.float32)]
        return [f[0] for f in found], [f[1] for f in found]

    def sound_only(self) -> set[str]:
        """The catalog's videos without a picture (a superset of the allowed ones: what sources and the fusion's bound
        need)."""
        return self.catalog.sound_only()

    def segment_count(self) -> int:
        """At most this many segments (the catalog's: a bound is all ``SegmentSource`` needs)."""
        return self.catalog.segment_count()

    def several_segments(self) -> bool:
        """The whole catalog's (a filter does not change how its videos are cut)."""
        return self.catalog.several_segments()

    def segments(self, ids: Sequence[str]) -> dict[str, StoredSegments]:
        return self.catalog.segments(ids)

    def nearest_segments(self, query: np.ndarray, n: int, score_fn: ScoreFn | None = None, *,
                         biased: bool = False) -> tuple[list[str], np.ndarray]:
        """The allowed videos' best ``n`` segments: an exact scan of their segments (a selective filter, or a score
        no vector index serves), else the catalog's, asked for more until ``n`` allowed ones are among them."""
        total = self.catalog.segment_count()
        n = min(n, total)
        if n <= 0:
            return [], np.zeros(0, np.float32)
        if score_fn is not None or len(self._given) <= EXACT_ROWS:
            return self._scan_segments(query, n, score_fn, biased)

        def ask(m: int) -> tuple[list[str], np.ndarray] | None:
            if m >= total:
                return self._scan_segments(query, n, None, biased)
            keys, scores = self.catalog.nearest_segments(query, m, biased=biased)
            keep = [j for j, ok in enumerate(self._allows([segment_key(k)[0] for k in keys])) if ok]
            if len(keep) >= n:
                return [keys[j] for j in keep[:n]], np.asarray(scores)[keep[:n]]
            if len(keys) < m:
                return self._scan_segments(query, n, None, biased)
            return None

        return widened(ask, min(total, max(2 * n, -(-2 * n * len(self.catalog) // len(self._given)))))

    def _scan_segments(self, query: np.ndarray, n: int, score_fn: ScoreFn | None,
                       biased: bool) -> tuple[list[str], np.ndarray]:
        """The exact top ``n`` of the allowed videos' segments (their rows read ``BLOCK`` videos at a time;
        ``biased``: each block's segment biases, read with its rows, as its last column)."""

        def chunks():
            ids = self._ids()
            for start in range(0, len(ids), BLOCK):
                segs = self.catalog.segments(ids[start:start + BLOCK])
                keys = [f"{v}:{o}" for v, s in segs.items() for o in range(len(s))]
                if keys:
                    rows = np.concatenate([s.rows for s in segs.values()])
                    if biased:
                        rows = np.column_stack([rows, np.concatenate([s.biases for s in segs.values()])])
                    yield keys, rows.astype(np.float32)

        fn = score_fn or inner_product_score
        found, scores = scan_chunks(chunks(), np.asarray(query, np.float32).reshape(1, -1), n,
                                    plus_bias(fn) if biased else fn)
        return found[0], scores[0][: len(found[0])]

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        return self.catalog.rows(ids)

    def stored(self, ids: Sequence[str]) -> dict[str, StoredVideo]:
        return self.catalog.stored(ids)

    def thumbnails(self, ids: Sequence[str]) -> dict[str, list[bytes | None]]:
        return self.catalog.thumbnails(ids)

    def biases(self, ids: Sequence[str]) -> np.ndarray:
        return self.catalog.biases(ids)

    def facts(self) -> VideoFacts:
        every = self.catalog.facts()
        keep = [j for j, ok in enumerate(self._allows(every.ids)) if ok]
        return VideoFacts([every.ids[j] for j in keep], [every.paths[j] for j in keep], every.duration[keep],
                          every.taken_at[keep], [every.taken_from[j] for j in keep],
                          None if every.sound_only is None else every.sound_only[keep])
