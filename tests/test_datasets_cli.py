"""`reelsearch data info` through the real CLI app."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import shared_path
from reelsearch.cli.main import app
from reelsearch.errors import DataFormatError, ReelsearchError

runner = CliRunner()


def test_data_info_json_msrvtt():
    root = shared_path("msrvtt")
    res = runner.invoke(app, ["data", "info", "msrvtt", str(root), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {
        "splits": {
            "train": {"items": 6513, "captions": 130260},
            "val": {"items": 497, "captions": 9940},
            "test": {"items": 2990, "captions": 59800},
        }
    }
    res = runner.invoke(app, ["data", "info", "msrvtt", str(root), "--json", "--protocol", "1k-a"])
    assert json.loads(res.output)["splits"]["test"] == {"items": 1000, "captions": 1000}


def test_data_info_protocol_and_seed_pass_through():
    root = shared_path("msvd")
    res = runner.invoke(app, ["data", "info", "msvd", str(root), "--protocol", "5", "--seed", "3", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["splits"]["test"] == {"items": 670, "captions": 3350}


def test_data_info_table(tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"x")
    lines = [{"id": "a", "path": "a.mp4", "captions": ["x", "y"], "split": "train"}, {"id": "b", "path": None}]
    (tmp_path / "manifest.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    res = runner.invoke(app, ["data", "info", "manifest", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = [line.split() for line in res.output.splitlines()]
    assert rows[0][0] == "manifest"
    assert rows[1:] == [["split", "items", "captions"], ["train", "1", "2"], ["all", "1", "0"], ["total", "2", "2"]]


def test_data_info_errors(tmp_path):
    (tmp_path / "manifest.jsonl").write_text('{"id": "a", "path": "gone.mp4"}\n')
    res = runner.invoke(app, ["data", "info", "manifest", str(tmp_path), "--json"])
    assert isinstance(res.exception, DataFormatError) and "manifest.jsonl:1:" in str(res.exception)
    res = runner.invoke(app, ["data", "info", "nope", str(tmp_path)])
    assert isinstance(res.exception, ReelsearchError) and "valid formats" in str(res.exception)


def test_data_info_error_exit_status(tmp_path, capsys, monkeypatch):
    """Through main(): one line on stderr naming file and line, exit status 2."""
    from reelsearch.cli import main as cli_main

    (tmp_path / "manifest.jsonl").write_text('{"id": "a", "path": "gone.mp4"}\n')
    monkeypatch.setattr("sys.argv", ["reelsearch", "data", "info", "manifest", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        cli_main.main()
    assert exc.value.code == 2
    assert "manifest.jsonl:1: a: media file does not exist" in capsys.readouterr().err
