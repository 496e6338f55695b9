"""A cold search without torch: the bundled model's query graphs (``reelsearch.models.query_graphs``), the model
searched by them (``reelsearch.models.query_model``) and ``reelsearch search`` in a fresh process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import shared_path
from reelsearch.cli.main import app
from reelsearch.models import load_model
from reelsearch.models.checkpoint import default_model_dir
from reelsearch.models.query_export import export_query_graphs
from reelsearch.models.query_graphs import QueryGraphs, manifest_path
from reelsearch.models.query_model import QueryModel
from reelsearch.search import Searcher
from reelsearch.text import sentences

pytest.importorskip("onnxruntime")
SRC = Path(__file__).resolve().parents[1] / "src"
PHOTOS = ["1679557684_50a206e4a9", "3695064885_a6922f06b2", "3583321426_f373c52161", "1579798212_d30844b4c5",
          "2090545563_a4e66ec76b"]
QUERIES = ["a dog", "two people", "a dog runs on the grass after a ball", "children playing in the water"]


@pytest.fixture(scope="module")
def model():
    model = load_model("default")
    assert export_query_graphs(model, default_model_dir()) == manifest_path(default_model_dir())
    return model


@pytest.fixture(scope="module")
def library(tmp_path_factory, model):
    root = tmp_path_factory.mktemp("cold")
    (root / "photos").mkdir()
    for name in PHOTOS:
        shutil.copyfile(shared_path("flickr8k", "images") / f"{name}.jpg", root / "photos" / f"{name}.jpg")
    res = CliRunner().invoke(app, ["index", str(root / "photos"), "--index", str(root / "index"), "--quiet",
                                   "--no-speech", "--no-ocr"])
    assert res.exit_code == 0, res.output
    return root / "index"


def test_the_graphs_encode_as_the_torch_model(model):
    graphs = QueryGraphs.open(default_model_dir())
    assert graphs is not None and graphs.fingerprint == model.fingerprint()
    np.testing.assert_allclose(graphs.encode_text(QUERIES), model.encode_text(QUERIES), atol=1e-5)
    for query in QUERIES:  # alone (no padding) as a search encodes it
        np.testing.assert_allclose(graphs.encode_text([query]), model.encode_text([query]), atol=1e-5)


def test_the_query_model_reads_what_the_model_is(model):
    cold = QueryModel.open("default")
    assert cold is not None and cold.fingerprint() == model.fingerprint()
    assert list(cold.experts) == list(model.experts) and cold.row_dim == model.row_dim
    assert cold.feature_pipeline().describe() == model.feature_pipeline().describe()
    assert cold.querybank.digest() == model.querybank.digest()
    rows = np.random.default_rng(0).standard_normal((7, model.row_dim)).astype(np.float32)
    query = model.encode_text(["a dog"])
    np.testing.assert_allclose(cold.ann_query(query), model.ann_query(query), atol=1e-6)
    np.testing.assert_allclose(cold.score(query, rows), model.score(query, rows), atol=1e-5)
    np.testing.assert_allclose(cold.frame_scores(query[0], rows), model.frame_scores(query[0], rows), atol=1e-5)
    for name, s in model.expert_scores(query, rows).items():
        np.testing.assert_allclose(cold.expert_scores(query, rows)[name], s, atol=1e-5)


def test_a_search_by_the_graphs_answers_as_the_torch_model(library, model):
    with Searcher(library, model) as full, Searcher(library, QueryModel.open("default")) as cold:
        assert cold.model_id == full.model_id and not cold.stale()
        for query in [*QUERIES, "a dog -water", "people outdoors -dog"]:
            want, got = full.search(query, 5, frames=False), cold.search(query, 5, frames=False)
            assert [r.id for r in got] == [r.id for r in want]
            np.testing.assert_allclose([r.score for r in got], [r.score for r in want], atol=1e-4)
            np.testing.assert_allclose([r.confidence for r in got], [r.confidence for r in want], atol=1e-4)
        got, want = cold.annotate_id(want[0].id, QUERIES), full.annotate_id(want[0].id, QUERIES)
        assert [c["caption"] for c in got] == [c["caption"] for c in want]
        np.testing.assert_allclose([c["score"] for c in got], [c["score"] for c in want], atol=1e-4)


def test_a_searcher_loads_the_torch_model_to_embed(library):
    """... and keeps the text encoder the graphs ran (search's default for the bundled model: its student)."""
    for encoder in ("float32", "auto"):
        with Searcher(library, QueryModel.open("default"), text_encoder=encoder) as searcher:
            photo = next((library.parent / "photos").iterdir())
            ran = searcher.model.text_encoder_name
            searcher.full_model()
            assert not isinstance(searcher.model, QueryModel)
            assert searcher.model.text_encoder_name == ran == ("float32" if encoder == "float32" else "student")
            assert searcher.search(None, 3, like=str(photo))


def test_a_cold_search_imports_no_torch(library, model):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    args = [sys.executable, "-X", "importtime", "-m", "reelsearch", "search", "a dog", "--index", str(library),
            "-k", "3", "--local", "--json"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "torch" not in imported and "numpy" in imported and "onnxruntime" in imported
    with Searcher(library, "default", text_encoder="auto") as full:  # the torch model, with search's default
        assert full.model.text_encoder_name == "student"  # (the bundled model's student: auto)
        want = full.search("a dog", 3, frames=False)
        calibration = full.model.student_text.calibration
    got = json.loads(done.stdout)
    assert [r["id"] for r in got] == [r.id for r in want]
    np.testing.assert_allclose([r["score"] for r in got], [r.score for r in want], atol=1e-4)
    # the confidence as the torch model reads it (the student's own calibration), of how common "a dog" is in the
    # training captions (calibration version 6: the commonness table read without torch)
    np.testing.assert_allclose([r["confidence"] for r in got], [r.confidence for r in want], atol=1e-4)
    length_curve = calibration.lengths["2-3"]([r.score for r in want])
    assert all(r.confidence > 2 * c for r, c in zip(want, length_curve) if c > 0.01)


def test_without_the_graphs_the_model_loads_in_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    assert QueryModel.open("default") is None  # nothing cached here
    assert QueryModel.open(tmp_path) is None  # not a model folder


def test_graphs_of_another_cache_folder_are_copied_into_this_one(model, tmp_path, monkeypatch):
    """The process's MiniLM encoder made its graph under the cache folder of the time; with another cache folder now
    (REELSEARCH_CACHE_DIR changed), the export copies that graph here and its manifest serves a cold search."""
    model.encode_text(["a dog"])  # the process's encoder: its graph made (or found) under the run's cache folder
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    path = export_query_graphs(model, default_model_dir())
    assert path == manifest_path(default_model_dir()) and path.is_relative_to(tmp_path / "cache")
    graphs = QueryGraphs.open(default_model_dir())
    assert graphs is not None
    np.testing.assert_allclose(graphs.encode_text(QUERIES), model.encode_text(QUERIES), atol=1e-5)


def test_a_damaged_manifest_is_dropped_and_exported_again(library, model):
    manifest = manifest_path(default_model_dir())
    manifest.write_text("not json")
    assert QueryModel.open("default") is None and not manifest.exists()
    with Searcher(library, "default") as searcher:  # the torch model, its graphs exported again
        assert searcher.search("a dog", 3, frames=False)
    assert manifest.is_file() and QueryModel.open("default") is not None


def test_the_query_graphs_and_the_cue_sentences_share_one_minilm_session(model):
    """A cold search with text cues runs the package MiniLM for the model's query and for the cue index's sentence
    embedding: one ONNX Runtime session of that graph, not two."""
    graphs = QueryGraphs.open(default_model_dir())
    assert graphs is not None and sentences._session() is graphs.minilm
