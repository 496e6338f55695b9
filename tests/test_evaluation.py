"""Retrieval metrics, fusion and reports, checked against a brute-force per-query reference and hand-worked cases."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from reelsearch.errors import EvaluationInputError
from reelsearch.evaluation import METRIC_KEYS, format_table, query_ranks, rank_metrics, retrieval_metrics, to_json
from reelsearch.evaluation.counting import count_ge
from reelsearch.scoring import MITHUN2018_WEIGHTS, EmbeddingScores, average_ranks, rank_fusion, score_fusion
from reelsearch.scoring.fusion import weighted_sum

# --- independent reference: one query at a time, straight from the definitions -----------------------------------


def reference_query(scores, correct) -> tuple[int, float]:
    """Order the gallery by score, highest first, wrong items before correct ones among equal scores; return the
    1-based position of the first correct item and the average precision over the correct items."""
    correct = set(correct)
    order = sorted(range(len(scores)), key=lambda g: (-scores[g], g in correct))
    hits, total, first = 0, 0.0, None
    for position, g in enumerate(order, start=1):
        if g in correct:
            hits += 1
            total += hits / position
            if first is None:
                first = position
    return first, total / len(correct)


def reference_metrics(sims, positives) -> dict:
    sims = np.asarray(sims).tolist()
    ranks, aps = [], []
    for q, row in enumerate(sims):
        r, ap = reference_query(row, positives[q])
        ranks.append(r)
        aps.append(ap)
    n = len(ranks)
    out = {f"R@{k}": 100.0 * sum(1 for r in ranks if r <= k) / n for k in (1, 5, 10, 50)}
    out["MedR"] = float(statistics.median(ranks))
    out["MeanR"] = sum(ranks) / n
    total = 0.0
    for ap in aps:
        total += ap
    out["mAP"] = total / n
    return out


def random_positives(rng, n_queries, n_gallery, max_k):
    return [sorted(set(rng.integers(0, n_gallery, rng.integers(1, max_k + 1)).tolist())) for _ in range(n_queries)]


def transpose_positives(positives, n_gallery):
    cols = [[] for _ in range(n_gallery)]
    for q, items in enumerate(positives):
        for g in items:
            cols[g].append(q)
    return cols


# --- hand-worked examples -------------------------------------------------------------------------------------------


def test_hand_worked_single_direction():
    sims = np.array(
        [
            [0.9, 0.5, 0.5, 0.2, 0.7],  # correct {2, 3}: order g0 g4 g1 g2 g3 (g1 wrong, tied, goes first)
            [0.1, 0.8, 0.8, 0.8, 0.3],  # correct {1, 2}: g3 (wrong, tied) first, then g1, g2
            [0.6, 0.1, 0.2, 0.3, 0.4],  # correct {0}: top
            [1.0, 1.0, 1.0, 1.0, 1.0],  # correct {4}: all tied, the 4 wrong ones go first
        ]
    )
    positives = [[2, 3], [1, 2], [0], [4]]
    # ranks: q0 = 4 (positions of correct: 4, 5), q1 = 2 (positions 2, 3), q2 = 1, q3 = 5
    # AP: q0 = (1/4 + 2/5)/2 = 13/40; q1 = (1/2 + 2/3)/2 = 7/12; q2 = 1; q3 = 1/5
    ranks, ap = query_ranks(sims, positives, device="cpu")
    assert ranks.tolist() == [4, 2, 1, 5]
    assert ap == pytest.approx([13 / 40, 7 / 12, 1.0, 1 / 5], abs=1e-15)
    m = rank_metrics(sims, positives, device="cpu")
    assert list(m) == list(METRIC_KEYS)
    # R@1 = 1/4 -> 25 %; all ranks <= 5 -> 100 %; MedR = (2 + 4)/2 = 3; MeanR = 12/4 = 3
    assert (m["R@1"], m["R@5"], m["R@10"], m["R@50"]) == (25.0, 100.0, 100.0, 100.0)
    assert (m["MedR"], m["MeanR"]) == (3.0, 3.0)
    # mAP = (13/40 + 7/12 + 1 + 1/5)/4 = (39 + 70 + 120 + 24)/120/4 = 253/480
    assert m["mAP"] == pytest.approx(253 / 480, abs=1e-15)


HAND_SIMS = np.array(
    [  # captions x videos; caption_to_video = [0, 0, 1, 1, 2]
        [0.9, 0.1, 0.3],  # c0 -> v0: rank 1
        [0.2, 0.5, 0.2],  # c1 -> v0: v1 higher, v2 tied (counts against) -> rank 3
        [0.4, 0.4, 0.1],  # c2 -> v1: v0 tied -> rank 2
        [0.0, 0.6, 0.7],  # c3 -> v1: v2 higher -> rank 2
        [0.3, 0.2, 0.8],  # c4 -> v2: rank 1
    ]
)
HAND_C2V = np.array([0, 0, 1, 1, 2])


def test_hand_worked_retrieval():
    r = retrieval_metrics(HAND_SIMS, HAND_C2V, device="cpu")
    t2v, v2t = r["t2v"], r["v2t"]
    # t2v ranks [1, 3, 2, 2, 1]: R@1 = 2/5, MedR 2, MeanR 9/5, AP = 1/rank -> (1 + 1/3 + 1/2 + 1/2 + 1)/5 = 2/3
    assert (t2v["R@1"], t2v["R@5"], t2v["MedR"], t2v["MeanR"]) == (40.0, 100.0, 2.0, 1.8)
    assert t2v["mAP"] == pytest.approx(2 / 3, abs=1e-15)
    # v2t, columns: v0 [.9 .2 .4 .0 .3] own {c0, c1}: c0 first; c1 after c2, c4 -> position 4; AP (1 + 2/4)/2 = 3/4
    # v1 [.1 .5 .4 .6 .2] own {c2, c3}: c3 first, c1 (wrong), c2 third; AP (1 + 2/3)/2 = 5/6
    # v2 [.3 .2 .1 .7 .8] own {c4}: first; AP 1
    assert (v2t["R@1"], v2t["MedR"], v2t["MeanR"]) == (100.0, 1.0, 1.0)
    assert v2t["mAP"] == pytest.approx((3 / 4 + 5 / 6 + 1) / 3, abs=1e-15)
    assert r["RSum"] == 40.0 + 100.0 + 100.0 + 3 * 100.0


# --- agreement with the reference, to the last digit ----------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tied", [False, True])
def test_rank_metrics_match_reference(seed, tied):
    rng = np.random.default_rng(seed)
    n_q, n_g = 37, 83
    sims = rng.integers(0, 4, (n_q, n_g)) if tied else rng.standard_normal((n_q, n_g)).astype(np.float32)
    positives = random_positives(rng, n_q, n_g, max_k=6)
    expected = reference_metrics(sims, positives)
    assert rank_metrics(sims, positives, device="cpu") == expected
    assert rank_metrics(sims, positives, chunk_size=5, device="cpu") == expected
    as_dict = {str(q): p for q, p in enumerate(positives)}
    assert rank_metrics(sims, as_dict, chunk_size=1, device="cpu") == expected
    # the same problem with the queries as columns of the transposed matrix, read in place
    assert rank_metrics(np.ascontiguousarray(sims.T), positives, chunk_size=7, transpose=True, device="cpu") == expected


@pytest.mark.parametrize("tied", [False, True])
def test_retrieval_metrics_match_reference(tied):
    rng = np.random.default_rng(5)
    n_videos, per_video = 23, 4
    c2v = rng.permutation(np.repeat(np.arange(n_videos), per_video))
    shape = (len(c2v), n_videos)
    sims = rng.integers(0, 3, shape).astype(np.float64) if tied else rng.standard_normal(shape)
    r = retrieval_metrics(sims, c2v, chunk_size=9, device="cpu")
    assert r["t2v"] == reference_metrics(sims, [[v] for v in c2v])
    own = [np.flatnonzero(c2v == v).tolist() for v in range(n_videos)]
    assert r["v2t"] == reference_metrics(sims.T, own)
    assert r["RSum"] == sum(r[d][f"R@{k}"] for d in ("t2v", "v2t") for k in (1, 5, 10))


def test_chunked_equals_unchunked_and_every_source_kind(tmp_path):
    rng = np.random.default_rng(3)
    text = rng.standard_normal((120, 16)).astype(np.float32)
    video = rng.standard_normal((30, 16)).astype(np.float32)
    c2v = np.repeat(np.arange(30), 4)
    fn = EmbeddingScores(text, video)
    sims = fn(slice(0, 120))
    whole = retrieval_metrics(sims, c2v, chunk_size=10_000, device="cpu")
    for chunk in (1, 7, 64):
        assert retrieval_metrics(sims, c2v, chunk_size=chunk, device="cpu") == whole
    assert retrieval_metrics(sims, c2v, memory_budget_mb=0.01, device="cpu") == whole  # budget -> small chunks
    assert retrieval_metrics(fn, c2v, chunk_size=13, device="cpu") == whole  # callable: two passes
    np.save(tmp_path / "s.npy", sims)
    mm = np.load(tmp_path / "s.npy", mmap_mode="r")
    assert retrieval_metrics(mm, c2v, chunk_size=11, device="cpu") == whole
    torch = pytest.importorskip("torch")
    assert retrieval_metrics(torch.from_numpy(sims), c2v, chunk_size=11, device="cpu") == whole
    # the torch kernel (used on GPUs) counts exactly like the numpy one
    assert retrieval_metrics(torch.from_numpy(sims), c2v, chunk_size=11, device=torch.device("cpu")) == whole


def test_count_kernels_agree():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    X = rng.integers(0, 5, (9, 5000)).astype(np.float32)
    T = np.sort(rng.integers(0, 5, (9, 3)).astype(np.float32), axis=1)
    brute = np.array([[int((X[q] >= t).sum()) for t in T[q]] for q in range(9)])
    assert (count_ge(X, T, axis=1) == brute).all()
    assert (count_ge(torch.from_numpy(X), T, axis=1) == brute).all()
    assert (count_ge(np.ascontiguousarray(X.T), T, axis=0) == brute).all()
    assert (count_ge(torch.from_numpy(np.ascontiguousarray(X.T)), T, axis=0) == brute).all()


def test_dtypes_do_not_change_ties():
    rng = np.random.default_rng(6)
    ints = rng.integers(-2, 2, (20, 40))
    positives = random_positives(rng, 20, 40, max_k=3)
    expected = reference_metrics(ints, positives)
    for dtype in (np.int8, np.int64, np.float16, np.float32, np.float64):
        assert rank_metrics(ints.astype(dtype), positives, device="cpu") == expected
    assert rank_metrics(ints, np.array([p[0] for p in positives]), device="cpu") == reference_metrics(
        ints, [[p[0]] for p in positives]
    )


# --- errors ---------------------------------------------------------------------------------------------------------


def test_errors_name_the_query():
    sims = np.zeros((4, 6))
    with pytest.raises(EvaluationInputError, match="query 2 has no correct gallery item"):
        rank_metrics(sims, [[0], [1], [], [3]])
    with pytest.raises(EvaluationInputError, match="query 3 has no entry"):
        rank_metrics(sims, {"0": [0], "1": [1], "2": [2]})
    with pytest.raises(EvaluationInputError, match="query 1: gallery index 6 is out of range"):
        rank_metrics(sims, [[0], [6], [2], [3]])
    bad = sims.copy()
    bad[2, 4] = np.nan
    with pytest.raises(EvaluationInputError, match="NaN at query 2") as info:
        rank_metrics(bad, [[0], [1], [2], [3]], device="cpu")
    assert info.value.subject == "scores"
    with pytest.raises(EvaluationInputError, match="video 2 has no caption"):
        retrieval_metrics(np.zeros((3, 3)), np.array([0, 1, 1]))
    with pytest.raises(EvaluationInputError, match="caption 1: video index 5"):
        retrieval_metrics(np.zeros((3, 3)), np.array([0, 5, 2]))
    with pytest.raises(EvaluationInputError, match="2-D"):
        rank_metrics(np.zeros(5), [[0]])


# --- fusion ---------------------------------------------------------------------------------------------------------


def test_average_ranks_and_rank_fusion_hand_example():
    a = np.array([[0.9, 0.5, 0.5, 0.1]])  # ranks 1, 2.5, 2.5, 4 (the tied pair shares positions 2 and 3)
    b = np.array([[0.2, 0.8, 0.4, 0.6]])  # ranks 4, 1, 3, 2
    assert average_ranks(a).tolist() == [[1.0, 2.5, 2.5, 4.0]]
    assert average_ranks(b).tolist() == [[4.0, 1.0, 3.0, 2.0]]
    # equal weights: -(1 + 4, 2.5 + 1, 2.5 + 3, 4 + 2) = -(5, 3.5, 5.5, 6): item 1 is now first
    assert rank_fusion([a, b]).tolist() == [[-5.0, -3.5, -5.5, -6.0]]
    # weights (1, 0.5): -(1 + 2, 2.5 + 0.5, 2.5 + 1.5, 4 + 1) = -(3, 3, 4, 5): items 0 and 1 tie
    assert rank_fusion([a, b], weights=[1.0, 0.5]).tolist() == [[-3.0, -3.0, -4.0, -5.0]]
    # along columns: the same numbers for the transposed matrices
    assert rank_fusion([a.T, b.T], axis=0).T.tolist() == [[-5.0, -3.5, -5.5, -6.0]]
    # row functions fuse row by row
    fused = rank_fusion([lambda rows: a[rows], lambda rows: b[rows]])
    assert fused(slice(0, 1)).tolist() == [[-5.0, -3.5, -5.5, -6.0]]


def test_average_ranks_match_brute_force():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 4, (6, 30)).astype(np.float64)
    brute = [[1 + sum(v > s for v in row) + (sum(v == s for v in row) - 1) / 2 for s in row] for row in x.tolist()]
    assert average_ranks(x).tolist() == brute
    assert average_ranks(x.T, axis=0).T.tolist() == brute


def test_score_fusion():
    rng = np.random.default_rng(8)
    obj, act, place = (rng.uniform(-1, 1, (10, 12)).astype(np.float32) for _ in range(3))
    fused = score_fusion([obj, act, place], MITHUN2018_WEIGHTS)
    assert MITHUN2018_WEIGHTS == (1.0, 1.0, 0.5)  # Mithun et al. 2018, Eq. 4 and the text below it
    np.testing.assert_allclose(fused, obj + act + 0.5 * place, rtol=1e-6)
    assert fused.dtype == np.float32
    # z-score: each matrix standardised by its global mean/std; a rescaled, shifted copy fuses identically
    z = score_fusion([obj, act], normalize="zscore")
    z_scaled = score_fusion([obj, 10 * act.astype(np.float64) + 3], normalize="zscore")
    np.testing.assert_allclose(z, z_scaled, atol=1e-6)
    np.testing.assert_allclose(z, (obj - obj.mean()) / obj.std() + (act - act.mean()) / act.std(), atol=1e-5)
    fn = score_fusion([lambda r: obj[r], lambda r: act[r]], [1.0, 2.0])
    np.testing.assert_allclose(fn(slice(2, 5)), obj[2:5] + 2 * act[2:5], rtol=1e-6)
    with pytest.raises(EvaluationInputError, match="2 similarity matrices but 3 weights"):
        score_fusion([obj, act], [1, 1, 1])
    with pytest.raises(EvaluationInputError, match="differ in shape"):
        score_fusion([obj, act[:5]])
    # small float arrays are summed at once, anything else in blocks through ScoreSource: the same sums and dtypes
    mixed = score_fusion([obj, act.astype(np.float64)], [1.0, 2.0])
    assert mixed.dtype == np.float64
    np.testing.assert_allclose(mixed, obj.astype(np.float64) + 2 * act.astype(np.float64), rtol=1e-12)
    general = score_fusion([obj.view(np.memmap), act.astype(np.float64).view(np.memmap)], [1.0, 2.0])
    assert type(general) is np.ndarray and general.dtype == np.float64
    np.testing.assert_allclose(general, mixed, rtol=1e-12)
    half = score_fusion([obj.astype(np.float16), place], [1.0, 0.5])  # half floats: widened in the general path
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, obj.astype(np.float16).astype(np.float32) + 0.5 * place, rtol=1e-6)
    # weighted_sum: that small-array sum without the checks (a search fuses each hit's segments by it)
    segments = [rng.uniform(-1, 1, 7) for _ in range(2)]
    np.testing.assert_allclose(weighted_sum(segments, [1.0, 0.3]), segments[0] + 0.3 * segments[1], rtol=1e-12)
    np.testing.assert_allclose(weighted_sum(segments, [1.0, 0.3]),
                               score_fusion([s[None] for s in segments], [1.0, 0.3])[0], rtol=1e-12)
    assert weighted_sum([obj, act], [1.0, 2.0]).dtype == np.float32


# --- reports and the evaluator --------------------------------------------------------------------------------------


def test_to_json_and_format_table(tmp_path):
    r = retrieval_metrics(HAND_SIMS, HAND_C2V, device="cpu")
    text = to_json(r, tmp_path / "out" / "m.json")
    assert json.loads(text) == r == json.loads((tmp_path / "out" / "m.json").read_text())
    table = format_table(r)
    lines = table.splitlines()
    assert lines[0].split() == list(METRIC_KEYS)
    assert lines[1].split()[:3] == ["t2v", "40.00", "100.00"] and lines[2].split()[0] == "v2t"
    assert lines[-1].split() == ["RSum", "540.00"]
    single = format_table(rank_metrics(HAND_SIMS, [[v] for v in HAND_C2V], device="cpu"))
    assert len(single.splitlines()) == 2
    with pytest.raises(ValueError):
        format_table({"x": 1})


def test_retrieval_evaluator_scores_any_model_through_its_interface(tmp_path):
    """RetrievalEvaluator(pairs)(model): a joint model's scores are those of its tensor path (to rounding) and so are
    its metrics (within the range near-ties allow; few near-ties, asserted); a rank-fused mixture ranks videos per
    caption for t2v and captions per video for v2t."""
    import torch

    from rank_bounds import assert_metrics_within
    from reelsearch.config import apply_overrides
    from reelsearch.evaluation.evaluator import RetrievalEvaluator
    from reelsearch.features.caches import DatasetSource
    from reelsearch.models import MixtureOfExperts, create_model, model_config, text_processor_for
    from reelsearch.training.run import model_pairs
    from train_fixtures import make_dataset, small

    torch.manual_seed(0)
    manifest, store = make_dataset(tmp_path / "toy", n_train=30, n_val=20, distinct=True)
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    caps = [c for it in source.dataset.items("train") for c in it.captions]
    models = {}
    for name in ("torabi-m1", "mithun-expert"):
        cfg = apply_overrides(model_config(name), small(name))
        models[name] = create_model(cfg, text_processor_for(cfg, caps)).eval()
    pairs = model_pairs(models["torabi-m1"], source, "val", progress=False)
    evaluator = RetrievalEvaluator(pairs, batch_size=7)
    cpu = torch.device("cpu")
    matrices = {}
    for name, m in models.items():
        with torch.no_grad():
            t = m.text_forward(pairs.text_batch(m.text_processor, np.arange(len(pairs.captions)), cpu))
            v = m.video_forward(pairs.video_batch(np.arange(len(pairs.video_keys)), cpu))
            matrices[name] = m.similarity(t, v).numpy()
        res = evaluator(m)
        np.testing.assert_allclose(evaluator.last_scores[name], matrices[name], atol=1e-6)
        assert_metrics_within(res, matrices[name], pairs.cap2vid, tol=2e-6)
    moe = MixtureOfExperts(models, {"kind": "rank", "weights": {"torabi-m1": 1.0, "mithun-expert": 0.5}})
    res = evaluator(moe)
    # rank fusion of the matrices the evaluator scored (ranks of near-tied scores are for rounding to decide)
    experts = [evaluator.last_scores["torabi-m1"], evaluator.last_scores["mithun-expert"]]
    for got, want in zip(experts, matrices.values()):
        np.testing.assert_allclose(got, want, atol=1e-6)
    fused_t2v = rank_fusion(experts, [1.0, 0.5], axis=1)
    fused_v2t = rank_fusion(experts, [1.0, 0.5], axis=0)
    assert res["t2v"] == pytest.approx(retrieval_metrics(fused_t2v, pairs.cap2vid)["t2v"])
    assert res["v2t"] == pytest.approx(retrieval_metrics(fused_v2t, pairs.cap2vid)["v2t"])
    assert evaluator.primary_metric == "RSum" and set(evaluator.last_scores) == set(models)


def test_callable_without_shape_and_progress(capsys):
    rng = np.random.default_rng(10)
    sims = rng.integers(0, 3, (15, 25)).astype(np.float32)
    positives = random_positives(rng, 15, 25, max_k=4)
    expected = reference_metrics(sims, positives)
    assert rank_metrics(lambda rows: sims[rows], positives, chunk_size=4, device="cpu") == expected
    int_keys = {q: p for q, p in enumerate(positives)}
    assert rank_metrics(lambda rows: sims[rows], int_keys, chunk_size=4, device="cpu", progress=True) == expected
    assert "metrics" in capsys.readouterr().err  # the tqdm bar went to stderr
