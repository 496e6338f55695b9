"""The paths a new user takes, on a cold cache (REELSEARCH_CACHE_DIR empty), through the CLI: `train` extracts
every split it reads, `mc eval` and `eval` find or extract features on demand, `eval default` writes its result
where the user is, not into the installed package. `train`, `mc eval` and the second `eval default` run in this
process (tests/in_process.py: the CLI's main, the cache folder given), the first `eval default` as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cache_fixtures import seed_cache
from conftest import shared_path
from in_process import cli_here

ROOT = Path(__file__).resolve().parents[1]

torch.set_num_threads(1)  # as the processes run (OMP_NUM_THREADS=1)


def flickr_manifest(folder: Path, n_train: int = 24, n_val: int = 8) -> Path:
    """A manifest of real Flickr8k photos (absolute paths) with their captions: ``n_train`` train, ``n_val`` val."""
    from reelsearch.datasets import load_dataset

    ds = load_dataset("flickr8k", shared_path("flickr8k"))
    rows = [(it, "train") for it in ds.items("train")[:n_train]] + [(it, "val") for it in ds.items("dev")[:n_val]]
    path = folder / "manifest.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": it.id, "path": str(it.path), "captions": it.captions, "split": s}) + "\n"
                            for it, s in rows))
    return path


def cli(*args, cache: Path, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "REELSEARCH_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "reelsearch", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """torabi-m2 trained from a cold cache through the CLI (the issue's defect: validation found no features)."""
    pytest.importorskip("efficientnet_lite_pytorch")
    root = tmp_path_factory.mktemp("cold")
    manifest = flickr_manifest(root / "data")
    cache = root / "cache"
    res = cli_here("train", "torabi-m2", "--data", f"manifest:{manifest}", "--out", root / "run", "--threads", "1",
              "--set", "train.epochs=1", "--set", "train.batch_size=20", "--set", "model.text.encoder.hidden_size=64",
              "--set", "model.text.projection.dim=64", "--set", "model.video.projection.dim=64", cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    return root, manifest, cache


def test_train_on_a_cold_cache_extracts_train_and_validation(trained):
    root, manifest, cache = trained
    stores = list((cache / "features").glob("*/appearance-efficientnet-lite0-*"))
    assert len(stores) == 1
    from reelsearch.features.store import FeatureStore

    store = FeatureStore(stores[0])
    assert len(store.keys("appearance")) == 32  # both splits
    assert store.recipe("appearance").sampling == "every:10"  # Torabi's recipe, not a default
    summary = json.loads((root / "run" / "summary.json").read_text())
    assert summary["best"]["RSum"] > 0 and (root / "run" / "best" / "config.json").is_file()
    saved = json.loads((root / "run" / "best" / "config.json").read_text())
    assert saved["config"]["features"]["video"]["appearance"]["extractor"] == "efficientnet-lite0"


def test_mc_eval_on_a_cold_cache_finds_or_extracts_features(trained, tmp_path):
    from reelsearch.datasets import load_dataset
    from reelsearch.mc import Question, write_mc_file

    root, manifest, _ = trained
    items = load_dataset("manifest", manifest).items("val")
    questions = [Question(it.id, tuple([it.captions[0]] + [o.captions[0] for o in items if o is not it][:4]), 0)
                 for it in items]
    mc = tmp_path / "val.csv"
    write_mc_file(mc, questions)
    res = cli_here("mc", "eval", root / "run", mc, "--data", f"manifest:{manifest}:val", "--json", "--quiet",
              cache=tmp_path / "fresh-cache")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["items"] == len(items) == 8 and out["missing"] == 0 and 0 <= out["accuracy"] <= 100


def test_eval_default_writes_its_result_where_the_user_is(trained, tmp_path, onnx_exports):
    """The bundled model's features are extracted on demand into the cold cache; its ONNX graphs are the run's (copied
    in: exporting on a cold cache is `train`'s test above and tests/test_onnx_runtime.py's)."""
    from reelsearch.models.checkpoint import default_model_dir

    _, manifest, cache = trained
    seed_cache(cache, onnx_exports)
    before = sorted(p.name for p in default_model_dir().iterdir())
    res = cli("eval", "default", "--data", f"manifest:{manifest}", "--split", "val", "--json", cache=cache,
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = json.loads(res.stdout)
    assert metrics["split"] == "val" and metrics["RSum"] > 0
    assert sorted(p.name for p in default_model_dir().iterdir()) == before  # nothing written into the package
    written = json.loads((tmp_path / "eval-reelsearch-default-manifest-val.json").read_text())
    assert written["RSum"] == metrics["RSum"]
    res = cli_here("eval", "default", "--data", f"manifest:{manifest}", "--split", "val", "--out", tmp_path / "m.json",
              cache=cache, cwd=tmp_path)
    assert res.returncode == 0 and json.loads((tmp_path / "m.json").read_text())["RSum"] == metrics["RSum"]
