"""The one fusion of search sources (``reelsearch.search.fusion``) against brute force on random sources: a visual
score served top-n first from a catalog, biases of both signs, text cues that cover only some videos, ties; the
weighted sums and the rank fusion are written out independently, video by video, and the fusion per segment (videos
of several segments, cues at random times) segment by segment. The checks would catch a bound
whose visual top leaves out the bias and a fusion that does not widen its candidates."""

from __future__ import annotations

import numpy as np
import pytest

from reelsearch.index.catalog import StoredSegments
from reelsearch.index.textcue_records import CueScores, TextSpans
from reelsearch.search import fusion
from reelsearch.search.cues import KEYWORD_MEANING, SEMANTIC_FLOOR, CueSource, counts_for
from reelsearch.search.fusion import exhaustive_fusion, positive, threshold_fusion
from reelsearch.search.sources import NearestSource, SegmentSource, Top

N = 200


@pytest.fixture(autouse=True)
def few_first_candidates(monkeypatch):
    """8 first candidates (128 in use) among 200 videos: the threshold test has to widen them."""
    monkeypatch.setattr(fusion, "FIRST_CANDIDATES", 8)


class Catalog:
    """A catalog in memory: video rows, biases; ``nearest`` is an exact inner-product (+ bias) top n."""

    def __init__(self, rows: np.ndarray, biases: np.ndarray):
        self.id_list = [f"v{i}" for i in range(len(rows))]
        self.where = {v: i for i, v in enumerate(self.id_list)}
        self.vectors, self.bias = rows, biases

    def __len__(self):
        return len(self.id_list)

    def nearest(self, query, n, score_fn=None, *, biased=False):
        s = self.vectors @ query + (self.bias if biased else 0.0)
        order = np.lexsort((np.arange(len(s)), -s))[:n]
        return [self.id_list[i] for i in order], s[order]

    def rows(self, ids):
        return self.vectors[[self.where[i] for i in ids]]

    def ids(self):
        return list(self.id_list)

    def known(self, ids):
        return [i in self.where for i in ids]

    def sound_only(self):
        return set()  # every video has a picture

    def biases(self, ids):
        return self.bias[[self.where[i] for i in ids]]


def _case(seed: int, biased: bool = True, ties: bool = False):
    """(catalog, query, {cue: CueScores}): random unit rows; biases of both signs, as wide as the scores; two cues,
    speech on about half the videos, ocr on a fifth (the others have no text); ``ties``: scores rounded coarsely."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((N, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    if ties:
        rows = np.round(rows * 2) / 2  # many equal inner products
    biases = rng.uniform(-0.6, 0.4, N) if biased else np.full(N, -0.25)
    if ties:
        biases = np.round(biases, 1)
    query = rng.standard_normal(16).astype(np.float32)
    query /= np.linalg.norm(query)
    catalog = Catalog(rows, biases)
    cues = {}
    for cue, share in (("speech", 0.5), ("ocr", 0.2)):
        have = sorted(rng.choice(N, int(share * N), replace=False))
        ids = [catalog.id_list[i] for i in have] + ["gone"]  # a video the library no longer holds
        keyword = (rng.random(len(ids)) < 0.3) * rng.integers(1, 4, len(ids)) / 3.0  # few levels: ties
        semantic = rng.uniform(0, 0.6, len(ids))
        cues[cue] = CueScores("q", ids, {cue: keyword.astype(np.float32)}, {cue: semantic.astype(np.float32)},
                              {cue: [None] * len(ids)}, {cue: [None] * len(ids)}, {v: i for i, v in enumerate(ids)})
    return catalog, query, cues


def _cue_value(sc: CueScores, cue: str, vid: str) -> float:
    """A video's expert score for ``cue``, from the definition: keyword + 2 x meaning above the floor, rescaled."""
    j = sc.ids.index(vid) if vid in sc.ids else None
    if j is None:
        return 0.0
    meaning = max(0.0, (float(sc.semantic[cue][j]) - SEMANTIC_FLOOR) / (1 - SEMANTIC_FLOOR))
    return KEYWORD_MEANING[0] * float(sc.keyword[cue][j]) + KEYWORD_MEANING[1] * meaning


def _brute(catalog: Catalog, query, cues, weights: dict, visual: bool) -> np.ndarray:
    """Every video's fused score, one video at a time: w_visual * (row . query + bias) + sum_c w_c * cue score."""
    out = np.zeros(len(catalog))
    for i, vid in enumerate(catalog.id_list):
        total = 0.0
        if visual:
            total += weights["visual"] * (float(catalog.vectors[i] @ query) + float(catalog.bias[i]))
        for cue, sc in cues.items():
            total += weights[cue] * _cue_value(sc, cue, vid)
        out[i] = total
    return out


def _sources(catalog, query, cues, visual: bool):
    out = {"visual": NearestSource(catalog, query, biased=True)} if visual else {}
    out.update({c: CueSource(sc, c, catalog.known) for c, sc in cues.items()})
    return out


def _agrees(got, brute: np.ndarray, catalog: Catalog, k: int, positive_only: bool) -> bool:
    """The fusion's top k has the brute-force scores, and is the brute-force top k up to the order of ties."""
    order = [i for i in np.argsort(-brute, kind="stable") if not positive_only or brute[i] > 0][:k]
    want = brute[order]
    if len(got.ids) != len(order) or not np.allclose(got.scores, want, atol=1e-5):
        return False
    scores = [brute[catalog.where[v]] for v in got.ids]
    return bool(np.allclose(scores, got.scores, atol=1e-5))


CASES = [(seed, k, w, visual, biased, ties) for seed in range(6) for k in (1, 5, 20)
         for w, visual in (({"visual": 1.0, "speech": 1.0, "ocr": 0.5}, True), ({"visual": 0.3, "speech": 2.0,
                                                                                  "ocr": 0.0}, True),
                           ({"visual": 1.0}, True), ({"speech": 1.0, "ocr": 0.5}, False))
         for biased, ties in ((True, False), (True, True), (False, False))]


def _run(case, total=None):
    seed, k, weights, visual, biased, ties = case
    catalog, query, cues = _case(seed, biased, ties)
    cues = {c: sc for c, sc in cues.items() if c in weights}
    sources = _sources(catalog, query, cues, visual)
    w = {**({"visual": weights["visual"]} if visual else {}), **{c: weights[c] for c in cues}}
    got = threshold_fusion(sources, w, k, len(catalog) if total is None else total,
                           keep=None if visual else positive)
    return got, _brute(catalog, query, cues, weights, visual), catalog, k, not visual


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"seed{c[0]}-k{c[1]}-{'-'.join(c[2])}-b{c[4]:d}t{c[5]:d}")
def test_threshold_fusion_equals_brute_force(case):
    got, brute, catalog, k, positive_only = _run(case)
    assert _agrees(got, brute, catalog, k, positive_only), (got.ids, got.scores)
    # each source's score and part are reported for the results, and the parts add up to the fused score
    assert np.allclose(sum(got.terms.values()), got.scores, atol=1e-9)


class SoundCatalog(Catalog):
    """``Catalog`` where every ``every``-th video has no picture (sound alone): no row (``rows`` raises), never among
    ``nearest``, bias 0."""

    def __init__(self, catalog: Catalog, every: int = 7):
        super().__init__(catalog.vectors, catalog.bias.copy())
        self.sound = {v for i, v in enumerate(self.id_list) if i % every == 3}
        self.bias[[self.where[v] for v in self.sound]] = 0.0

    def nearest(self, query, n, score_fn=None, *, biased=False):
        s = self.vectors @ query + (self.bias if biased else 0.0)
        order = [i for i in np.lexsort((np.arange(len(s)), -s)) if self.id_list[i] not in self.sound][:n]
        return [self.id_list[i] for i in order], s[order]

    def rows(self, ids):
        if self.sound & set(ids):
            raise KeyError(sorted(self.sound & set(ids))[0])
        return super().rows(ids)

    def sound_only(self):
        return set(self.sound)


@pytest.mark.parametrize("shift", [0.0, -2.0])
@pytest.mark.parametrize("case", [c for c in CASES if c[3]], ids=lambda c: f"seed{c[0]}-k{c[1]}-{'-'.join(c[2])}")
def test_videos_without_a_picture_are_found_by_their_words_alone(case, shift):
    """A video without a picture scores 0 in the picture's source and is a candidate only where a cue has evidence
    of it: the fusion's top k is the brute-force top k of the videos with a picture and those without one that some
    cue finds (a search of the picture alone never answers one), exact however the candidates widen; ``shift``: every
    picture scores below 0 (the bound must then cover the words of those without one, outside the candidates)."""
    seed, k, weights, _, biased, ties = case
    plain, query, cues = _case(seed, biased, ties)
    plain.bias = plain.bias + shift
    catalog = SoundCatalog(plain)
    cues = {c: sc for c, sc in cues.items() if c in weights}
    w = {"visual": weights["visual"], **{c: weights[c] for c in cues}}
    got = threshold_fusion(_sources(catalog, query, cues, True), w, k, len(catalog), sound_only=True, first=k)
    brute = _brute(catalog, query, cues, weights, True)
    words = {v: sum(_cue_value(sc, c, v) for c, sc in cues.items() if weights[c] > 0) for v in catalog.sound}
    eligible = [i for i, v in enumerate(catalog.id_list) if v not in catalog.sound or words[v] > 0]
    for v in catalog.sound:  # no picture: only its words count
        brute[catalog.where[v]] -= weights["visual"] * float(catalog.vectors[catalog.where[v]] @ query)
    order = sorted(eligible, key=lambda i: -brute[i])[:k]
    assert np.allclose(got.scores, brute[order], atol=1e-5)
    assert np.allclose([brute[catalog.where[v]] for v in got.ids], got.scores, atol=1e-5)
    assert all(words[v] > 0 for v in got.ids if v in catalog.sound)
    if not cues or not any(weights[c] for c in cues):
        assert not set(got.ids) & catalog.sound


def test_the_candidates_widen_only_when_needed():
    rounds = [_run(c)[0].rounds for c in CASES]
    assert max(rounds) > 1 and min(rounds) == 1
    # the model alone, biases of both signs included: the catalog ranks by score + bias, so its own top k is the
    # answer, in one round of k candidates
    catalog, query, _ = _case(0, biased=True)
    asked = []
    nearest = catalog.nearest
    catalog.nearest = lambda q, n, fn=None, biased=False: asked.append(n) or nearest(q, n, fn, biased=biased)
    got = threshold_fusion({"visual": NearestSource(catalog, query, biased=True)}, {"visual": 1.0}, 7, len(catalog))
    assert asked == [7] and got.rounds == 1
    assert got.scores == pytest.approx(np.sort(catalog.vectors @ query + catalog.bias)[::-1][:7])


def test_a_visual_top_without_the_bias_is_caught(monkeypatch):
    nearest = Catalog.nearest
    monkeypatch.setattr(Catalog, "nearest", lambda self, q, n, fn=None, biased=False: nearest(self, q, n, fn))
    failures = sum(not _agrees(*_run(c)) for c in CASES if c[3] and c[4])
    assert failures > 0


def test_a_fusion_that_does_not_widen_is_caught():
    failures = sum(not _agrees(*_run(c, total=1)) for c in CASES)  # stops after the first round
    assert failures > 0


def test_rank_fusion_equals_ranks_counted_by_hand():
    rng = np.random.default_rng(4)
    catalog, query, cues = _case(1, ties=True)
    ids = catalog.ids()
    scans = {"object": np.round(rng.normal(size=N), 1), "scene": np.round(rng.normal(size=N), 1)}

    class Scan:
        constant = False

        def __init__(self, scores):
            self.s = scores

        def top(self, n):
            return Top(ids, self.s, -np.inf)

        def scores(self, which):
            return self.s[[catalog.where[i] for i in which]]

    sources = {**{e: Scan(s) for e, s in scans.items()}, **{c: CueSource(sc, c, catalog.known) for c, sc in
                                                             cues.items()}}
    weights = {"object": 1.0, "scene": 0.5, "speech": 2.0, "ocr": 0.25}
    got = exhaustive_fusion(sources, weights, 10, ids, kind="rank")
    rows = {e: s for e, s in scans.items()}
    rows.update({c: np.array([_cue_value(sc, c, v) for v in ids]) for c, sc in cues.items()})

    def rank(row, i):  # 1 = best; equal scores share the average of their ranks
        better = sum(1 for x in row if x > row[i])
        equal = sum(1 for x in row if x == row[i])
        return better + (equal + 1) / 2

    brute = np.array([-sum(weights[e] * rank(rows[e], i) for e in weights) for i in range(N)])
    assert _agrees(got, brute, catalog, 10, False)
    # zscore normalisation: each source standardised over every video, then weighted and summed
    got = exhaustive_fusion(sources, weights, 10, ids, kind="score", normalize="zscore")
    z = {e: (r - r.mean()) / r.std() for e, r in rows.items()}
    assert _agrees(got, sum(weights[e] * z[e] for e in weights), catalog, 10, False)



# ------------------------------------------------------------------------------------------------ per segment
class SegmentedCatalog(Catalog):
    """``Catalog`` whose videos have 1-4 segments (their own rows, biases and times; the video row is their mean):
    ``nearest_segments`` an exact inner-product (+ bias) top n over every segment."""

    def __init__(self, rng, n: int, most: int = 4):
        rows, biases, self.segs, keys, seg_rows, seg_biases = [], [], {}, [], [], []
        for v in range(n):
            count = int(rng.integers(1, most + 1))
            r = rng.standard_normal((count, 16)).astype(np.float32)
            r /= np.linalg.norm(r, axis=1, keepdims=True)
            b = rng.uniform(-0.6, 0.4, count)
            ends = np.cumsum(rng.uniform(2.0, 30.0, count))
            self.segs[f"v{v}"] = StoredSegments(np.r_[0.0, ends[:-1]], ends, np.zeros(count, np.int64),
                                                np.ones(count, np.int64), r, b)
            keys += [f"v{v}:{o}" for o in range(count)]
            seg_rows.append(r)
            seg_biases.append(b)
            rows.append(r.mean(axis=0))
            biases.append(float(b.mean()))
        super().__init__(np.stack(rows), np.array(biases))
        self.keys, self.seg_rows, self.seg_biases = keys, np.concatenate(seg_rows), np.concatenate(seg_biases)

    def segment_count(self):
        return len(self.keys)

    def several_segments(self):
        return any(len(s) > 1 for s in self.segs.values())

    def nearest_segments(self, query, n, score_fn=None, *, biased=False):
        s = self.seg_rows @ query + (self.seg_biases if biased else 0.0)
        order = np.lexsort((np.arange(len(s)), -s))[:n]
        return [self.keys[i] for i in order], s[order]

    def segments(self, ids):
        return {i: self.segs[i] for i in ids if i in self.segs}


def _timed_case(seed: int, most: int = 4):
    """(catalog, query, {cue: CueScores with each video's text spans}): spans of 0-3 per video and cue, at random
    times (some past the video's end, some of no length), keyword on few levels, meaning below and above the floor."""
    rng = np.random.default_rng(seed)
    catalog = SegmentedCatalog(rng, N, most)
    query = rng.standard_normal(16).astype(np.float32)
    query /= np.linalg.norm(query)
    cues = {}
    for cue, share in (("speech", 0.5), ("ocr", 0.3)):
        have = sorted(rng.choice(N, int(share * N), replace=False))
        ids = [catalog.id_list[i] for i in have] + ["gone"]
        spans = {}
        for vid in ids:
            end = float(catalog.segs[vid].ends[-1]) if vid in catalog.segs else 10.0
            t = int(rng.integers(1, 4))
            starts = rng.uniform(0.0, end + 2.0, t)
            lengths = np.where(rng.random(t) < 0.2, 0.0, rng.uniform(0.5, 8.0, t))
            keyword = ((rng.random(t) < 0.3) * rng.integers(1, 4, t) / 3.0).astype(np.float32)
            spans[vid] = TextSpans(starts, starts + lengths, keyword, rng.uniform(0, 0.6, t).astype(np.float32))
        cues[cue] = CueScores("q", ids, {cue: np.array([spans[v].keyword.max() for v in ids], np.float32)},
                              {cue: np.array([spans[v].semantic.max() for v in ids], np.float32)},
                              {cue: [None] * len(ids)}, {cue: [None] * len(ids)},
                              {v: i for i, v in enumerate(ids)}, lambda v, c, spans=spans: spans[v])
    return catalog, query, cues


def _brute_segments(catalog: SegmentedCatalog, query, cues, weights: dict, visual: bool) -> np.ndarray:
    """Every video's fused score, segment by segment: the best over its segments of w_visual * (segment row . query
    + its bias) + sum_c w_c * (keyword + 2 x meaning of the cue's spans that overlap the segment, or are nearest)."""
    floor = SEMANTIC_FLOOR
    out = np.zeros(len(catalog))
    for i, vid in enumerate(catalog.id_list):
        seg = catalog.segs[vid]
        per = [weights["visual"] * (float(seg.rows[s] @ query) + float(seg.biases[s])) if visual else 0.0
               for s in range(len(seg))]
        for cue, sc in cues.items():
            if vid not in sc.positions:
                continue
            spans = sc.spans(vid, cue)
            best = [[0.0, 0.0] for _ in range(len(seg))]
            for a, b, kw, sem in zip(spans.starts, spans.ends, spans.keyword, spans.semantic, strict=True):
                hit = [s for s in range(len(seg)) if (a < seg.ends[s] and b > seg.starts[s])
                       or (a == b and seg.starts[s] <= a < seg.ends[s])]
                if not hit:  # the nearest segment
                    gaps = [max(seg.starts[s] - b, a - seg.ends[s]) for s in range(len(seg))]
                    hit = [int(np.argmin(gaps))]
                for s in hit:
                    best[s][0] = max(best[s][0], float(kw))
                    best[s][1] = max(best[s][1], max(0.0, (float(sem) - floor) / (1 - floor)))
            for s in range(len(seg)):
                per[s] += weights[cue] * (KEYWORD_MEANING[0] * best[s][0] + KEYWORD_MEANING[1] * best[s][1])
        out[i] = max(per)
    return out


SEGMENT_CASES = [(seed, k, w, visual) for seed in range(4) for k in (1, 5, 20)
                 for w, visual in (({"visual": 1.0, "speech": 1.0, "ocr": 0.5}, True),
                                   ({"visual": 0.3, "speech": 2.0, "ocr": 1.0}, True),
                                   ({"speech": 1.0, "ocr": 0.5}, False))]


@pytest.mark.parametrize("case", SEGMENT_CASES, ids=lambda c: f"seed{c[0]}-k{c[1]}-{'-'.join(c[2])}")
def test_per_segment_fusion_equals_brute_force(case):
    """Cues count for the segments their time overlaps: the fusion per segment is the exact top k of each video's
    best fused segment (checked against the sum written out segment by segment)."""
    seed, k, weights, visual = case
    catalog, query, cues = _timed_case(seed)
    sources = {"visual": SegmentSource(catalog, query, biased=True)} if visual else {}
    sources.update({c: CueSource(sc, c, catalog.known) for c, sc in cues.items()})
    got = threshold_fusion(sources, weights, k, len(catalog), keep=None if visual else positive,
                           segments=catalog.segments)
    brute = _brute_segments(catalog, query, cues, weights, visual)
    assert _agrees(got, brute, catalog, k, not visual), (got.ids, got.scores)
    assert np.allclose(sum(got.terms.values()), got.scores, atol=1e-9)  # the parts of the best segment
    # per video (the fusion before segments) a video's cues count wherever their words are: never less
    per_video = threshold_fusion(sources, weights, k, len(catalog), keep=None if visual else positive)
    assert per_video.scores[0] >= got.scores[0] - 1e-9


def test_videos_of_one_segment_fuse_as_before():
    """A library without a video of several segments: the fusion per segment (segments read, each scored) gives
    the ranking and scores of the fusion per video."""
    catalog, query, cues = _timed_case(5, most=1)
    assert not catalog.several_segments()
    weights = {"visual": 1.0, "speech": 1.0, "ocr": 0.5}
    cue_sources = {c: CueSource(sc, c, catalog.known) for c, sc in cues.items()}
    for k in (1, 10):
        before = threshold_fusion({"visual": NearestSource(catalog, query, biased=True), **cue_sources}, weights, k,
                                  len(catalog))
        after = threshold_fusion({"visual": SegmentSource(catalog, query, biased=True), **cue_sources}, weights, k,
                                 len(catalog), segments=catalog.segments)
        assert after.ids == before.ids and np.allclose(after.scores, before.scores, atol=1e-9)
        # and one segment is the video: the cue's score of it, from its spans, is the video's
        for source in cue_sources.values():
            for vid in after.ids:
                own = source.by_segment(vid, catalog.segs[vid])
                assert own is None or own[0] == pytest.approx(source.scores([vid])[0], abs=1e-6)


def test_a_cue_counts_for_the_segments_its_time_overlaps():
    starts, ends = np.array([0.0, 10.0]), np.array([10.0, 20.0])
    spans = np.array([[1, 2], [5, 5], [9.5, 10.5], [10, 10], [30, 31], [-3, -1], [2, 10]], np.float64)
    got = counts_for(spans[:, 0], spans[:, 1], starts, ends)
    assert got.tolist() == [[True, False], [True, False], [True, True], [False, True], [False, True], [True, False],
                            [True, False]]
