"""Stateless search replicas over one PostgreSQL catalog: two servers (each its own Searcher and connection) give
the same top 10 for 100 queries while a third process indexes (what it commits is seen by both at once, with no
restart); a replica that mounts the files elsewhere maps them with `--media-root`, and one that cannot reach a file
still finds the video and says why for that file (its /media answers 404 with the reason)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from reelsearch.search import Searcher
from reelsearch.service import create_app
from test_search_support import CAPTIONS, ServerThread, make_media, small_model, write_image

torch.set_num_threads(1)
SRC = Path(__file__).resolve().parents[1] / "src"
#: 100 distinct queries: triples of the test captions.
QUERIES = [f"{a}, {b} and {c}" for a, b, c in itertools.permutations(CAPTIONS, 3)][:100]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return small_model("cosine").save(tmp_path_factory.mktemp("model") / "model")


def _top10(http: httpx.Client, query: str) -> list[tuple[str, float]]:
    res = http.get("/search", params={"q": query, "k": 10})
    assert res.status_code == 200, res.text
    return [(r["path"], round(r["score"], 5)) for r in res.json()["results"]]


def test_two_replicas_answer_alike_while_a_third_process_indexes(pg_url, tmp_path, model_dir):
    make_media(tmp_path / "media")
    more = tmp_path / "more"
    more.mkdir()
    for i in range(12):
        write_image(more / f"extra{i:02d}.png", (20 * i, 255 - 20 * i, 100 + 5 * i), seed=40 + i)
    with Searcher(pg_url, str(model_dir)) as first:
        first.index([tmp_path / "media"], progress=False, cues=())
    with Searcher(pg_url, str(model_dir)) as a, Searcher(pg_url, str(model_dir)) as b, \
            ServerThread(create_app(a)) as sa, ServerThread(create_app(b)) as sb, \
            httpx.Client(base_url=sa.url, timeout=60) as ha, httpx.Client(base_url=sb.url, timeout=60) as hb:
        env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
        writer = subprocess.Popen([sys.executable, "-m", "reelsearch", "index", str(tmp_path / "media"), str(more),
                                   "--db", pg_url, "--model", str(model_dir), "--quiet", "--no-speech", "--no-ocr"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        compared = 0
        try:
            for query in QUERIES:  # B answers between two answers of A: it equals one of them (whole commits)
                before, other, after = _top10(ha, query), _top10(hb, query), _top10(ha, query)
                assert other in (before, after), query
                compared += 1
        finally:
            out, err = writer.communicate(timeout=600)
        assert writer.returncode == 0, err
        assert compared == 100
        # the indexer's commits are visible to both replicas at once, without a restart
        for query in QUERIES:
            got = _top10(ha, query)
            assert got == _top10(hb, query) and len(got) == 10, query
        assert ha.get("/health").json()["videos"] == hb.get("/health").json()["videos"] == 17


def test_media_roots_and_unreachable_files(pg_url, tmp_path, model_dir):
    paths = make_media(tmp_path / "media")
    with Searcher(pg_url, str(model_dir)) as indexer:
        indexer.index([tmp_path / "media"], progress=False, cues=())
    moved = tmp_path / "elsewhere" / "media"
    shutil.copytree(tmp_path / "media", moved)
    (moved / paths[0].name).unlink()  # one file this host cannot reach
    with Searcher(pg_url, str(model_dir), media_roots=[f"{tmp_path / 'media'}={moved}"]) as replica, \
            ServerThread(create_app(replica)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        results = http.get("/search", params={"q": CAPTIONS[0], "k": 10}).json()["results"]
        assert sorted(r["path"] for r in results) == sorted(str(moved / p.name) for p in paths)
        gone = [r for r in results if r["name"] == paths[0].name]
        assert len(gone) == 1 and "not reachable from this host" in gone[0]["unavailable"]
        assert all("unavailable" not in r for r in results if r["name"] != paths[0].name)
        res = http.get(f"/videos/{gone[0]['id']}/media")
        assert res.status_code == 404 and "not reachable from this host" in res.json()["detail"]
        thumb = http.get(f"/videos/{gone[0]['id']}/thumbnail")  # thumbnails come from the catalog
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
        ok = next(r for r in results if r["name"] != paths[0].name)
        assert http.get(f"/videos/{ok['id']}/media").status_code == 200
        # the mapping works both ways: the replica finds a file by its local path
        assert replica.catalog.find(moved / paths[1].name) is not None


def test_a_database_restart_mid_search_is_a_503_then_the_next_request_succeeds(pg_server, pg_url, tmp_path,
                                                                                 model_dir):
    make_media(tmp_path / "media")
    with Searcher(pg_url, str(model_dir)) as searcher, ServerThread(create_app(searcher)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        before = _top10(http, CAPTIONS[0])
        pg_server.stop()
        try:
            res = http.get("/search", params={"q": CAPTIONS[1], "k": 10})
            assert res.status_code == 503 and res.headers["retry-after"] == "1", res.text
            assert "the next request connects again" in res.json()["detail"] or "cannot connect" in res.json()["detail"]
        finally:
            pg_server.start()
        assert _top10(http, CAPTIONS[0]) == before  # the same server process, reconnected
