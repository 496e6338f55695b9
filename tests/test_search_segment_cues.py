"""Cues per segment (issue 32): in a generated 48-s slideshow of four Flickr8k dev photos a phrase is said only while
the second photo is shown (espeak-ng, transcribed by Whisper) and a line of text is written only over the fourth (read
by PP-OCR); searching for either finds the slideshow with its top moment in that photo's time, the moments ordered by
the fused segment score and their confidence raised by the words, on both catalogs. A clip of one segment beside it
scores as it did per video, and a library of one-segment videos ranks and scores as before. The phrase said, searched
word for word, is a confident match in Python, the CLI, the HTTP API and the page (issue 33)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from browser import chromium_page
from conftest import shared_path
from cue_fixtures import need_module
from reelsearch.cli.main import app
from reelsearch.datasets.cue_clips import CueClip, OnScreenText, Utterance, espeak_available, make_clip
from reelsearch.display import NO_GOOD_MATCH_MESSAGE
from reelsearch.index import EmbeddedCatalog
from reelsearch.index.pg import PostgresCatalog
from reelsearch.search import Searcher
from reelsearch.search import fusion as fusion_module
from reelsearch.service import create_app
from test_search_support import ServerThread

torch.set_num_threads(1)

FLICKR = shared_path("flickr8k")
PHOTOS = 4
SHOT = 12.0  # seconds each photo is shown
# over the photo the picture alone ranks last for each query (the words, not the picture, must make the moment)
SAID = Utterance("First, preheat the oven to two hundred degrees.", SHOT + 2.0)  # over the second photo
SHOWN = OnScreenText(("Quarterly revenue",), 3 * SHOT + 1.0, 4 * SHOT - 2.0, "bottom")  # over the fourth
#: query -> (the time its words are said or shown, the time of the photo they are said or shown over)
QUERIES = {"preheat the oven": ((SAID.start, SAID.start + 3.0), (SHOT, 2 * SHOT)),
           "quarterly revenue": ((SHOWN.start, SHOWN.end), (3 * SHOT, 4 * SHOT))}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """A folder with the slideshow ("talk.mp4", 640x360, no zoom: cut into its photos) and a 4-s clip of one photo
    with a phrase of its own ("short.mp4", one segment); and a folder with two of the photos as images."""
    for module, extra in (("av", "media"), ("cv2", "media"), ("faster_whisper", "speech"),
                          ("rapidocr_onnxruntime", "ocr"), ("sentence_transformers", "text")):
        need_module(module, extra)
    if not espeak_available():
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng): no speech for the generated clips")
    photos = (FLICKR / "dev.txt").read_text().split()[:PHOTOS]
    stems = tuple(p[:-4] for p in photos)
    folder = tmp_path_factory.mktemp("segment-cues")
    make_clip(CueClip("talk", stems, (SAID,), (SHOWN,), duration=PHOTOS * SHOT, zoom=0.0), folder, FLICKR / "images")
    make_clip(CueClip("short", stems[:1], (Utterance("Good morning, everyone.", 0.5),), duration=4.0), folder,
              FLICKR / "images")
    stills = tmp_path_factory.mktemp("stills")
    for p in photos[1:3]:
        shutil.copy(FLICKR / "images" / p, stills / p)
    return folder, stills


def index_talk(where, folder):
    """The index report of the slideshow's folder indexed at ``where`` with both cues."""
    with Searcher(where, "default") as searcher:
        return searcher.index([folder], progress=False, cues=("speech", "ocr"))


@pytest.fixture(scope="module")
def talk_index(clips, tmp_path_factory):
    """(an embedded index of the slideshow's folder, its report): made once, only searched after."""
    index = tmp_path_factory.mktemp("talk") / "index"
    return index, index_talk(index, clips[0])


@pytest.fixture(params=["embedded", "postgres"])
def indexed(request, talk_index):
    """(catalog, report) of the slideshow's folder: the module's embedded index, or that index copied into a PostgreSQL
    catalog (``copy_from``, as `index --from` copies: its vectors, segments and text cues, nothing extracted or
    embedded again; PostgreSQL's own indexing of a slideshow's segments and of spoken words is test_duplicates.py's
    and test_index_bad_input.py's), searched there."""
    if request.param == "embedded":
        return talk_index
    where = request.getfixturevalue("pg_url")
    with EmbeddedCatalog(talk_index[0]) as source, PostgresCatalog(where) as catalog:
        report = catalog.copy_from(source, progress=False)
    assert len(report.added) == len(talk_index[1].added)
    return where, talk_index[1]


def test_words_said_or_shown_make_their_segment_the_top_moment(clips, indexed, monkeypatch):
    folder, _ = clips
    where, report = indexed
    with Searcher(where, "default") as searcher:
        assert len(report.added) == 2 and not report.failed and not report.cues.failed
        talk, short = searcher.catalog.find(folder / "talk.mp4"), searcher.catalog.find(folder / "short.mp4")
        segs = searcher.catalog.segments([talk, short])
        assert len(segs[talk]) >= PHOTOS and len(segs[short]) == 1
        fused = {}
        for query, ((said, until), (start, end)) in QUERIES.items():
            results = searcher.search(query, k=2, frames=False, moments=len(segs[talk]))
            assert results[0].id == talk, query
            hit = results[0]
            fused[query] = {r.id: r.score for r in results}
            top = hit.moments[0]
            # the top moment holds the words, inside the photo they are said or shown over
            assert top.start < until and top.end > said and start - 1.0 <= top.start and top.end <= end + 1.0, query
            assert hit.match is not None and top.start - 0.5 <= hit.match.moment <= top.end + 0.5
            assert hit.score == pytest.approx(top.score, abs=1e-6)  # the video scores its best fused segment
            scores = [m.score for m in hit.moments]
            assert scores == sorted(scores, reverse=True) and len(scores) == len(segs[talk])
            assert hit.confidence == pytest.approx(top.confidence, abs=1e-9)
            # the picture alone puts another photo first; the words raise their segment's score and confidence
            picture = next(r for r in searcher.search(query, k=2, frames=False, moments=len(segs[talk]),
                                                      experts=["visual"]) if r.id == talk)
            assert not (picture.moments[0].start < until and picture.moments[0].end > said), query
            same = next(m for m in picture.moments if m.start == top.start)
            assert top.score > same.score and top.confidence > same.confidence
        # per video (the fusion before segments): the one-segment clip scores the same, the slideshow no lower
        monkeypatch.setattr(fusion_module, "per_segment", lambda catalog, model: None)
        for query in QUERIES:
            before = {r.id: r.score for r in searcher.search(query, k=2, frames=False)}
            if short in fused[query]:
                assert before[short] == pytest.approx(fused[query][short], abs=1e-9)
            assert before[talk] >= fused[query][talk] - 1e-9


def test_a_library_of_one_segment_videos_ranks_as_before(clips, tmp_path, monkeypatch):
    """Photos and a one-shot clip, no video of several segments: forcing the fusion per segment (the segments'
    source, every candidate's segments read) gives the same ranking and scores as the search per video."""
    folder, stills = clips
    with Searcher(tmp_path / "index", "default") as searcher:
        searcher.index([folder / "short.mp4", stills], progress=False, cues=("speech", "ocr"))
        assert not searcher.catalog.several_segments()
        queries = ["good morning everyone", "preheat the oven", "a dog runs on the grass"]
        before = [searcher.search(q, k=3, frames=False) for q in queries]
        monkeypatch.setattr(EmbeddedCatalog, "several_segments", lambda self: True)
        after = [searcher.search(q, k=3, frames=False) for q in queries]
    for b, a in zip(before, after, strict=True):
        assert [r.id for r in a] == [r.id for r in b]
        assert np.allclose([r.score for r in a], [r.score for r in b], atol=1e-6)
    assert before[0][0].match is not None and before[0][0].match.cue == "speech"  # the cues took part


def test_an_exact_spoken_phrase_is_a_confident_match_everywhere(clips, talk_index, tmp_path):
    """The words said make the confidence (picture and cues, issue 33): the phrase said in the slideshow, searched
    word for word, is no "no good match" and is confident, in Python, the CLI, the HTTP API and the page."""
    folder, _ = clips
    index = talk_index[0]
    phrase = "preheat the oven to two hundred degrees"
    with Searcher(index, "default") as searcher:
        results = searcher.search(phrase, k=2, frames=False)
        talk = searcher.catalog.find(folder / "talk.mp4")
        assert results[0].id == talk and results[0].match is not None and results[0].match.cue == "speech"
        picture = next(r for r in searcher.search(phrase, k=2, frames=False, experts=["visual"]) if r.id == talk)
        threshold = searcher.model.calibration.threshold("7+")  # seven words
        assert picture.confidence < threshold <= results[0].confidence  # the picture alone: no good match
        assert not searcher.no_good_match(phrase, results) and searcher.no_good_match(phrase, [picture])
        got = TestClient(create_app(searcher)).get("/search", params={"q": phrase, "k": 2}).json()
        assert got["no_good_match"] is False and got["results"][0]["confidence"] >= threshold
        with ServerThread(create_app(searcher)) as server, chromium_page(tmp_path / "profile") as (page, errors):
            page.goto(server.url + "/?q=" + phrase.replace(" ", "+") + "&k=10", wait_until="networkidle")
            page.wait_for_selector(".card", timeout=20_000)
            assert not page.locator("#no-match").is_visible()
            assert "% confident" in page.locator(".card").nth(0).inner_text()
            assert not errors, errors
    res = CliRunner().invoke(app, ["search", phrase, "--index", str(index), "-k", "2"])
    assert res.exit_code == 0, res.output
    assert NO_GOOD_MATCH_MESSAGE not in res.output and "said at" in res.stdout
