"""The OpenAPI schema describes the service: schemathesis (every check, its coverage, fuzzing and stateful phases)
against a real uvicorn server over a small real index with an API key and a file whose name is not UTF-8 — no
failure. The run is bounded (``--max-examples``) to stay well under a minute on the 2-core machine.

What ``tests/schemathesis.toml`` and ``tests/schemathesis_hooks.py`` adjust, and why: an uploaded file is
schema-valid whatever its bytes, so 400 (undecodable media, declared) counts as an answer to a valid upload; and
multipart cases whose ``captions`` field was given a non-string value are dropped, since a multipart field is text
on the wire (the server receives a valid string).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reelsearch.search import Searcher
from reelsearch.service import create_app
from test_search_support import ServerThread, make_media, small_model, write_clip

pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency (pip install -e '.[dev]')")
torch.set_num_threads(1)
TESTS = Path(__file__).resolve().parent
KEY = "schema-test-key-0123456789"
EXAMPLES = os.environ.get("REELSEARCH_SCHEMATHESIS_EXAMPLES", "25")  # more for a longer hunt
SEED = os.environ.get("REELSEARCH_SCHEMATHESIS_SEED", "1")


def test_schemathesis_finds_nothing(tmp_path):
    make_media(tmp_path / "media")
    write_clip(Path(os.fsdecode(os.fsencode(tmp_path / "media") + b'/odd \xff "name"\n.mp4')),
               [((90, 200, 90), 1.0)], seed=4)
    with Searcher(tmp_path / "index", small_model("moe")) as searcher:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        _add_transcripts(searcher, tmp_path / "index")
        with ServerThread(create_app(searcher, api_key=KEY)) as server:
            cmd = [sys.executable, "-c", "import sys; from schemathesis.cli import schemathesis; "
                   "sys.argv[0] = 'st'; sys.exit(schemathesis())",
                   "--config-file", str(TESTS / "schemathesis.toml"), "run", f"{server.url}/openapi.json",
                   "--checks", "all", "--max-examples", EXAMPLES, "--seed", SEED, "--generation-database", "none",
                   "--header", f"X-API-Key: {KEY}", "--no-color", "--request-timeout", "60"]
            env = {**os.environ, "PYTHONPATH": str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   "SCHEMATHESIS_HOOKS": "schemathesis_hooks"}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "Tested: 10" in out and "No issues found" in out, out[-3000:]
    generated, passed = map(int, re.search(r"(\d+) generated, (\d+) passed", out).groups())
    assert generated == passed >= 200, out[-2000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅\s+{phase}", out), (phase, out[-2000:])


def _add_transcripts(searcher, index) -> None:
    """Speech and on-screen text for two videos (what `index` stores when those cues run), so that /search fuses them
    and /videos/{id}/transcript has segments to return."""
    from reelsearch.features.cues import CueResult, CueSegment
    from reelsearch.index.embedded.textcues import EmbeddedTextCues
    from reelsearch.search.cues import sentence_encoder

    videos = searcher.catalog.videos()
    with EmbeddedTextCues(index, encoder=sentence_encoder) as cues:
        for v, said, shown in [(videos[0], "a red car drives on the road", "ROUTE 66"),
                               (videos[1], "the sea is calm today", "Lisbon")]:
            words = tuple((0.2 + 0.3 * i, 0.45 + 0.3 * i, w) for i, w in enumerate(said.split()))
            cues.put(v.id, {"speech": CueResult("speech", [CueSegment("speech", 0.2, 2.5, said, 0.9, words=words)],
                                                recipe="speech:test"),
                            "ocr": CueResult("ocr", [CueSegment("ocr", 1.0, 2.0, shown, 0.8, box=(0.1, 0.7, 0.5, 0.8))],
                                             recipe="ocr:test")}, v.sha256)
