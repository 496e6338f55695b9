"""`reelsearch mc build | eval | tag` end to end on crafted data: a manifest, a tiny saved model, a FeatureStore."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("spacy")

from reelsearch.cli.main import app  # noqa: E402
from reelsearch.features.store import FeatureStore  # noqa: E402
from reelsearch.mc import read_mc_file  # noqa: E402
from reelsearch.models import JointModel, VocabTextProcessor, create_model  # noqa: E402

torch.set_num_threads(1)

CAPTIONS = {
    "v1": ["a man is playing a guitar", "a person plays the guitar"],
    "v2": ["a dog catches a frisbee"],
    "v3": ["a woman slices an onion"],
    "v4": ["a boy rides a bicycle"],
    "v5": ["a girl swims in a pool"],
    "v6": ["a chef cooks pasta"],
    "v7": ["a man plays the piano"],
    "v8": ["two men are playing football"],
}


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "manifest.jsonl"
    rows = [{"id": k, "path": None, "captions": v, "split": "test", "features_key": f"k-{k}"}
            for k, v in CAPTIONS.items()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_build_command(tmp_path, manifest):
    out = tmp_path / "mc" / "test.csv"
    res = run("mc", "build", f"manifest:{manifest}", "--split", "test", "--out", out, "--seed", "4", "--json",
              "--quiet")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["questions"] == 8 and summary["too_small"] == 0 and summary["seed"] == 4
    qs = read_mc_file(out)
    assert [q.id for q in qs] == list(CAPTIONS)
    again = tmp_path / "again.csv"
    run("mc", "build", f"manifest:{manifest}:test", "--out", again, "--seed", "4", "--quiet")
    assert again.read_bytes() == out.read_bytes()


def test_build_reports_too_small_pools(tmp_path):
    path = tmp_path / "m.jsonl"
    caps = {"a": "a man is playing a guitar", "b": "a boy plays football", "c": "a dog catches a frisbee",
            "d": "a woman slices an onion", "e": "a chef cooks pasta"}
    path.write_text("".join(json.dumps({"id": k, "path": None, "captions": [v], "split": "test"}) + "\n"
                            for k, v in caps.items()), encoding="utf-8")
    res = run("mc", "build", f"manifest:{path}", "--split", "test", "--out", tmp_path / "o.csv", "--quiet")
    assert res.exit_code == 0
    assert "warning: a: only 3 eligible distractor(s)" in res.stderr and "warning: b:" in res.stderr
    assert "3 questions from 5 test items" in res.stdout and "not built: 2 (pool too small)" in res.stdout


def test_build_needs_a_split(tmp_path, manifest):
    res = CliRunner().invoke(app, ["mc", "build", f"manifest:{manifest}", "--out", str(tmp_path / "x.csv")])
    assert res.exit_code != 0 and "--split" in str(res.exception)


def test_tag_command():
    res = run("mc", "tag", "--json", "She walks over to the banquette and sits down.")
    assert json.loads(res.stdout) == {"caption": "She walks over to the banquette and sits down.",
                                      "phrases": ["walk over", "sit down"], "words": ["sit", "walk"],
                                      "fallback": False}


#: What the hand-made 6-d features of these tests are recorded as (extracted by nothing reelsearch has).
TINY_RECIPE = {"extractor": "hand-made", "dim": 6, "sampling": None, "max_frames": None, "short_side": None}


def tiny_model(attention: dict | None = None) -> JointModel:
    """A Torabi-M1-shaped model (mean words -> linear -> |.| -> L2; order similarity), small and untrained;
    with ``attention`` the video is a sentence-conditioned weighted average of its frames (M3)."""
    words = sorted({w for caps in CAPTIONS.values() for c in caps for w in c.split()})
    cfg = {
        "name": "tiny-order",
        "model": {
            "text": {"encoder": {"embed_dim": 8, "sequence": None, "pool": "mean"},
                     "projection": {"kind": "linear-abs-l2", "dim": 4}},
            "video": {"encoder": {"sequence": None, "pool": "mean"}, "attention": attention,
                      "projection": {"kind": "linear-abs-l2", "dim": 4}},
            "similarity": "order",
        },
        "features": {"video": {"appearance": TINY_RECIPE}, "text": {"kind": "vocab"}},
    }
    torch.manual_seed(0)
    return create_model(cfg, text_processor=VocabTextProcessor(words))


@pytest.mark.parametrize("attention", [None, {"dim": 3}], ids=["m1", "m3-attention"])
def test_eval_command_matches_a_brute_force_loop(tmp_path, manifest, attention):
    model = tiny_model(attention)
    ckpt = model.save(tmp_path / "ckpt")
    store_dir = tmp_path / "store"
    rng = np.random.default_rng(0)
    feats = {}
    from reelsearch.config import ModalityRecipe

    with FeatureStore(store_dir).writer("appearance", dim=6, dtype="float32",
                                        recipe=ModalityRecipe(**TINY_RECIPE)) as w:
        for k in list(CAPTIONS)[:-1]:  # v8 has no features: skipped and reported
            feats[k] = rng.standard_normal((3, 6)).astype(np.float32)
            w.add(f"k-{k}", feats[k])
    mc = tmp_path / "test.csv"
    run("mc", "build", f"manifest:{manifest}", "--split", "test", "--out", mc, "--quiet")
    choices = tmp_path / "choices.jsonl"
    res = run("mc", "eval", ckpt, mc, "--data", f"manifest:{manifest}", "--features", store_dir, "--json",
              "--choices", choices, "--batch-size", "3", "--quiet")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "warning: v8: not in" in res.stderr

    loaded = JointModel.load(ckpt)
    right, rows = 0, []
    with torch.no_grad():
        for q in read_mc_file(mc):
            if q.id not in feats:
                continue
            video = loaded.video_forward({"feats": torch.from_numpy(feats[q.id])[None]})
            scores = []
            for c in q.candidates:  # one caption at a time
                t = loaded.text_forward(loaded.text_processor([c]))
                if attention is None:  # S = -||max(0, c - v)||^2 by hand
                    scores.append(-float(((t[0] - video[0]).clamp_min(0) ** 2).sum()))
                else:  # the model's own 1 x 1 attended similarity
                    scores.append(float(loaded.similarity(t, video)[0, 0]))
            best = max(scores)
            right += scores[q.answer] == best and scores.count(best) == 1
            rows.append((q.id, scores))
    assert out == {"accuracy": pytest.approx(100 * right / 7, abs=1e-3), "items": 7, "missing": 1}
    lines = [json.loads(x) for x in choices.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in lines] == [r[0] for r in rows]
    for rec, (_, scores) in zip(lines, rows, strict=True):
        assert rec["scores"] == pytest.approx(scores, abs=1e-5)
        assert set(rec) == {"id", "candidates", "scores", "chosen", "answer", "correct"}
        assert rec["chosen"] == int(np.argmax(rec["scores"]))


def test_eval_needs_a_checkpoint(tmp_path, manifest):
    mc = tmp_path / "test.csv"
    run("mc", "build", f"manifest:{manifest}", "--split", "test", "--out", mc, "--quiet")
    res = CliRunner().invoke(app, ["mc", "eval", str(tmp_path / "nothing"), str(mc), "--data",
                                   f"manifest:{manifest}", "--features", str(tmp_path)])
    assert res.exit_code != 0 and "needs a trained model" in str(res.exception)


def test_mixture_rank_fusion_ranks_each_questions_five_candidates():
    from reelsearch.mc import Question
    from reelsearch.mc.model_scores import model_scores
    from reelsearch.models import MixtureOfExperts

    a, b = tiny_model(), tiny_model()
    with torch.no_grad():
        for p in b.parameters():
            p.add_(torch.randn_like(p))  # a second, different expert
    moe = MixtureOfExperts({"a": a, "b": b}, {"kind": "rank", "weights": {"a": 1.0, "b": 0.5}}).eval()
    caps = [c for v in CAPTIONS.values() for c in v]
    qs = [Question(f"q{i}", tuple(caps[i : i + 5]), i % 5) for i in range(4)]
    videos = {q.id: torch.randn(3, 6) for q in qs}
    got = model_scores(moe, qs, lambda ids: [{"appearance": videos[i].numpy()} for i in ids], batch_size=3,
                       progress=False)
    with torch.no_grad():
        for q, scores in zip(qs, got, strict=True):
            fused = np.zeros(5)
            for expert, w in ((a, 1.0), (b, 0.5)):
                v = expert.video_forward({"feats": videos[q.id][None]})
                s = [float(expert.similarity(expert.text_forward(expert.text_processor([c])), v)[0, 0])
                     for c in q.candidates]
                ranks = [1 + sum(o > x for o in s) + (sum(o == x for o in s) - 1) / 2 for x in s]  # 1 = best
                fused -= w * np.array(ranks)
            assert scores == pytest.approx(fused.tolist())
