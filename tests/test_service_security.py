"""Safe exposure: the API key (every API route, three ways to send it, constant-time check), the page staying public,
the refusal to serve a non-loopback address without a key, the access log, and `serve --workers` over HTTP."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from in_process import cli_here
from reelsearch.errors import ConfigError
from reelsearch.search import Searcher
from reelsearch.service import create_app
from reelsearch.service.auth import check_api_key
from reelsearch.service.server import build_app, exposure_check, is_loopback
from test_search_support import CAPTIONS, free_port, make_media, small_model

torch.set_num_threads(1)
KEY = "test-key_0123456789-abcdef"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("security")
    paths = sorted(make_media(root / "media"))
    model_dir = small_model("cosine").save(root / "model")
    with Searcher(root / "index", str(model_dir)) as searcher:
        searcher.index([root / "media"], progress=False, cues=())
        vid = searcher.catalog.find(paths[0])
        yield root, searcher, model_dir, vid


def _api_calls(vid: str):
    return [("GET", "/health", {}), ("GET", "/search", {"params": {"q": "a car"}}), ("GET", f"/videos/{vid}", {}),
            ("GET", f"/videos/{vid}/thumbnail", {}), ("GET", f"/videos/{vid}/media", {}),
            ("HEAD", f"/videos/{vid}/media", {}), ("POST", "/annotate", {"json": {"id": vid, "captions": CAPTIONS}})]


def test_api_key_guards_every_api_route(library):
    _, searcher, _, vid = library
    client = TestClient(create_app(searcher, api_key=KEY))
    for method, url, kw in _api_calls(vid):
        denied = [client.request(method, url, **kw),
                  client.request(method, url, headers={"X-API-Key": KEY[:-1]}, **kw),  # a prefix of the key
                  client.request(method, url, headers={"X-API-Key": KEY + "x"}, **kw),
                  client.request(method, url, headers={"Authorization": f"Basic {KEY}"}, **kw)]
        for resp in denied:
            assert resp.status_code == 401, (method, url, resp.status_code)
            assert resp.headers["www-authenticate"] == "Bearer"
        for headers in ({"X-API-Key": KEY}, {"Authorization": f"Bearer {KEY}"}):
            assert client.request(method, url, headers=headers, **kw).status_code == 200, (method, url, headers)
        client.cookies.set("reelsearch_key", KEY)  # the page's cookie: for media elements, so GET and HEAD only
        assert client.request(method, url, **kw).status_code == (401 if method == "POST" else 200), (method, url)
        client.cookies.clear()
    for public in ("/", "/static/app.js", "/static/style.css", "/openapi.json", "/docs"):
        assert client.get(public).status_code == 200, public
    spec = client.get("/openapi.json").json()
    assert set(spec["components"]["securitySchemes"]) == {"apiKey", "bearer", "cookie"}
    assert "401" in spec["paths"]["/search"]["get"]["responses"]
    open_spec = TestClient(create_app(searcher)).get("/openapi.json").json()  # no key: no 401, no schemes
    assert "securitySchemes" not in open_spec.get("components", {})
    assert "401" not in open_spec["paths"]["/search"]["get"]["responses"]


def test_key_rules():
    import secrets

    assert check_api_key(secrets.token_urlsafe(24))
    for bad in ("short", "with a space inside it", "ünïcode-key-0123456789", "semi;colon-0123456789"):
        with pytest.raises(ConfigError, match="API key"):
            check_api_key(bad)


def test_exposure_rules():
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host) and exposure_check(host, None, False) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.20", "10.0.0.1"):
        assert not is_loopback(host)
        with pytest.raises(ConfigError, match="--api-key KEY or REELSEARCH_API_KEY=KEY.*--insecure-no-auth"):
            exposure_check(host, None, False)
        assert exposure_check(host, KEY, False) is None
        assert "WITHOUT authentication" in exposure_check(host, None, True)
    with pytest.raises(ConfigError):
        exposure_check("127.0.0.1", "short", False)  # a bad key is refused on loopback too


def test_access_log_one_line_per_request(library, caplog):
    _, searcher, _, vid = library
    client = TestClient(create_app(searcher, api_key=KEY, access_log=True))
    with caplog.at_level(logging.INFO, logger="reelsearch.access"):
        client.get("/search", params={"q": "a secret query", "k": 3}, headers={"X-API-Key": KEY})
        client.get("/search", params={"q": "a car"})
        client.get("/videos/424242", headers={"X-API-Key": KEY})
        client.head(f"/videos/{vid}/media", headers={"X-API-Key": KEY, "Range": "bytes=0-9"})
        client.get("/nowhere%0A/x")  # a newline in the (decoded) path
    lines = [r.getMessage() for r in caplog.records if r.name == "reelsearch.access"]
    pattern = r'testclient "(GET|HEAD) (\S+)" (\d{3}) \d+\.\d ms'
    assert [re.fullmatch(pattern, line).group(1, 2, 3) for line in lines] == [
        ("GET", "/search", "200"), ("GET", "/search", "401"), ("GET", "/videos/424242", "404"),
        ("HEAD", f"/videos/{vid}/media", "206"), ("GET", "/nowhere\\n/x", "404")]  # one line, even for a newline
    assert not any("secret" in line for line in lines)  # the query string (users' words) is not logged
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="reelsearch.access"):
        quiet = build_app({"index": str(library[0] / "index"), "model": str(library[2]), "access_log": False}, None)
        TestClient(quiet).get("/health")
    assert not [r for r in caplog.records if r.name == "reelsearch.access"]


def _env():
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_serve_refuses_a_public_address_without_a_key(library, monkeypatch):
    root, *_ = library
    monkeypatch.delenv("REELSEARCH_API_KEY", raising=False)
    proc = cli_here("serve", "--index", root / "index", "--host", "0.0.0.0", "--port", free_port())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: --host 0.0.0.0 makes every indexed file readable from the network")


def test_serve_with_workers_key_and_access_log(library):
    root, searcher, model_dir, vid = library
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**_env(), "REELSEARCH_API_KEY": KEY}  # the key from the environment
    proc = subprocess.Popen([sys.executable, "-m", "reelsearch", "serve", "--index", str(root / "index"), "--model",
                             str(model_dir), "--port", str(port), "--workers", "2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", headers={"X-API-Key": KEY}, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.3)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) >= 2  # uvicorn's two worker processes
        assert httpx.get(f"{url}/search", params={"q": "a car"}, timeout=30).status_code == 401
        want = [r.id for r in searcher.search(CAPTIONS[0], 3)]
        with httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=60) as http:
            for _ in range(12):  # new connections: the kernel spreads them over both workers
                res = httpx.get(f"{url}/search", params={"q": CAPTIONS[0], "k": 3}, headers={"X-API-Key": KEY},
                                timeout=60)
                assert res.status_code == 200 and [r["id"] for r in res.json()["results"]] == want
            assert http.get(f"/videos/{vid}/media", headers={"Range": "bytes=0-9"}).status_code == 206
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    access = [line for line in err.splitlines() if '"GET /search"' in line]
    assert len(access) >= 13 and all(re.search(r'"GET /search" (200|401) \d+\.\d ms$', line) for line in access)
    assert "/media\" 206" in err
