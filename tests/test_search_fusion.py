"""The one fusion of search sources (``reelsearch.search.fusion``) against brute force on random sources: a visual
score served top-n first from a catalog, biases of both signs, text cues that cover only some videos, ties; the
weighted sums and the rank fusion are written out independently, video by video. The checks would catch a bound
whose visual top leaves out the bias and a fusion that does not widen its candidates."""

from __future__ import annotations

import numpy as np
import pytest

from reelsearch.index.textcue_records import CueScores
from reelsearch.search import fusion
from reelsearch.search.cues import KEYWORD_MEANING, SEMANTIC_FLOOR, CueSource
from reelsearch.search.fusion import exhaustive_fusion, positive, threshold_fusion
from reelsearch.search.sources import NearestSource, Top

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

