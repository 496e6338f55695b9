"""The public Python API: docs/python-api.md's examples run as written; `import reelsearch` stays light; the CLI's
`models` and `--version`; a missing extra is named; importing reelsearch leaves the process's HF settings alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cache_fixtures import seed_cache
from conftest import shared_path
from in_process import cli_here

ROOT = Path(__file__).resolve().parents[1]


def code_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(encoding="utf-8"), flags=re.S)


def test_the_python_api_page_runs_as_written(tmp_path, monkeypatch, capsys, onnx_exports):
    shared_path("msrvtt", "clips", "video9770.mp4")
    pytest.importorskip("efficientnet_lite_pytorch")
    blocks = code_blocks(ROOT / "docs" / "python-api.md")
    assert len(blocks) >= 6
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(seed_cache(tmp_path / "cache", onnx_exports)))
    namespace: dict = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/python-api.md block {i + 1}", "exec"), namespace)
        except Exception as exc:  # say which block broke
            raise AssertionError(f"docs/python-api.md block {i + 1} failed: {exc!r}\n{block}") from exc
    out = capsys.readouterr().out
    assert "(2, 1024) (1, 1024) (2, 1)" in out
    assert "efficientnet-lite0" in out and "torabi-m1 joint" in out and "default reelsearch-default" in out
    assert namespace["hits"][0].path.endswith(".mp4") and namespace["summary"]["epochs_run"] == 1


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_import_is_light_and_names_resolve_lazily():
    res = _python("import sys, reelsearch; print('torch' in sys.modules, reelsearch.__version__);"
                  "print(sorted(n for n in dir(reelsearch) if not n.startswith('_')))")
    assert res.returncode == 0, res.stderr
    first, names = res.stdout.splitlines()
    assert first.startswith("False ")
    for name in ("load", "list_models", "describe_models", "list_pretrained", "Searcher", "train", "evaluate",
                 "FeaturePipeline"):
        assert name in names
    import reelsearch

    assert callable(reelsearch.load) and reelsearch.Searcher.__name__ == "Searcher"
    with pytest.raises(AttributeError):
        reelsearch.nonexistent  # noqa: B018


def test_cli_version_and_models():
    from reelsearch import __version__

    res = subprocess.run([sys.executable, "-m", "reelsearch", "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == f"reelsearch {__version__}"
    res = cli_here("models", "--json")  # the command itself, in this process (the process: `--version` above)
    assert res.returncode == 0, res.stderr
    listing = json.loads(res.stdout)
    import reelsearch

    assert [a["name"] for a in listing["architectures"]] == reelsearch.list_models()
    assert {"torabi-m3", "mithun-moe", "scde"} <= {a["name"] for a in listing["architectures"]}
    default = next(p for p in listing["pretrained"] if p["name"] == "default")
    assert Path(default["path"], "moe.json").is_file() and default["metrics"]["flickr8k-dev"]["RSum"] > 0
    from reelsearch.models import load_model

    bundled = load_model(default["path"])  # the card's numbers are the bundled model's: its experts and weights
    assert bundled.name == default["architecture"] and list(bundled.experts) == ["lite0", "lite2"]


def test_a_missing_extra_is_named_not_a_traceback(tmp_path, onnx_exports):
    """Without the [text] extra (sentence-transformers) and no ONNX export of MiniLM cached yet (a cache holding the
    CNNs' only: a cached export is run without it), encoding text says which extra to install; through the CLI the
    same message, exit status 2. One process does both (a process costs Python's and torch's start): the Python API
    first, then the CLI's entry point as `python -m reelsearch` runs it, whose exit status the process ends with."""
    cache = str(seed_cache(tmp_path / "cache", [p for p in onnx_exports if not p.name.startswith("minilm")]))
    (tmp_path / "q.txt").write_text("a dog\n")
    code = ("import runpy, sys; sys.modules['sentence_transformers'] = None\n"
            "import reelsearch\n"
            "from reelsearch.extras import MissingExtraError\n"
            "try:\n    reelsearch.load('default').encode_text(['a dog'])\n"
            "except MissingExtraError as exc:\n    print('OK', exc, flush=True)\n"
            "sys.argv = ['reelsearch'] + sys.argv[1:]\n"
            "runpy.run_module('reelsearch', run_name='__main__')\n")
    res = subprocess.run([sys.executable, "-c", code, "annotate", str(shared_path("msrvtt", "clips", "video9770.mp4")),
                          "--captions", str(tmp_path / "q.txt"), "--index", str(tmp_path / "i")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "REELSEARCH_CACHE_DIR": cache})
    assert res.stdout.startswith("OK") and "reelsearch[text]" in res.stdout, res.stdout + res.stderr
    assert res.returncode == 2 and "pip install 'reelsearch[text]'" in res.stderr and "Traceback" not in res.stderr, \
        res.stderr


def test_loading_minilm_leaves_the_processs_hub_settings_alone(onnx_exports):
    pytest.importorskip("sentence_transformers")  # (its ONNX export: in the run's cache folder, made once)
    code = ("import os\nfrom reelsearch.text.minilm import MiniLMEncoder\n"
            "e = MiniLMEncoder()\nprint(e.sentence_features(['a dog']).shape, os.environ.get('HF_HUB_OFFLINE'),"
            " os.environ.get('TRANSFORMERS_OFFLINE'))")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["(1,", "384)", "None", "None"]
