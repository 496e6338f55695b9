"""The text cues: keyword (normalised BM25 with k1 = 0) and meaning (embeddings) scores checked against brute-force
loops; the generated clips found by what is said and what is written (the cues as search sources, fused alone); one
transaction per video, resumable after kill -9; scores that the project's score / rank fusion accept.

The same test functions run on the embedded index (SQLite + FTS5) and on PostgreSQL (tsvector + trigrams), and both
give the same scores for real captions (Flickr8k)."""

from __future__ import annotations

import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cue_fixtures import HashEncoder, ScriptedExtractor
from reelsearch.features.cues import CueResult, CueSegment
from reelsearch.index.embedded.textcues import SQLITE_NAME, EmbeddedTextCues
from reelsearch.index.keyword import query_terms
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.textcue_records import TextCueError
from reelsearch.scoring.fusion import rank_fusion, score_fusion
from reelsearch.search.cues import CueSource, cue_score
from reelsearch.search.fusion import positive, threshold_fusion

TESTS = Path(__file__).resolve().parent


CORPUS = {
    "v1": {"speech": ["first preheat the oven", "mix flour and sugar"], "ocr": ["BAKING DAY"]},
    "v2": {"speech": ["the oven is hot today"], "ocr": ["WEATHERFORECAST", "quarterly revenue up"]},
    "v3": {"speech": ["quarterly meeting about revenue"], "ocr": []},
    "v4": {"speech": [], "ocr": ["revenue 2024"]},
    "v5": {"speech": [], "ocr": []},
}


@pytest.fixture(params=["sqlite", "postgres"])
def open_cues(request, tmp_path):
    """Factory: the text cues in tmp_path/idx (SQLite), or in a fresh PostgreSQL database; again: the same ones."""
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    opened = []

    def open_(encoder=None):
        if url:
            library = PostgresCatalog(url)
            opened.append(library)
            cues = library.text_cues(encoder or HashEncoder(), create=True)
        else:
            cues = EmbeddedTextCues(tmp_path / "idx", encoder=encoder or HashEncoder())
        opened.append(cues)
        return cues

    yield open_
    for item in reversed(opened):
        item.close()


@pytest.fixture
def index(open_cues):
    idx = open_cues()
    idx.update([(v, v, "c0" if v == "v1" else f"c-{v}") for v in CORPUS], ScriptedExtractor(CORPUS), progress=False)
    return idx


def text_search(index, query, k, cues=("speech", "ocr")):
    """The ``k`` videos whose speech / on-screen text best match ``query``, as a search by text alone ranks them (the
    cues' sources, each weighted 1, fused; only videos with evidence): [(video id, score, the strongest cue's
    segment)]."""
    sc = index.scores(query, cues=cues)
    sources = {c: CueSource(sc, c) for c in cues}
    fused = threshold_fusion(sources, dict.fromkeys(cues, 1.0), k, len(sc.ids), keep=positive)
    out = []
    for j, vid in enumerate(fused.ids):
        cue = max(cues, key=lambda c: fused.terms[c][j])
        out.append((vid, float(fused.scores[j]), sources[cue].match(vid)))
    return out


def brute_keyword(query):
    """Expected keyword scores, straight from the definition (words of these texts need no stemming)."""
    segs = [(v, cue, t) for v, cues in CORPUS.items() for cue, ts in cues.items() for t in ts]
    terms = query_terms(query)

    def has(cue, text, term):
        return term in re.findall(r"\w+", text.lower()) or (cue == "ocr" and len(term) >= 4 and term in text.lower())

    n = len(segs)
    idf = {t: math.log(1 + (n - sum(has(c, x, t) for _, c, x in segs) + 0.5)
                       / (sum(has(c, x, t) for _, c, x in segs) + 0.5)) for t in terms}
    out = {}
    for v, cue, text in segs:
        score = sum(idf[t] for t in terms if has(cue, text, t)) / sum(idf.values())
        out[(v, cue)] = max(out.get((v, cue), 0.0), score)
    return out


@pytest.mark.parametrize("query", ["preheat the oven", "quarterly revenue", "weather forecast", "revenue 2024",
                                   "the", "nothing matches this"])
def test_keyword_scores_match_brute_force(index, query):
    sc = index.scores(query, list(CORPUS))
    expected = brute_keyword(query)
    for i, v in enumerate(CORPUS):
        for cue in ("speech", "ocr"):
            assert sc.keyword[cue][i] == pytest.approx(expected.get((v, cue), 0.0), abs=1e-6), (query, v, cue)
            best = sc.keyword_best[cue][i]
            assert (best is None) == (sc.keyword[cue][i] == 0.0)


def test_keyword_details(index):
    sc = index.scores("preheat the oven", ["v1", "v2", "nope"])
    assert sc.ids == ["v1", "v2", "nope"] and sc.keyword["speech"][0] == pytest.approx(1.0)  # every word, one line
    assert 0 < sc.keyword["speech"][1] < 1 and sc.keyword["speech"][2] == 0 and sc.keyword_best["speech"][2] is None
    best = sc.keyword_best["speech"][0]
    assert (best.text, best.start, best.how) == ("first preheat the oven", 0.0, "keyword")
    assert index.scores("forecast", ["v2"]).keyword["ocr"][0] == pytest.approx(1.0)  # inside WEATHERFORECAST
    assert index.scores("preheated ovens", ["v1"]).keyword["speech"][0] == pytest.approx(1.0)  # Porter stems
    assert query_terms("The oven, the OVEN!") == ["oven"] and query_terms("to be") == ["to", "be"]
    # a function word's inflected form is no keyword: "doing" is stemmed to "do" and would match any "do"
    assert query_terms("clip of girl doing gymnastics") == ["clip", "girl", "gymnastics"]


def test_an_inflected_function_word_matches_nothing(open_cues):
    corpus = {"talk": {"speech": ["now we do this one"], "ocr": []},
              "gym": {"speech": ["gymnastics in the hall"], "ocr": []}}
    idx = open_cues()
    idx.update([(v, v, f"c-{v}") for v in corpus], ScriptedExtractor(corpus), progress=False)
    sc = idx.scores("girl doing gymnastics", ["talk", "gym"])
    assert sc.keyword["speech"][0] == 0.0 and sc.keyword["speech"][1] > 0  # "gymnastics" matches


def test_semantic_scores_match_brute_force(index):
    enc = HashEncoder()
    query = "revenue of the oven"
    sc = index.scores(query)
    assert sc.ids == ["v1", "v2", "v3", "v4"]  # videos with segments
    q = enc.sentence_features([query])[0]
    for i, v in enumerate(sc.ids):
        for cue in ("speech", "ocr"):
            texts = CORPUS[v][cue]
            cos = [float(np.clip(enc.sentence_features([t])[0] @ q, 0, 1)) for t in texts]
            expected = max(cos, default=0.0)
            assert sc.semantic[cue][i] == pytest.approx(expected, abs=2e-3), (v, cue)  # float16 storage
            if expected > 0:
                assert sc.semantic_best[cue][i].text == texts[int(np.argmax(cos))]


def test_search_ranks_and_explains(index):
    hits = text_search(index, "quarterly revenue", k=3)
    assert [vid for vid, _, _ in hits][:1] in (["v2"], ["v3"]) and len(hits) == 3
    assert all(score > 0 for _, score, _ in hits) and hits == sorted(hits, key=lambda h: -h[1])
    vid, _, match = text_search(index, "first preheat the oven", k=1)[0]
    assert vid == "v1" and match.cue == "speech" and match.text == "first preheat the oven"
    assert text_search(index, "BAKING", k=5, cues=["speech"]) == []  # only on screen
    with pytest.raises(TextCueError, match="empty query"):
        index.scores("  ")


def test_scores_feed_the_project_fusion(index):
    sc = index.scores("quarterly revenue", ["v1", "v2", "v3", "v4", "v5"])
    rows = [getattr(sc, kind)[cue][None, :] for cue in ("speech", "ocr") for kind in ("keyword", "semantic")]
    visual = np.array([[0.3, 0.1, 0.2, 0.0, 0.5]], np.float32)  # a visual expert's [1 query x 5 videos] scores
    fused = score_fusion([visual, *rows], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert fused.shape == (1, 5)
    np.testing.assert_allclose(fused[0], visual[0] + sum(r[0] for r in rows), rtol=1e-6)
    assert rank_fusion([visual, cue_score(sc, "ocr")[None, :]]).shape == (1, 5)
    np.testing.assert_allclose(cue_score(sc, "ocr", (2.0, 0.5), floor=0.0),
                               2 * sc.keyword["ocr"] + 0.5 * sc.semantic["ocr"], rtol=1e-6)


def test_put_replace_remove_retain_pending(index, tmp_path):
    recipes = {"speech": "speech:scripted", "ocr": "ocr:scripted"}
    assert index.pending("v1", recipes, "c0") == []
    assert index.pending("v1", recipes, "c1") == ["speech", "ocr"]  # the file changed
    assert index.pending("v1", {"speech": "speech:other"}, "c0") == ["speech"]  # another recipe
    assert index.pending("new", recipes) == ["speech", "ocr"]
    index.put("v1", {"speech": CueResult("speech", [CueSegment("speech", 0, 1, "brand new words", 0.9)],
                                         recipe="speech:scripted")}, "c0")
    assert [s.text for s in index.segments("v1")] == ["BAKING DAY", "brand new words"]  # ocr kept, speech replaced
    assert index.scores("preheat", ["v1"]).keyword["speech"][0] == 0.0
    index.put("v1", {"ocr": CueResult("ocr", error="v1.mp4: corrupt", recipe="ocr:scripted")}, "c0")
    assert index.runs("v1")["ocr"].error == "v1.mp4: corrupt" and index.pending("v1", recipes, "c0") == ["ocr"]
    assert [s.text for s in index.segments("v1")] == ["brand new words"]
    assert index.remove(["v1", "zzz"]) == 1 and "v1" not in index.video_ids()
    assert index.retain(["v2"]) == 3 and index.video_ids() == ["v2"]
    if isinstance(index, EmbeddedTextCues):  # the FTS5 tables follow the segments
        db = sqlite3.connect(index.path)
        assert db.execute("SELECT count(*) FROM segments").fetchone()[0] == db.execute(
            "SELECT count(*) FROM words").fetchone()[0] == 3
        assert db.execute("SELECT count(*) FROM chars").fetchone()[0] == 2  # v2's OCR lines
    else:  # every segment has its words, OCR lines their folded text
        assert index._db.execute("SELECT count(*), count(*) FILTER (WHERE words <> ''), count(folded) "
                                 "FROM segments").fetchone() == (3, 3, 2)


def test_update_retries_failed_cues_only(open_cues):
    extractor = ScriptedExtractor(CORPUS, fail={("v2", "ocr")})
    with open_cues() as idx:
        report = idx.update([(v, v, None) for v in ("v1", "v2")], extractor, progress=False)
        assert report.extracted == ["v1", "v2"] and report.failed == [("v2", "ocr", "v2: ocr failed")]
        assert [s.text for s in idx.segments("v2")] == ["the oven is hot today"]  # speech kept despite OCR
        extractor.fail.clear()
        extractor.calls.clear()
        report = idx.update([(v, v, None) for v in ("v1", "v2")], extractor, progress=False)
        assert extractor.calls == [("v2", ("ocr",))] and report.unchanged == ["v1"]
        assert "WEATHERFORECAST" in [s.text for s in idx.segments("v2")]


def test_other_encoder_size_is_refused(index, open_cues):
    class Wide(HashEncoder):
        dim = 32

    with open_cues(Wide()) as other:
        with pytest.raises(TextCueError, match="64-d embeddings, the encoder gives 32-d"):
            other.put("v9", {"speech": CueResult("speech", [CueSegment("speech", 0, 1, "x y", 1.0)])})


_WRITER = """
import sys
sys.path.insert(0, {tests!r})
import conftest  # noqa: F401  (first: it imports the fixture modules)
from cue_fixtures import HashEncoder, ScriptedExtractor
from test_textcues import CORPUS
from reelsearch.index.embedded.textcues import EmbeddedTextCues
table = {{f"v{{i}}": CORPUS["v1"] for i in range(40)}}
with EmbeddedTextCues({path!r}, encoder=HashEncoder()) as idx:
    idx.update([(v, v, None) for v in table], ScriptedExtractor(table, delay=0.05), progress=False)
"""


def test_kill_mid_update_keeps_whole_videos_and_resumes(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER.format(tests=str(TESTS), path=str(tmp_path))], env=env)
    db_path = tmp_path / SQLITE_NAME
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.1)
        try:
            done = sqlite3.connect(db_path).execute("SELECT count(DISTINCT video_id) FROM runs").fetchone()[0]
        except sqlite3.Error:
            continue
        if done >= 5:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    db = sqlite3.connect(db_path)
    stored = [r[0] for r in db.execute("SELECT DISTINCT video_id FROM runs")]
    assert 5 <= len(stored) < 40
    for (video_id,) in db.execute("SELECT DISTINCT video_id FROM runs"):  # every stored video is whole
        counts = dict(db.execute("SELECT cue, count(*) FROM segments WHERE video_id = ? GROUP BY cue", (video_id,)))
        assert counts == {"speech": 2, "ocr": 1}, video_id
    assert db.execute("SELECT count(*) FROM words").fetchone()[0] == 3 * len(stored)
    table = {f"v{i}": CORPUS["v1"] for i in range(40)}
    extractor = ScriptedExtractor(table)
    with EmbeddedTextCues(tmp_path, encoder=HashEncoder()) as idx:
        report = idx.update([(v, v, None) for v in table], extractor, progress=False)
        assert sorted(report.unchanged) == sorted(stored) and len(report.extracted) == 40 - len(stored)
        assert len(idx.video_ids()) == 40


# ------------------------------------------------------------------------------ the generated clips, MiniLM
@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def clip_index(request, tmp_path_factory, cue_extraction, minilm):
    library = None
    if request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        library = PostgresCatalog(server.url(server.create_database()))
        idx = library.text_cues(minilm.sentence_features, create=True)
    else:
        idx = EmbeddedTextCues(tmp_path_factory.mktemp("cue-index"), encoder=minilm.sentence_features)
    for clip_id, results in cue_extraction.items():
        idx.put(clip_id, results, content="sha")
    yield idx
    idx.close()
    if library is not None:
        library.close()


@pytest.mark.parametrize("query, clip, cue, how", [
    ("preheat the oven", "recipe", "speech", "keyword"),
    ("quarterly revenue", "report", "ocr", "keyword"),
    ("heavy rain and strong winds", "weather", "speech", "keyword"),
    ("heat up the oven before baking", "recipe", "speech", "semantic"),
    ("financial results for the quarter", "report", "ocr", "semantic"),
])
def test_generated_clips_found_by_what_is_said_and_written(clip_index, query, clip, cue, how):
    hits = text_search(clip_index, query, k=4)
    assert hits[0][0] == clip, [h[:2] for h in hits]
    assert hits[0][2].cue == cue and (how == "semantic" or hits[0][2].how == "keyword")
    sc = clip_index.scores(query, ["recipe", "report", "silent", "weather"])
    kind = sc.keyword if how == "keyword" else sc.semantic
    assert int(np.argmax(kind[cue])) == sc.ids.index(clip)  # the one kind of score alone finds it too


def test_spoken_match_points_at_the_word(clip_index):
    match = text_search(clip_index, "preheat the oven", k=1)[0][2]
    preheat = [w for s in clip_index.segments("recipe", ["speech"]) for w in s.words if "preheat" in w[2].lower()]
    assert match.moment == preheat[0][0] and match.start <= match.moment < match.end
    ocr = text_search(clip_index, "quarterly revenue", k=1)[0][2]
    assert (ocr.moment, ocr.start, ocr.end) == (1.0, 1.0, 5.0)


def test_clip_without_sound_or_text_has_nothing(clip_index):
    assert clip_index.segments("silent") == [] and set(clip_index.runs("silent")) == {"speech", "ocr"}
    sc = clip_index.scores("preheat the oven", ["silent"])
    assert all(float(a[0]) == 0.0 for a in (*sc.keyword.values(), *sc.semantic.values()))
    assert "silent" not in [vid for vid, _, _ in text_search(clip_index, "quarterly revenue", k=10)]


#: matched segments per query and cue whose highlights the two databases are asked for: both mark the words by the
#: same keyword rules in the stored text (compared for every segment), and PostgreSQL answers each by a query of its
#: own (all ~7,500 took 14 s of the test's 37 under load)
HIGHLIGHTED = 10


def test_both_databases_give_real_captions_the_same_scores(tmp_path, pg_url):
    """Flickr8k captions as what is said (three per image) and written (one upper-cased, one with its first words run
    together, as OCR often reads them): SQLite (FTS5) and PostgreSQL (tsvector, trigrams) give every video the same
    keyword and meaning scores and the same segment behind them (its highlights for the first ``HIGHLIGHTED`` of each
    query and cue), for 20 other captions and some single words (each compared segment costs a PostgreSQL query:
    ~7500 segments, 11000 with the 50 captions it took before)."""
    from conftest import shared_path

    lines = shared_path("flickr8k", "captions.txt").read_text(encoding="utf-8").splitlines()
    by_image: dict[str, list[str]] = {}
    for line in lines[:1500]:
        name, _, text = line.partition("\t")
        by_image.setdefault(name.split("#")[0], []).append(text.strip())
    table = {}
    for image, texts in list(by_image.items())[:250]:
        words = texts[3].split()
        table[image] = {"speech": texts[:3], "ocr": [texts[3].upper(), "".join(words[:3]).upper() + " " +
                                                     " ".join(words[3:])]}
    queries = [t for texts in list(by_image.values())[250:] for t in texts[:1]][:20]
    queries += ["dog", "running", "climbing stairs", "playhouse", "wooden", "BLACKDOG", "girls", "children's"]
    embedded = EmbeddedTextCues(tmp_path / "idx", encoder=HashEncoder())
    library = PostgresCatalog(pg_url)
    shared = library.text_cues(HashEncoder(), create=True)
    try:
        for idx in (embedded, shared):
            idx.update([(v, v, "c") for v in table], ScriptedExtractor(table), progress=False)
        matched = 0
        for query in queries:
            a, b = embedded.scores(query), shared.scores(query)
            assert a.ids == b.ids
            for cue in ("speech", "ocr"):
                np.testing.assert_allclose(b.keyword[cue], a.keyword[cue], atol=1e-6, err_msg=query)
                np.testing.assert_allclose(b.semantic[cue], a.semantic[cue], atol=1e-6, err_msg=query)
                for n, i in enumerate(np.flatnonzero(a.keyword[cue])):
                    x, y = a.keyword_best[cue][i], b.keyword_best[cue][i]
                    assert (x.cue, x.text, x.start, x.moment) == (y.cue, y.text, y.start, y.moment), query
                    if n < HIGHLIGHTED:
                        assert embedded.highlights(x.segment, query) == shared.highlights(y.segment, query), query
                matched += int(np.count_nonzero(a.keyword[cue]))
        assert matched > 500  # the queries matched many segments: the comparison is not of zeros
    finally:
        embedded.close()
        shared.close()
        library.close()
