"""The OpenAPI schema describes the service: schemathesis (every check, its coverage, fuzzing and stateful phases)
against a real uvicorn server over a small real index with an API key and a file whose name is not UTF-8 — no
failure. The run is bounded (``--max-examples``, a fixed seed) to stay well under a minute on the 2-core machine.
And the filter parameters' patterns accept exactly what the filter parser accepts.

What ``tests/schemathesis.toml`` and ``tests/schemathesis_hooks.py`` adjust, and why: where a schema-valid request
may be refused for a rule no schema can state (an upload that is not decodable media, a moment beyond the end, no
`q`, `like` or filter, a date in the future), the 400 or 422 the schema declares for it counts as an answer, and a
check of ours requires its ``detail`` to be one of the declared reasons; and multipart cases whose fields cannot
reach the server as generated (a multipart field is text on the wire) are dropped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import storage_directory

from reelsearch.search import Searcher
from reelsearch.search.filters import Filter, FilterError
from reelsearch.service import create_app
from reelsearch.service.contract import FILTER_PATTERNS, NON_BLANK
from test_search_support import ServerThread, add_transcripts, make_media, small_model, write_clip

pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency (pip install -e '.[dev]')")
torch.set_num_threads(1)
TESTS = Path(__file__).resolve().parent
KEY = "schema-test-key-0123456789"
#: examples per operation in the fuzzing and stateful phases (the coverage phase, most of the run, does not depend
#: on it); 10 reach every operation, phase and API link that 25 did (662 cases); more for a longer hunt
EXAMPLES = os.environ.get("REELSEARCH_SCHEMATHESIS_EXAMPLES", "10")
SEED = os.environ.get("REELSEARCH_SCHEMATHESIS_SEED", "1")


def test_schemathesis_finds_nothing(tmp_path):
    make_media(tmp_path / "media")
    write_clip(Path(os.fsdecode(os.fsencode(tmp_path / "media") + b'/odd \xff "name"\n.mp4')),
               [((90, 200, 90), 1.0)], seed=4)
    with Searcher(tmp_path / "index", small_model("moe")) as searcher:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        add_transcripts(searcher, tmp_path / "index")
        with ServerThread(create_app(searcher, api_key=KEY)) as server:
            cmd = [sys.executable, "-c", "import sys; from schemathesis.cli import schemathesis; "
                   "sys.argv[0] = 'st'; sys.exit(schemathesis())",
                   "--config-file", str(TESTS / "schemathesis.toml"), "run", f"{server.url}/openapi.json",
                   "--checks", "all", "--max-examples", EXAMPLES, "--seed", SEED, "--generation-database", "none",
                   "--header", f"X-API-Key: {KEY}", "--no-color", "--request-timeout", "60"]
            # hypothesis's tables of Unicode (about 1.5 s of CPU to make) from this process's folder, not made anew
            # in the run's empty working folder
            env = {**os.environ, "PYTHONPATH": str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
                   "HYPOTHESIS_STORAGE_DIRECTORY": str(storage_directory(intent_to_write=False).path)}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "Tested: 11" in out and "No issues found" in out, out[-3000:]
    generated, passed = map(int, re.search(r"(\d+) generated, (\d+) passed", out).groups())
    assert generated == passed >= 200, out[-2000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅\s+{phase}", out), (phase, out[-2000:])


_END_OF_TIME = datetime(9999, 12, 31, tzinfo=UTC).timestamp()
#: Characters filter values are made of, and some that look like them (a full-width space, NEL, an Arabic-Indic digit).
_FILTER_CHARS = st.sampled_from([*"0123456789-.:<>=smhSMHvideoVIDEOimagepchtxTX \t", "\u3000", "\x85", "\u0663"])


#: Values on the edges: Unicode digits (which int() and float() take), white space around and inside, case.
_FILTER_EDGES = ["\u0663" * 4, "2023-\u0663", "\u0663", "1-\u0663", "0000", "0001", " 2023-7 ", "2023-00", "2023-1-31",
                 "\u30002023\x85", ">= 1.5 m", "1 -2h", ".5", ".", "1.2.3", "-5", "5-", "> -5", "VIDEO", " Text ",
                 "\u0130mage"]


@pytest.mark.parametrize("key", ["after", "before", "kind", "duration", "has", "folder", "exclude", "phrase"])
def test_filter_patterns_accept_what_the_parser_accepts(key):
    """A filter parameter's pattern in the schema matches a value exactly when the filter parser takes it; the one
    gap, declared, is a date that matches but does not exist (2023-02-30). Dates are checked as of year 9999, so
    that "in the future" (422, declared) is not what is tested."""
    pattern = re.compile(FILTER_PATTERNS.get(key, NON_BLANK))

    def agree(value):
        try:
            Filter.of([(key, value)], now=_END_OF_TIME)
            accepted = True
        except FilterError as exc:
            accepted = False
            if pattern.search(value) and key in ("after", "before"):
                assert "not a date (day is out of range" in str(exc), (value, exc)
                return
        assert bool(pattern.search(value)) == accepted, value

    for value in _FILTER_EDGES:
        agree(value)
    settings(max_examples=300, derandomize=True, database=None, deadline=None,
             suppress_health_check=list(HealthCheck))(
        given(st.one_of(st.text(_FILTER_CHARS, max_size=14), st.from_regex(pattern)))(agree))()
