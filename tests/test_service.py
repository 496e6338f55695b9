"""The HTTP service over a real index of generated media: API results, validation (4xx, never 500), 404s, range
requests byte for byte, traversal attempts, uploads, and concurrent requests against a real uvicorn server."""

from __future__ import annotations

import base64
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote

import cv2
import httpx
import numpy as np
import pytest
import torch
from fastapi import FastAPI, Query
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from starlette.datastructures import QueryParams

from reelsearch.search import Searcher
from reelsearch.search.results import FrameScore, Match, SearchResult
from reelsearch.service import create_app
from reelsearch.service.app import STATIC_DIR, _local_swagger_ui
from reelsearch.service.contract import SearchQuery, query_parameters, read_query
from reelsearch.service.http import EXCEPTION_HANDLERS, JSON, error_text
from test_search_support import CAPTIONS, ServerThread, make_media, small_model, write_clip

torch.set_num_threads(1)


#: A file name no JSON string can hold as it is: a byte that is not UTF-8, quotes, spaces and a newline.
WEIRD = b'we"ird \xff name\n\'q\'.mp4'


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("service")
    make_media(root / "media")
    write_clip(Path(os.fsdecode(os.fsencode(root / "media") + b"/" + WEIRD)), [((200, 120, 20), 1.0)], seed=9)
    paths = sorted((root / "media").iterdir())
    searcher = Searcher(root / "index", small_model("moe"))
    searcher.index([root / "media"], progress=False, cues=())
    app = create_app(searcher)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, searcher, paths
    searcher.close()


def _id(searcher, path) -> str:
    return searcher.catalog.find(path)


def test_health_docs_and_page(served):
    client, searcher, paths = served
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["videos"] == len(paths) and h["mode"] == "ann" and not h["stale"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger-ui" in docs.text
    if _local_swagger_ui():
        assert "cdn." not in docs.text and client.get("/docs-assets/swagger-ui-bundle.js").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/search", "/annotate", "/videos/{video_id}", "/videos/{video_id}/media", "/health"} <= set(spec["paths"])
    page = client.get("/")
    assert page.status_code == 200 and 'id="q"' in page.text and "/static/app.js" in page.text
    for name in ("app.js", "style.css"):
        assert client.get(f"/static/{name}").status_code == 200
    for f in STATIC_DIR.iterdir():  # everything is served locally: no CDN, no external URL
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", f.read_text()), f.name
        assert "url(http" not in f.read_text()


def test_search_results(served):
    client, searcher, paths = served
    resp = client.get("/search", params={"q": CAPTIONS[0], "k": 3})
    assert resp.status_code == 200
    body = resp.json()
    want = searcher.search(CAPTIONS[0], 3)
    assert [r["id"] for r in body["results"]] == [r.id for r in want]
    for got, exp in zip(body["results"], want):
        assert got["score"] == pytest.approx(exp.score) and got["moment"] == exp.moment
        assert set(got["experts"]) == {"object", "scene"} and len(got["frames"]) == len(exp.frames)
        assert client.get(got["thumbnail"]).status_code == 200
        assert client.get(got["media"], headers={"Range": "bytes=0-9"}).status_code == 206
    assert len(client.get("/search", params={"q": "a yellow flower", "k": 100}).json()["results"]) == len(paths)


@pytest.mark.parametrize("params", [
    {"q": ""}, {"q": "   "}, {"q": "x" * 1001}, {"q": "car", "k": 0}, {"q": "car", "k": 101},
    {"q": "car", "k": "ten"}, {"q": "car", "k": "1.5"}, {"q": "car", "k": -3},
])
def test_search_validation(served, params):
    resp = served[0].get("/search", params=params)
    assert resp.status_code == 422, resp.text


def test_search_filters_in_q_and_as_parameters(served):
    """The box's filters and the filter parameters restrict the ranking the way the Searcher does; the answer says
    how they were read; a malformed filter is 422 with its message."""
    client, searcher, paths = served
    images = {str(p) for p in paths if p.suffix in (".png", ".jpg")}
    for params in ({"q": f"{CAPTIONS[2]} kind:image"}, {"q": CAPTIONS[2], "kind": "image"}):
        body = client.get("/search", params={**params, "k": 10}).json()
        assert {r["path"] for r in body["results"]} == images and body["filters"] == {"kind": ["image"]}
        assert [r["id"] for r in body["results"]] == [r.id for r in searcher.search(f"{CAPTIONS[2]} kind:image")]
    body = client.get("/search", params={"folder": "media", "kind": "video", "duration": ">0"}).json()
    assert {r["id"] for r in body["results"]} == {_id(searcher, p) for p in paths if str(p) not in images}
    assert body["filtered"] == "folder media, kind video, duration >0" and body["query"] is None
    for params, problem in (({"q": "car after:2023-13"}, "after:2023-13: not a date"),
                            ({"q": "car", "duration": ">abc"}, "duration:>abc: not a duration"),
                            ({"q": "car colour:red"}, "unknown filter 'colour'"),
                            ({"q": "car", "after": "2999"}, "2999 is in the future")):
        resp = client.get("/search", params=params)
        assert resp.status_code == 422 and problem in resp.json()["detail"], resp.text


def test_search_like_an_indexed_video_or_an_upload(served):
    """`GET /search?like=ID[&t=S][&q=...]` and `POST /search/like` (an upload) answer the Searcher's results, the
    example's own file (by id, or by content for an upload) left out."""
    client, searcher, paths = served
    clip = next(p for p in paths if p.name == "red-green-blue.mp4")
    vid = _id(searcher, clip)
    for params, like in (({"like": vid}, vid), ({"like": vid, "t": 1.5}, f"{vid}@1.5"),
                         ({"like": vid, "q": CAPTIONS[0]}, vid)):
        resp = client.get("/search", params={**params, "k": 100})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        want = searcher.search(params.get("q"), 100, like=like)
        assert body["query"] == params.get("q") and body["like"] == f"video {like}"
        assert [r["id"] for r in body["results"]] == [r.id for r in want] and len(want) == len(paths) - 1
        assert [r["score"] for r in body["results"]] == pytest.approx([r.score for r in want])
        assert [r["moment"] for r in body["results"]] == [r.moment for r in want]
    upload = client.post("/search/like", files={"file": ("mine.mp4", clip.read_bytes(), "video/mp4")},
                         data={"k": "100", "t": "1.5"})
    assert upload.status_code == 200, upload.text
    got = upload.json()
    assert got["like"] == "mine.mp4@1.5" and got["query"] is None
    assert [r["id"] for r in got["results"]] == [r.id for r in searcher.search(None, 100, like=f"{vid}@1.5")]
    with_text = client.post("/search/like", files={"file": ("mine.mp4", clip.read_bytes(), "video/mp4")},
                            data={"q": CAPTIONS[0], "k": "3"}).json()
    want = searcher.search(CAPTIONS[0], 3, like=str(clip))
    assert [r["id"] for r in with_text["results"]] == [r.id for r in want]
    assert [r["score"] for r in with_text["results"]] == pytest.approx([r.score for r in want], abs=1e-4)


def test_search_like_reads_the_query_string_too(served):
    """`POST /search/like` takes its fields (q, k, t, sort) in the query string as `GET /search` does, or in the form;
    one given both ways with the same value is that value, with different values 422 naming it."""
    client, searcher, paths = served
    clip = next(p for p in paths if p.name == "red-green-blue.mp4")

    def like(params=None, data=None):
        return client.post("/search/like", params=params, data=data,
                           files={"file": ("mine.mp4", clip.read_bytes(), "video/mp4")})

    vid = _id(searcher, clip)
    want = [r.id for r in searcher.search(CAPTIONS[0], 2, like=f"{vid}@1.5", sort="date")]
    for params, data in (({"k": 2, "t": 1.5, "q": CAPTIONS[0], "sort": "date"}, None),
                         ({"k": 2, "t": 1.5}, {"q": CAPTIONS[0], "sort": "date"}),
                         ({"k": 2, "t": 1.5, "sort": "date"}, {"k": "2", "q": CAPTIONS[0], "t": "1.50"})):
        body = like(params, data).json()
        assert body["k"] == 2 and body["like"] == "mine.mp4@1.5" and body["query"] == CAPTIONS[0], (params, body)
        assert [r["id"] for r in body["results"]] == want, (params, data)
    for params, data, name in (({"k": 2}, {"k": "3"}, "k"), ({"t": 1}, {"t": "1.5"}, "t"),
                               ({"q": "a car"}, {"q": "a dog"}, "q"),
                               ({"sort": "date"}, {"sort": "relevance"}, "sort")):
        resp = like(params, data)
        assert resp.status_code == 422 and resp.json()["detail"].startswith(f"{name} given"), resp.text
    resp = like({"k": 0})
    assert resp.status_code == 422 and "query k" in resp.json()["detail"], resp.text


@pytest.mark.parametrize("params,status,detail", [
    ({"like": "424242"}, 404, "no video 424242"),
    ({"like": "1", "t": 99}, 400, "99 s is outside the video"),
    ({"like": "1", "t": -1}, 422, None),
    ({"like": "../1"}, 422, None),
    ({"t": 1}, 400, "t needs like"),
    ({"k": 3}, 400, "give q, like or both"),
])
def test_search_like_validation(served, params, status, detail):
    resp = served[0].get("/search", params=params)
    assert resp.status_code == status, resp.text
    assert detail is None or detail in resp.json()["detail"]


@pytest.mark.parametrize("kwargs,status,detail", [
    ({"files": {"file": ("broken.mp4", b"\0" * 64, "video/mp4")}}, 400, "broken.mp4: not a readable media file"),
    ({"files": {"file": ("notes.txt", b"hello", "text/plain")}}, 415, None),
    ({"data": {"k": "3"}}, 422, "needs a file field"),
    ({"files": {"file": ("a.mp4", b"\0", "video/mp4")}, "data": {"k": "0"}}, 422, None),
    ({"files": {"file": ("a.mp4", b"\0", "video/mp4")}, "data": {"q": "  "}}, 422, None),
    ({"files": {"file": ("a.mp4", b"\0", "video/mp4")}, "data": {"captions": "x"}}, 422, "captions"),
    ({"files": {"file": ("a.mp4", b"\0", "video/mp4")}, "data": {"k": ["3", "4"]}}, 422, "at most once"),
])
def test_search_like_upload_validation(served, kwargs, status, detail):
    resp = served[0].post("/search/like", **kwargs)
    assert resp.status_code == status, resp.text
    assert detail is None or detail in resp.json()["detail"]


def test_upload_problems_name_the_upload(served):
    """An upload the service cannot use is 400 naming the upload (never the temporary file it was saved to); a
    malformed filter in the text beside it is the query's problem: 422, as for GET /search."""
    client, _, paths = served
    broken = {"file": ("broken.mp4", b"\0" * 64, "video/mp4")}
    for url, data in (("/annotate", {"captions": "a car"}), ("/search/like", {})):
        resp = client.post(url, files=broken, data=data)
        assert resp.status_code == 400 and resp.json()["detail"].startswith("broken.mp4: not a readable media file"), \
            resp.text
        assert "reelsearch-upload" not in resp.text
    clip = next(p for p in paths if p.name == "red-green-blue.mp4")
    resp = client.post("/search/like", files={"file": ("mine.mp4", clip.read_bytes(), "video/mp4")},
                       data={"t": "99"})
    assert resp.status_code == 400 and resp.json()["detail"].startswith("mine.mp4: 99 s is outside the video"), \
        resp.text
    resp = client.post("/search/like", files={"file": ("mine.mp4", clip.read_bytes(), "video/mp4")},
                       data={"q": "car after:2023-13"})
    assert resp.status_code == 422 and resp.json()["detail"].startswith("after:2023-13: not a date"), resp.text


def test_video_metadata_and_thumbnails(served):
    client, searcher, paths = served
    vid = _id(searcher, paths[0])
    meta = client.get(f"/videos/{vid}").json()
    assert meta["path"] == str(paths[0]) and meta["n_frames"] == len(meta["frames"]) == 3
    assert [f["t"] for f in meta["frames"]] == pytest.approx([0, 1.0, 2.0], abs=0.06)  # the index's 1 frame a second
    for frame in (None, 0, 2):  # the first and the last frame
        resp = client.get(f"/videos/{vid}/thumbnail", params={} if frame is None else {"frame": frame})
        assert resp.status_code == 200 and resp.headers["content-type"] == "image/jpeg"
        img = cv2.imdecode(np.frombuffer(resp.content, np.uint8), cv2.IMREAD_COLOR)
        assert max(img.shape[:2]) == 96  # long side 96, from a 96x64 clip
    assert client.get(f"/videos/{vid}/thumbnail", params={"frame": 3}).status_code == 404  # one past the last
    assert client.get(f"/videos/{vid}/thumbnail", params={"frame": -1}).status_code == 422
    assert client.get(f"/videos/{vid}/thumbnail", params={"frame": "x"}).status_code == 422


@pytest.mark.parametrize("bad", ["999999", "0", "abc", "-1", "1.0", "1e3", "%20", "1%00", "9" * 40])
def test_unknown_ids_are_404(served, bad):
    client = served[0]
    for suffix in ("", "/thumbnail", "/media"):
        assert client.get(f"/videos/{bad}{suffix}").status_code == 404


@pytest.mark.parametrize("attempt", [
    "/videos/..%2F..%2F..%2Fetc%2Fpasswd/media", "/videos/%2e%2e%2f%2e%2e%2fetc%2fpasswd/media",
    "/videos/1%2F..%2F..%2Fetc%2Fpasswd/media", "/videos/%2Fetc%2Fpasswd/media", "/videos/..%5C..%5Cwin.ini/media",
    "/videos/1/media/../../../../etc/passwd", "/static/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "/static/%2e%2e/%2e%2e/app.py", "/videos/1/media?path=/etc/passwd",
])
def test_traversal_attempts_are_refused(served, attempt):
    client, searcher, paths = served
    resp = client.get(attempt)
    if attempt.endswith("path=/etc/passwd"):  # extra parameters are ignored: still video 1's own file
        assert resp.content == open(searcher.catalog.video("1").path, "rb").read()
        return
    assert resp.status_code in (400, 404), (attempt, resp.status_code)
    assert b"root:" not in resp.content and b"create_app" not in resp.content


def _byteranges(resp) -> list[tuple[str, bytes]]:
    """(Content-Range, body) of each part of a multipart/byteranges response (parsed by the email package)."""
    import email

    msg = email.message_from_bytes(b"Content-Type: " + resp.headers["content-type"].encode() + b"\r\n\r\n"
                                   + resp.content)
    return [(part["Content-Range"], part.get_payload(decode=True)) for part in msg.get_payload()]


def test_range_requests_exact_bytes(served):
    """starlette's FileResponse serves the media (issue 11): RFC 9110 ranges, byte for byte."""
    client, searcher, paths = served
    vid = _id(searcher, paths[0])
    data = paths[0].read_bytes()
    size = len(data)
    url = f"/videos/{vid}/media"
    full = client.get(url)
    assert full.status_code == 200 and full.content == data and full.headers["accept-ranges"] == "bytes"
    assert full.headers["content-type"] == "video/mp4" and full.headers["content-length"] == str(size)
    assert full.headers["content-disposition"] == f'inline; filename="{paths[0].name}"'
    cases = {"bytes=10-99": (10, 99), "bytes=100-": (100, size - 1), "bytes=-50": (size - 50, size - 1),
             f"bytes=0-{size + 1000}": (0, size - 1), "bytes=7-7": (7, 7), f"bytes=-{size * 2}": (0, size - 1),
             "bytes=3-5, 4-9": (3, 9)}  # overlapping ranges are merged into one
    for header, (a, b) in cases.items():
        resp = client.get(url, headers={"Range": header})
        assert resp.status_code == 206, header
        assert resp.content == data[a:b + 1], header
        assert resp.headers["content-range"] == f"bytes {a}-{b}/{size}"
        assert int(resp.headers["content-length"]) == b - a + 1
    multi = client.get(url, headers={"Range": "bytes=3-5, 20-30, -4"})
    assert multi.status_code == 206 and multi.headers["content-type"].startswith("multipart/byteranges")
    assert int(multi.headers["content-length"]) == len(multi.content)
    assert _byteranges(multi) == [(f"bytes 3-5/{size}", data[3:6]), (f"bytes 20-30/{size}", data[20:31]),
                                  (f"bytes {size - 4}-{size - 1}/{size}", data[-4:])]
    for header in (f"bytes={size}-", "bytes=-0", f"bytes={size + 5}-{size + 9}"):
        resp = client.get(url, headers={"Range": header})
        assert resp.status_code == 416, header
        assert resp.headers["content-range"] == f"bytes */{size}"
    for header in ("bytes=50-10", "bytes=abc", "bytes=", "bytes=-", "bytes"):  # malformed byte ranges
        assert client.get(url, headers={"Range": header}).status_code == 400, header
    for header in ("items=0-10", "Items=abc"):  # another unit: ignored (RFC 9110 14.2), the whole file
        resp = client.get(url, headers={"Range": header})
        assert resp.status_code == 200 and resp.content == data, header
    head = client.head(url, headers={"Range": "bytes=0-99"})
    assert head.status_code == 206 and head.headers["content-length"] == "100" and head.content == b""
    # If-Range: the range only while the validator still matches, else the whole (changed) file
    etag, modified = full.headers["etag"], full.headers["last-modified"]
    for validator in (etag, modified):
        resp = client.get(url, headers={"Range": "bytes=0-9", "If-Range": validator})
        assert resp.status_code == 206 and resp.content == data[:10]
    for validator in ('"stale-etag"', "Mon, 01 Jan 2001 00:00:00 GMT", "W/" + etag):
        resp = client.get(url, headers={"Range": "bytes=0-9", "If-Range": validator})
        assert resp.status_code == 200 and resp.content == data


def test_media_of_a_vanished_file_is_404(served, tmp_path):
    client, searcher, paths = served
    gone = tmp_path / "gone.mp4"
    gone.write_bytes(paths[0].read_bytes() + b"\0")  # different content: embedded, not reused
    with searcher.lock:
        searcher.catalog.sync([gone], searcher.embedder, model_id=searcher.model_id, progress=False)
    vid = _id(searcher, gone)
    gone.unlink()
    assert client.get(f"/videos/{vid}").status_code == 200  # still in the index until the next sync
    assert client.get(f"/videos/{vid}/media").status_code == 404
    with searcher.lock:
        searcher.catalog.sync([tmp_path], searcher.embedder, model_id=searcher.model_id, progress=False)
    assert client.get(f"/videos/{vid}").status_code == 404


def test_annotate_by_id_path_and_upload(served):
    client, searcher, paths = served
    clip = paths[0]
    want = searcher.annotate(clip, CAPTIONS)
    vid = _id(searcher, clip)
    by_id = client.post("/annotate", json={"id": vid, "captions": CAPTIONS})
    assert by_id.status_code == 200
    assert [r["caption"] for r in by_id.json()["captions"]] == [r["caption"] for r in want]
    assert [r["score"] for r in by_id.json()["captions"]] == pytest.approx([r["score"] for r in want], abs=1e-6)
    by_path = client.post("/annotate", json={"path": str(clip), "captions": CAPTIONS})
    assert by_path.json()["captions"] == by_id.json()["captions"]
    upload = client.post("/annotate", files={"file": ("clip.mp4", clip.read_bytes(), "video/mp4")},
                         data={"captions": "\n".join(CAPTIONS)})
    assert upload.status_code == 200
    got = upload.json()["captions"]
    assert [r["caption"] for r in got] == [r["caption"] for r in want]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want], abs=1e-4)


@pytest.mark.parametrize("kwargs,status", [
    ({"json": {"id": "1"}}, 422),
    ({"json": {"id": "1", "captions": "a car"}}, 422),
    ({"json": {"id": "1", "captions": [1, 2]}}, 422),
    ({"json": {"id": "1", "captions": ["", " "]}}, 422),
    ({"json": {"id": "1", "captions": ["x" * 1001]}}, 422),
    ({"json": {"id": "1", "captions": ["a"] * 1001}}, 422),
    ({"json": {"captions": ["a car"]}}, 422),
    ({"json": ["a car"]}, 422),
    ({"json": {"id": "424242", "captions": ["a car"]}}, 404),
    ({"json": {"id": "../1", "captions": ["a car"]}}, 422),  # not an id (the schema's pattern)
    ({"json": {"path": "/etc/passwd", "captions": ["a car"]}}, 404),
    ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 422),
    ({"content": b"a car", "headers": {"content-type": "text/plain"}}, 415),
    ({"files": {"file": ("notes.txt", b"hello", "text/plain")}, "data": {"captions": "a car"}}, 415),
    ({"files": {"file": ("broken.mp4", b"\0" * 64, "video/mp4")}, "data": {"captions": "a car"}}, 400),
    ({"files": {"file": ("clip.mp4", b"\0" * 64, "video/mp4")}}, 422),
    ({"data": {"captions": "a car"}}, 415),
])
def test_annotate_validation(served, kwargs, status):
    resp = served[0].post("/annotate", **kwargs)
    assert resp.status_code == status, resp.text


def test_concurrent_requests_on_a_real_server(served):
    _, searcher, paths = served
    app = create_app(searcher)
    vid = _id(searcher, paths[0])
    data = paths[0].read_bytes()
    expected = {q: [r.id for r in searcher.search(q, 5)] for q in CAPTIONS}

    def one(i: int):
        with httpx.Client(base_url=server.url, timeout=60) as http:
            q = CAPTIONS[i % len(CAPTIONS)]
            res = http.get("/search", params={"q": q, "k": 5})
            assert res.status_code == 200 and [r["id"] for r in res.json()["results"]] == expected[q]
            part = http.get(f"/videos/{vid}/media", headers={"Range": f"bytes={i}-{i + 99}"})
            assert part.status_code == 206 and part.content == data[i:i + 100]
            assert http.get(f"/videos/{vid}/thumbnail").status_code == 200
            ann = http.post("/annotate", json={"id": vid, "captions": CAPTIONS[:3]})
            assert ann.status_code == 200 and len(ann.json()["captions"]) == 3
            return True

    with ServerThread(app) as server, ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(24)))


def test_any_file_name_round_trips_over_http(served):
    """A real file whose name is not UTF-8 (and has quotes, spaces, a newline): search, metadata, media, annotate."""
    _, searcher, paths = served
    weird = next(p for p in paths if os.fsencode(p.name) == WEIRD)
    raw = os.fsencode(weird)
    display = raw.decode("utf-8", "replace")
    assert "\ufffd" in display and "\n" in display and '"' in display
    vid = searcher.catalog.find(weird)
    with ServerThread(create_app(searcher)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        for q in CAPTIONS[:3]:  # k = 10 > the library: every query returns the file
            resp = http.get("/search", params={"q": q, "k": 10})
            assert resp.status_code == 200
            results = json.loads(resp.content.decode("utf-8"))["results"]  # strict UTF-8 JSON
            (hit,) = [r for r in results if base64.b64decode(r["path_b64"], validate=True) == raw]
            assert hit["id"] == vid and hit["path"] == display and hit["name"] == WEIRD.decode("utf-8", "replace")
        # filters read its stored (bytes) path: the folder it lies in and its kind pass it, another folder does not
        for box, kept in ((f"{CAPTIONS[0]} kind:video folder:{weird.parent.name}", True),
                          (f"{CAPTIONS[0]} folder:elsewhere", False)):
            body = http.get("/search", params={"q": box, "k": 10}).json()
            assert body["filtered"] and (vid in [r["id"] for r in body["results"]]) == kept, body
        meta = http.get(f"/videos/{vid}").json()
        assert (meta["path"], meta["name"], meta["path_b64"]) == (hit["path"], hit["name"], hit["path_b64"])
        media = http.get(hit["media"])
        assert media.status_code == 200 and media.content == weird.read_bytes()
        disposition = media.headers["content-disposition"]  # an ASCII header naming the display form
        assert disposition.isascii() and unquote(disposition.split("''", 1)[1]) == hit["name"]
        assert http.get(hit["thumbnail"]).status_code == 200
        sharp = http.get(hit["thumbnail"], params={"size": 200})  # made from the file, read by its stored bytes
        assert sharp.status_code == 200 and sharp.headers["content-type"] == "image/jpeg"
        listing = json.loads(http.get("/videos", params={"limit": 500}).content.decode("utf-8"))  # strict UTF-8
        (row,) = [v for v in listing["videos"] if v["id"] == vid]
        assert (row["path"], row["name"], row["path_b64"]) == (hit["path"], hit["name"], hit["path_b64"])
        by_folder = http.get("/videos", params={"folder": weird.parent.name}).json()["videos"]
        assert vid in [v["id"] for v in by_folder]
        by_id = http.post("/annotate", json={"id": vid, "captions": CAPTIONS})
        by_bytes = http.post("/annotate", json={"path_b64": hit["path_b64"], "captions": CAPTIONS})
        assert by_id.status_code == by_bytes.status_code == 200 and by_bytes.json() == by_id.json()
        # the display form is for people: it names no file (the lost byte), so the lossless form exists
        assert http.post("/annotate", json={"path": hit["path"], "captions": CAPTIONS}).status_code == 404
        for form in ({"path": str(paths[0])}, {"path_b64": base64.b64encode(os.fsencode(paths[0])).decode()}):
            assert http.post("/annotate", json={**form, "captions": CAPTIONS}).json() == \
                http.post("/annotate", json={"id": _id(searcher, paths[0]), "captions": CAPTIONS}).json()


def test_request_size_limits(served):
    client, searcher, paths = served
    app = create_app(searcher, max_body_bytes=4096)
    small = TestClient(app)
    vid = _id(searcher, paths[0])
    assert small.post("/annotate", json={"id": vid, "captions": ["a car"] * 10}).status_code == 200
    resp = small.post("/annotate", json={"id": vid, "captions": ["a car " * 20] * 100})  # > 4096 bytes
    assert resp.status_code == 413 and "larger than 4096 bytes" in resp.json()["detail"]

    def chunks():  # no Content-Length: counted as it streams
        for _ in range(10):
            yield b" " * 1000

    with ServerThread(app) as server:
        resp = httpx.post(server.url + "/annotate", content=chunks(), headers={"content-type": "application/json"})
        assert resp.status_code == 413
        big = httpx.post(server.url + "/search/like", files={"file": ("big.mp4", b"\0" * 8192, "video/mp4")})
        assert big.status_code == 413
    spec = client.get("/openapi.json").json()
    params = {p["name"]: p["schema"] for p in spec["paths"]["/search"]["get"]["parameters"]}
    assert params["k"]["maximum"] == 100 and params["k"]["minimum"] == 1
    assert params["q"]["anyOf"][0]["maxLength"] == 1000  # optional: with like=ID, q may be left out
    body = spec["paths"]["/annotate"]["post"]["requestBody"]["content"]
    assert body["application/json"]["schema"]["properties"]["captions"]["maxItems"] == 1000
    assert "413" in spec["paths"]["/annotate"]["post"]["responses"]
    assert {"200", "206", "400", "404", "416"} <= set(spec["paths"]["/videos/{video_id}/media"]["get"]["responses"])


def test_json_responses_read_back_as_what_was_rendered():
    """The service's JSON (orjson, the standard library where orjson refuses) parsed by the standard library gives
    back the content exactly (floats to the bit); a lone surrogate becomes U+FFFD, a key that is not a string is
    written as one, NaN as null."""
    hit = SearchResult("7", "/v/caf\u00e9 \u72d7.mp4", -0.25, 1.5, 1, 3.0,
                       [FrameScore(0, 0.0, 0.1), FrameScore(1, 1.5, 1 / 3)], {"lite0": 0.2, "speech": 0.4},
                       Match("speech", 1.0, 2.0, "ein Hund l\u00e4uft", 0.5, "keyword", 1.2, [(4, 8)]), 0.8, None)
    body = {"query": "ein Hund, \u72d7", "k": 10, "no_good_match": False, "results": [hit.to_json()],
            "extremes": [5e-324, -2.5e-7, 1.7976931348623157e308, 2**53 + 1, 0.1 + 0.2]}
    rendered = JSON(body).body
    assert json.loads(rendered) == body and b'": ' not in rendered and b', "' not in rendered  # compact
    assert rendered.decode("utf-8").count("\u72d7") == 3 and b"\\u" not in rendered  # UTF-8, not \\u escapes
    assert json.loads(JSON({"path": "caf\udce9.mp4"}).body) == {"path": "caf\ufffd.mp4"}
    assert json.loads(JSON({1: "one"}).body) == {"1": "one"}
    assert json.loads(JSON({"score": float("nan")}).body) == {"score": None}


QUERIES = ["q=a+dog", "q=a+dog&k=5&moments=0&sort=date", "k=3&k=7", "k=", "k=1.5", "k=101&moments=abc&sort=x",
           "q=&t=nan", "t=inf&like=5", "t=-1", "q=%E3%80%80", "folder=a&folder=&folder=b", "has=speech&has=text",
           "experts=visual,ocr&like=12", "experts=bad&like=1234567890123456789", "other=1&q=x", "duration=",
           "kind=" + "v" * 201, "after=2020&after=2021&before=1999", "k=%D9%A3", "k=true", "q=x&q=" + "y" * 1001]
#: FastAPI reading GET /search's parameters itself, as a model of query parameters
ORACLE = FastAPI(exception_handlers=EXCEPTION_HANDLERS)


@ORACLE.get("/search")
def _oracle_search(params: Annotated[SearchQuery, Query()]):
    return params.model_dump()


@pytest.mark.parametrize("query", QUERIES)
def test_search_parameters_are_read_as_fastapi_reads_them(query):
    """GET /search reads its query string itself (``contract.read_query``: one validation, about 0.2 ms less a
    request) and declares it by ``contract.query_parameters``: the same values, or the same 422, as FastAPI's own
    reading of the model, and the same OpenAPI parameters."""
    expected = TestClient(ORACLE).get(f"/search?{query}")
    try:
        got = read_query(SearchQuery, QueryParams(query)).model_dump()
    except RequestValidationError as exc:
        assert expected.status_code == 422 and error_text(exc.errors()) == expected.json()["detail"]
    else:
        assert expected.status_code == 200 and json.loads(json.dumps(got)) == expected.json()
    assert query_parameters(SearchQuery) == ORACLE.openapi()["paths"]["/search"]["get"]["parameters"]
