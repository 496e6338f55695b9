"""`reelsearch fuse`: separately trained models fused into a mixture of experts, evaluated and weight-tuned."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from in_process import cli_here
from rank_bounds import assert_metrics_within, metric_ranges
from reelsearch.errors import ReelsearchError
from reelsearch.evaluation.evaluator import RetrievalEvaluator
from reelsearch.features.caches import DatasetSource
from reelsearch.models import load_model
from reelsearch.training.fuse import fuse
from reelsearch.training.run import evaluate, model_pairs, train
from train_fixtures import make_dataset, small


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fuse")
    manifest, store = make_dataset(root / "toy", distinct=True)
    for name in ("torabi-m1", "mithun-expert"):
        train(name, f"manifest:{manifest}", root / name, features=store, overrides=small(name, epochs=2),
              progress=False)
    return root, manifest, store


def _matrix(run: Path, manifest: Path, store: Path) -> tuple[np.ndarray, np.ndarray]:
    """One model's validation matrix through its tensor path (independent of the evaluator)."""
    model = load_model(run)
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    data = model_pairs(model, source, "val", "cpu", progress=False)
    cpu = torch.device("cpu")
    with torch.no_grad():
        t = model.text_forward(data.text_batch(model.text_processor, np.arange(len(data.captions)), cpu))
        v = model.video_forward(data.video_batch(np.arange(len(data.video_keys)), cpu))
        return model.similarity(t, v).numpy(), data.cap2vid


def test_fused_scores_are_the_weighted_sum_and_tuning_never_loses(runs, tmp_path):
    """The fused metrics are those of Mithun Eq. 4 computed here from each model's tensor path. The two paths agree
    to about 1e-7, and a two-epoch toy has near-tied scores that such a difference can reorder, so the metrics are
    checked against their range over every way a near-tie could break (tests/rank_bounds.py), never for equality."""
    root, manifest, store = runs
    a, cap2vid = _matrix(root / "torabi-m1", manifest, store)
    b, _ = _matrix(root / "mithun-expert", manifest, store)
    rep = fuse([root / "torabi-m1", root / "mithun-expert"], tmp_path / "moe", weights=[1.0, 0.5],
               data=f"manifest:{manifest}", features=store, progress=False)
    assert rep["experts"] == ["torabi-m1", "mithun-expert"] and rep["split"] == "val"
    # the evaluator's matrices are the tensor path's, within rounding
    moe = load_model(tmp_path / "moe")
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    evaluator = RetrievalEvaluator(model_pairs(moe, source, "val", "cpu", progress=False))
    sims = evaluator.expert_scores(moe)
    np.testing.assert_allclose(sims["torabi-m1"], a, atol=1e-5)
    np.testing.assert_allclose(sims["mithun-expert"], b, atol=1e-5)
    np.testing.assert_allclose(moe.score(*evaluator._embed(moe)), a + 0.5 * b, atol=1e-5)
    assert_metrics_within(rep["result"], a + 0.5 * b, cap2vid)  # Mithun Eq. 4, computed here independently
    assert_metrics_within(rep["experts_alone"]["torabi-m1"], a, cap2vid)
    # the saved mixture reproduces the report through `eval` (the same path: equal to the bit)
    again = evaluate(tmp_path / "moe", f"manifest:{manifest}", split="val", features=store, progress=False)
    assert again["RSum"] == rep["result"]["RSum"]

    tuned = fuse([root / "torabi-m1", root / "mithun-expert"], tmp_path / "tuned", data=f"manifest:{manifest}",
                 features=store, tune=True, progress=False)
    w = tuned["fusion"]["weights"]
    assert w["torabi-m1"] == 1.0 and tuned["trials"] == 6  # grid of 7, all-zero skipped
    assert_metrics_within(tuned["result"], a + w["mithun-expert"] * b, cap2vid)
    best_high = metric_ranges(a + w["mithun-expert"] * b, cap2vid)["RSum"][1]
    for other in (0.25, 0.5, 1.0, 2.0):  # no other weight is surely better
        assert best_high >= metric_ranges(a + other * b, cap2vid)["RSum"][0]

    rank = fuse([root / "torabi-m1", root / "mithun-expert"], tmp_path / "rank", kind="rank",
                data=f"manifest:{manifest}", features=store, progress=False)
    assert rank["result"]["RSum"] > 0 and (tmp_path / "rank" / "best" / "moe.json").is_file()


def test_a_score_fused_mixture_nests_by_its_experts(runs, tmp_path):
    root, manifest, store = runs
    fuse([root / "torabi-m1", root / "mithun-expert"], tmp_path / "inner", weights=[1.0, 0.5])
    # a run folder: the mixture in best/, the report beside it, never in the model folder
    inner = tmp_path / "inner"
    assert (inner / "fusion.json").is_file() and (inner / "best" / "reelsearch.json").is_file()
    assert not (inner / "best" / "fusion.json").exists()
    rep = fuse([tmp_path / "inner", root / "torabi-m1"], tmp_path / "outer")
    assert rep["experts"] == ["torabi-m1", "mithun-expert", "torabi-m1-2"]
    assert rep["fusion"]["weights"] == {"torabi-m1": 1.0, "mithun-expert": 0.5, "torabi-m1-2": 1.0}


def test_bad_requests_are_clear(runs, tmp_path):
    root, manifest, store = runs
    with pytest.raises(ReelsearchError, match="at least two experts"):
        fuse([root / "torabi-m1"], tmp_path / "x")
    with pytest.raises(ReelsearchError, match="3 weights for 2 experts"):
        fuse([root / "torabi-m1", root / "mithun-expert"], tmp_path / "x", weights=[1, 1, 1])
    with pytest.raises(ReelsearchError, match="--tune needs --data"):
        fuse([root / "torabi-m1", root / "mithun-expert"], tmp_path / "x", tune=True)
    experts = ["fuse", str(root / "torabi-m1"), str(root / "mithun-expert"), "--out", str(tmp_path / "cli")]
    bad = cli_here(*experts, "--weights", "1,x")
    assert bad.returncode == 2 and "--weights: expected numbers" in bad.stderr, bad.stderr
    out = cli_here(*experts, "--data", f"manifest:{manifest}", "--features", store, "--json", "--threads", "1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"]["RSum"] > 0
