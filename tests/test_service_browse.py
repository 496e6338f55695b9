"""Browsing the catalog over HTTP and the CLI, on both catalogs: ``GET /videos`` (paged, by folder, by date or name),
the date each file was taken in ``GET /videos/{id}``, in every search hit and in ``reelsearch search``, results
sorted by date, and thumbnails at the size a page shows them (made from the file, cached)."""

from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from reelsearch.cli.main import app
from reelsearch.index.pg import PostgresCatalog
from reelsearch.search import Searcher
from reelsearch.service import create_app
from reelsearch.service.routes import videos as video_routes
from test_search_support import CAPTIONS, dated_library, small_model, taken

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=["embedded", "postgres"])
def library(request, tmp_path_factory):
    """(test client, searcher, paths) over FILES on the embedded catalog or PostgreSQL (a database of the session's
    server, dropped after the module): indexed once per catalog for the tests, which only read it (one moves a file
    and puts it back)."""
    root = tmp_path_factory.mktemp("browse")
    paths = dated_library(root / "media")
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    name = server.create_database() if server else None
    index = PostgresCatalog(server.url(name)) if server else root / "index"
    with Searcher(index, small_model("moe")) as searcher:
        searcher.index([root / "media"], progress=False, cues=())
        with TestClient(create_app(searcher), raise_server_exceptions=False) as client:
            yield client, searcher, paths
    if server:
        server.drop_database(name)


def test_the_catalog_a_page_at_a_time_by_folder_date_or_name(library):
    client, searcher, paths = library
    ids = {p: searcher.catalog.find(p) for p in paths}
    newest = sorted(paths, key=lambda p: -p.stat().st_mtime)
    body = client.get("/videos").json()
    assert body["total"] == len(paths) and body["sort"] == "date" and body["offset"] == 0
    assert [v["id"] for v in body["videos"]] == [ids[p] for p in newest]
    first = body["videos"][0]
    assert first["path"] == str(paths[4]) and first["name"] == "stage.png" and first["kind"] == "image"
    assert first["duration"] is None and first["taken_at"] == taken(2024, 1, 20) and first["taken_from"] == "file"
    assert first["thumbnail"] == f"/videos/{first['id']}/thumbnail" and first["media"] == f"/videos/{first['id']}/media"
    media = paths[0].parent.parent
    assert body["folders"] == [{"path": str(media / f), "videos": n} for f, n in
                               [("My Trips", 1), ("holiday", 2), ("work", 1), ("work/old", 1)]]

    by_name = client.get("/videos", params={"sort": "name"}).json()
    assert [v["name"] for v in by_name["videos"]] == sorted((p.name for p in paths), key=str.lower)
    page = client.get("/videos", params={"offset": 1, "limit": 2}).json()
    assert [v["id"] for v in page["videos"]] == [ids[p] for p in newest[1:3]] and page["total"] == len(paths)
    assert client.get("/videos", params={"offset": 99}).json()["videos"] == []

    # folder: a folder name anywhere on the path, or a path prefix (subfolders included), as `folder:` in a search
    holiday = client.get("/videos", params={"folder": "holiday"}).json()
    assert [v["id"] for v in holiday["videos"]] == [ids[paths[1]], ids[paths[0]]] and holiday["total"] == 2
    work = client.get("/videos", params={"folder": str(media / "work"), "sort": "name"}).json()
    assert [v["name"] for v in work["videos"]] == ["white-black.mp4", "yellow.mp4"]
    trips = client.get("/videos", params={"folder": str(media / "My Trips")}).json()
    assert [v["name"] for v in trips["videos"]] == ["stage.png"]
    searched = client.get("/search", params={"q": f'folder:"{media / "My Trips"}"'}).json()
    assert [r["id"] for r in searched["results"]] == [v["id"] for v in trips["videos"]]
    for bad in ({"limit": 0}, {"limit": 501}, {"offset": -1}, {"sort": "size"}, {"folder": " "}):
        assert client.get("/videos", params=bad).status_code == 422, bad


def test_dates_in_metadata_and_hits_and_results_sorted_by_date(library):
    client, searcher, paths = library
    vid = searcher.catalog.find(paths[0])
    meta = client.get(f"/videos/{vid}").json()
    assert meta["taken_at"] == taken(2023, 7, 14) and meta["taken_from"] == "file" and meta["kind"] == "video"
    assert meta["n_frames"] == len(meta["frames"]) and meta["duration"] == pytest.approx(3.0, abs=0.1)

    q = CAPTIONS[0]
    ranked = client.get("/search", params={"q": q, "k": 3}).json()["results"]
    when = {str(searcher.catalog.find(p)): p.stat().st_mtime for p in paths}
    assert all(r["taken_at"] == when[r["id"]] and r["taken_from"] == "file" for r in ranked)
    by_date = client.get("/search", params={"q": q, "k": 3, "sort": "date"}).json()["results"]
    assert sorted(r["id"] for r in by_date) == sorted(r["id"] for r in ranked)  # the same k, newest first
    assert [r["taken_at"] for r in by_date] == sorted((r["taken_at"] for r in ranked), reverse=True)
    assert client.get("/search", params={"q": q, "sort": "newest"}).status_code == 422
    upload = client.post("/search/like", files={"file": ("mine.mp4", paths[3].read_bytes(), "video/mp4")},
                         data={"k": "4", "sort": "date"})
    assert upload.status_code == 200, upload.text
    dates = [r["taken_at"] for r in upload.json()["results"]]
    assert len(dates) == 4 and dates == sorted(dates, reverse=True)
    bad = client.post("/search/like", files={"file": ("mine.mp4", paths[3].read_bytes(), "video/mp4")},
                      data={"sort": "size"})
    assert bad.status_code == 422


def test_thumbnails_at_the_size_shown(library, monkeypatch):
    client, searcher, paths = library
    monkeypatch.setattr(video_routes, "SHARP", video_routes.SharpThumbnails())
    clip, photo = searcher.catalog.find(paths[0]), searcher.catalog.find(paths[1])

    def image(resp) -> np.ndarray:
        assert resp.status_code == 200 and resp.headers["content-type"] == "image/jpeg", resp.text
        return cv2.cvtColor(cv2.imdecode(np.frombuffer(resp.content, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    stored = image(client.get(f"/videos/{clip}/thumbnail", params={"frame": 0}))
    assert stored.shape[:2] == (54, 96)
    for size, side in ((300, 320), (320, 320), (97, 160), (1280, 1280)):
        big = image(client.get(f"/videos/{clip}/thumbnail", params={"frame": 0, "size": size}))
        assert max(big.shape[:2]) == min(side, 640), size  # never larger than the file
        # the same frame: the red first second, as the stored one shows it
        assert np.abs(cv2.resize(big, (96, 54), interpolation=cv2.INTER_AREA).astype(int) - stored).mean() < 12
    middle = image(client.get(f"/videos/{clip}/thumbnail", params={"frame": 2, "size": 480}))
    assert middle[..., 2].mean() > 150 > middle[..., 0].mean()  # frame 2 (2 s): blue
    assert image(client.get(f"/videos/{photo}/thumbnail", params={"size": 480})).shape[:2] == (360, 480)
    assert image(client.get(f"/videos/{photo}/thumbnail", params={"size": 96})).shape[:2] == (72, 96)  # the stored
    assert len(video_routes.SHARP._cache) == 5  # one per frame and size served (300 and 320: 320)
    for bad in (0, 1281, "x"):
        assert client.get(f"/videos/{clip}/thumbnail", params={"size": bad}).status_code == 422
    # a file this host cannot read: the stored thumbnail, not an error
    gone = paths[2].with_name("moved.mp4")
    shutil.move(paths[2], gone)
    try:
        small = image(client.get(f"/videos/{searcher.catalog.find(paths[2])}/thumbnail", params={"size": 640}))
    finally:
        shutil.move(gone, paths[2])  # the module's library as it was
    assert max(small.shape[:2]) == 96


def test_the_cli_gives_the_dates_and_sorts_by_date(tmp_path):
    paths = dated_library(tmp_path / "media")
    model = small_model("cosine").save(tmp_path / "model")
    run = CliRunner().invoke
    res = run(app, ["index", str(tmp_path / "media"), "--index", str(tmp_path / "index"), "--model", str(model),
                    "--quiet", "--no-speech", "--no-ocr"])
    assert res.exit_code == 0, res.output
    common = ["--index", str(tmp_path / "index"), "--model", str(model), "--local", "-k", "5"]
    ranked = json.loads(run(app, ["search", CAPTIONS[0], *common, "--json"]).stdout)
    dated = json.loads(run(app, ["search", CAPTIONS[0], *common, "--json", "--sort", "date"]).stdout)
    when = {str(p): p.stat().st_mtime for p in paths}
    assert all(r["taken_at"] == when[r["path"]] and r["taken_from"] == "file" for r in ranked)
    assert sorted(r["id"] for r in dated) == sorted(r["id"] for r in ranked)
    assert [r["path"] for r in dated] == sorted(when, key=lambda p: -when[p])
    lines = run(app, ["search", CAPTIONS[0], *common, "--sort", "date"]).stdout.splitlines()
    assert "2024-01-20" in lines[0] and lines[0].endswith("stage.png")
    bad = run(app, ["search", CAPTIONS[0], *common, "--sort", "size"])
    assert bad.exit_code == 2
