"""`reelsearch metrics --sims S.npy --gt GT.json [--json]` and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from reelsearch.cli.main import app
from reelsearch.errors import DataFormatError
from reelsearch.evaluation import METRIC_KEYS, rank_metrics

runner = CliRunner()


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    sims = rng.integers(0, 3, (12, 30)).astype(np.float32)
    positives = {str(q): sorted({int(q), int(rng.integers(0, 30))}) for q in range(12)}
    np.save(tmp_path / "S.npy", sims)
    (tmp_path / "GT.json").write_text(json.dumps(positives))
    return tmp_path, sims, positives


def test_json_output_matches_library(files):
    tmp, sims, positives = files
    res = runner.invoke(app, ["metrics", "--sims", str(tmp / "S.npy"), "--gt", str(tmp / "GT.json"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert list(out) == list(METRIC_KEYS)
    assert out == rank_metrics(sims, positives, device="cpu")


def test_table_output(files):
    tmp, sims, positives = files
    res = runner.invoke(
        app, ["metrics", "--sims", str(tmp / "S.npy"), "--gt", str(tmp / "GT.json"), "--chunk-size", "5"]
    )
    assert res.exit_code == 0, res.output
    header, row = res.output.strip().splitlines()
    assert header.split() == list(METRIC_KEYS)
    expected = rank_metrics(sims, positives, device="cpu")
    assert float(row.split()[1]) == pytest.approx(expected["R@1"], abs=0.005)


def _error(args) -> DataFormatError:
    res = runner.invoke(app, ["metrics", *args])
    assert res.exit_code != 0
    assert isinstance(res.exception, DataFormatError), res.output
    return res.exception


def test_bad_files_name_file_and_problem(files):
    tmp, sims, positives = files
    s, g = str(tmp / "S.npy"), str(tmp / "GT.json")

    err = _error(["--sims", str(tmp / "missing.npy"), "--gt", g])
    assert err.path.endswith("missing.npy") and "not found" in err.problem

    np.save(tmp / "cube.npy", np.zeros((2, 3, 4)))
    err = _error(["--sims", str(tmp / "cube.npy"), "--gt", g])
    assert err.path.endswith("cube.npy") and "2-D" in err.problem and "(2, 3, 4)" in err.problem

    err = _error(["--sims", g, "--gt", g])
    assert err.path.endswith("GT.json") and "not a .npy file" in err.problem

    (tmp / "range.json").write_text(json.dumps({**positives, "3": [2, 30]}))
    err = _error(["--sims", s, "--gt", str(tmp / "range.json")])
    assert err.path.endswith("range.json") and "query 3: gallery index 30 is out of range" in err.problem

    (tmp / "missing_q.json").write_text(json.dumps({k: v for k, v in positives.items() if k != "7"}))
    err = _error(["--sims", s, "--gt", str(tmp / "missing_q.json")])
    assert "query 7 has no entry" in err.problem

    (tmp / "extra_q.json").write_text(json.dumps({**positives, "12": [0]}))
    assert "query 12" in _error(["--sims", s, "--gt", str(tmp / "extra_q.json")]).problem

    (tmp / "key.json").write_text(json.dumps({**positives, "first": [0]}))
    assert "'first' is not a query index" in _error(["--sims", s, "--gt", str(tmp / "key.json")]).problem

    (tmp / "broken.json").write_text('{"0": [1,\n 2,, ]}')
    err = _error(["--sims", s, "--gt", str(tmp / "broken.json")])
    assert err.line == 2 and "invalid JSON" in err.problem

    (tmp / "empty.json").write_text(json.dumps({**positives, "4": []}))
    assert "query 4 has no correct gallery item" in _error(["--sims", s, "--gt", str(tmp / "empty.json")]).problem

    nan = sims.copy()
    nan[5, 2] = np.nan
    np.save(tmp / "nan.npy", nan)
    err = _error(["--sims", str(tmp / "nan.npy"), "--gt", g, "--device", "cpu"])
    assert err.path.endswith("nan.npy") and "NaN at query 5" in err.problem
