"""The experts of a search (the model's and the text cues) and the cue stage of indexing, on a synthetic library:
fused rankings from candidates + the threshold test equal the exhaustive fusion written out by hand (score fusion,
a mixture, rank fusion, text alone, videos with biases); the cue stage stores, reuses, prunes and reports like the
visual sync, inside the library's writer lock; bad expert names and weights are clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from cue_fixtures import HashEncoder, ScriptedExtractor
from reelsearch.config.schema import FusionKind, Normalize
from reelsearch.errors import ReelsearchError
from reelsearch.extras import MissingExtraError
from reelsearch.index.catalog import CatalogError
from reelsearch.index.embedded.catalog import EmbeddedCatalog
from reelsearch.index.embedded.textcues import EmbeddedTextCues
from reelsearch.index.media import EmbeddedMedia
from reelsearch.models import MixtureOfExperts, SearchMode, load_model
from reelsearch.scoring.calibration import banked, query_length
from reelsearch.scoring.fusion import fuse_experts
from reelsearch.search.cue_indexing import cues_to_run, index_cues
from reelsearch.search.cues import SEMANTIC_FLOOR, floored
from reelsearch.search.experts import DEFAULT_WEIGHTS, ExpertError, parse_experts, parse_weights, plan
from reelsearch.search.query import run_query
from reelsearch.search.sources import visual_sources
from test_search_support import small_model

torch.set_num_threads(1)
WORDS = ("oven flour sugar bake revenue quarterly profit rain wind storm goal striker tram lisbon plants "
         "sunlight agenda launch hiring budget").split()
N_VIDEOS = 90


def test_fuse_experts_by_hand():
    a, b = np.array([[0.2, 0.9, 0.5]]), np.array([[1.0, 0.0, 0.5]])
    assert fuse_experts({"a": a, "b": b}, {"a": 2.0, "b": 0.5})[0] == pytest.approx([0.9, 1.8, 1.25])
    ranks = fuse_experts({"a": a, "b": b}, {"a": 1.0, "b": 3.0}, kind="rank")  # ranks a: 3 1 2, b: 1 3 2
    assert ranks[0] == pytest.approx([-(3 + 3 * 1), -(1 + 3 * 3), -(2 + 3 * 2)])
    with pytest.raises(ReelsearchError, match="no scores for experts"):
        fuse_experts({"a": a}, {"a": 1.0, "b": 1.0})


def _library(folder, model, rng, biased: bool = False):
    """N_VIDEOS small files (distinct bytes), embedded as random unit rows of the model's width; ``biased``: each with
    a bias (a querybank offset is a negative one; the library takes any) spread as widely as the scores, so the
    biases reorder them."""
    media = folder / "media"
    media.mkdir(parents=True)
    rows = {}
    for i in range(N_VIDEOS):
        path = media / f"v{i:03d}.mp4"
        path.write_bytes(f"video {i}".encode())
        frames = rng.standard_normal((3, model.row_dim)).astype(np.float32)
        frames /= np.linalg.norm(frames, axis=1, keepdims=True)
        video = frames.mean(0) / np.linalg.norm(frames.mean(0))
        bias = float(rng.uniform(-0.3, 0.5)) if biased else 0.0
        rows[str(path)] = EmbeddedMedia(video, frames, np.array([0.0, 1.0, 2.0]), 3.0, bias=bias)
    lib = EmbeddedCatalog(folder / "index")
    report = lib.sync([media], lambda p: rows[p], model_id="synthetic", progress=False)
    return lib, report


def _texts(rng, n):
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 5)), replace=False)) for _ in range(n)]


@pytest.fixture(scope="module", params=["cosine", "moe", "moe-rank", "moe-biased"])
def library(request, tmp_path_factory):
    """(model, library, cue index): 2/3 of the videos speak, 1/2 show text; "-biased": the videos have biases."""
    rng = np.random.default_rng(7)
    model = small_model(request.param.removesuffix("-biased"))
    folder = tmp_path_factory.mktemp(f"lib-{request.param}")
    lib, report = _library(folder, model, rng, biased=request.param.endswith("-biased"))
    table = {}
    for i, path in enumerate(sorted(report.added)):
        table[path] = {"speech": _texts(rng, 2) if i % 3 else [], "ocr": _texts(rng, 1) if i % 2 else []}
    cues = EmbeddedTextCues(folder / "index", encoder=HashEncoder())
    out = index_cues(lib, cues, report, ["speech", "ocr"], ScriptedExtractor(table), progress=False)
    assert len(out.extracted) == N_VIDEOS and not out.failed
    yield model, lib, cues
    cues.close()
    lib.close()


def _exhaustive(model, lib, cues, text, query, p, visual):
    """Every video's fused score, written out: sum of weight x score (or of weight x rank) per expert, plus, for a
    query of four words or more (``banked``), the visual weight x the video's bias (read back one video at a
    time)."""
    ids = lib.ids()
    vectors = lib.rows(ids)
    sc = cues.scores(text, ids)
    rows, weights = {}, _weights(model, p, visual)
    if p.visual:
        for shown, name in visual.experts.items():
            rows[shown] = model.expert_scores(query, vectors)[name][0]
    for c in p.cues:
        rows[c] = sc.keyword[c] + 2.0 * floored(sc.semantic[c], SEMANTIC_FLOOR)
    if visual.kind == "rank":
        total = -sum(weights[e] * rankdata(-rows[e], method="average") for e in rows)
    else:
        total = sum(weights[e] * rows[e] for e in rows)
        if p.visual and banked(query_length(text)):
            total = total + p.weights["visual"] * np.array([lib.media(i).bias for i in ids])
    return ids, np.asarray(total)


def _weights(model, p, visual):
    """Each shown expert's weight in the fused score: the model's experts' own weights times the visual weight."""
    out = {shown: p.weights["visual"] * model.weight(name) for shown, name in visual.experts.items()} if p.visual \
        else {}
    return {**out, **{c: p.weights[c] for c in p.cues}}


@pytest.mark.parametrize("experts", [None, ["speech", "ocr"], ["visual", "ocr"]])
def test_candidates_give_the_exhaustive_ranking(library, experts, monkeypatch):
    model, lib, cues = library
    rng = np.random.default_rng(3)
    enc = HashEncoder()
    p = plan(model, experts, {}, cues.stored_cues())
    visual = visual_sources(model, lib)
    asked = []  # how many videos the vector index was asked for, per call: the candidates, not the library
    nearest = lib.nearest
    monkeypatch.setattr(lib, "nearest", lambda q, n, fn=None, biased=False: asked.append(n) or nearest(q, n, fn,
                                                                                                   biased=biased))
    widest = []
    for text in ["quarterly revenue", "bake with flour and sugar", "storm", "nothing here at all"]:
        query = rng.standard_normal((1, model.dim)).astype(np.float32)
        query /= np.linalg.norm(query)
        ids, total = _exhaustive(model, lib, cues, text, query, p, visual)
        want = [i for i in np.argsort(-total, kind="stable") if p.visual or total[i] > 0][:6]
        asked.clear()
        got = run_query(lib, visual, cues, text, query, enc.sentence_features([text])[0], p, 6, first=4)
        widest.append(max(asked, default=0))
        assert [r.score for r in got] == pytest.approx(total[want].tolist(), abs=1e-4), text
        position = {v: i for i, v in enumerate(ids)}
        assert [total[position[r.id]] for r in got] == pytest.approx([r.score for r in got], abs=1e-4)
        if not want:
            assert got == []  # text alone, and no video has any of these words
            continue
        kth = total[want[-1]]  # the same videos, up to the order of equal scores at the end
        assert {r.id for r in got if r.score > kth + 1e-4} == {ids[i] for i in want if total[i] > kth + 1e-4}
        for r in got:  # the breakdown adds up to the fused score (score fusion), with the video's bias (4+ words)
            if visual.kind == "score":
                bias = p.weights["visual"] * lib.media(r.id).bias if p.visual and banked(query_length(text)) else 0.0
                weights = _weights(model, p, visual)
                assert sum(weights[e] * s for e, s in r.experts.items()) + bias == pytest.approx(r.score, abs=1e-4)
    if not visual.exhaustive and p.visual and model.search_mode == "ann":
        assert min(widest) < N_VIDEOS  # some query was answered from candidates alone


def test_match_and_moment_come_from_the_strongest_cue(library):
    from reelsearch.features.cues import CueResult, CueSegment

    model, lib, cues = library
    vid = cues.video_ids()[7]
    words = ((4.0, 4.5, "zebra"), (4.6, 5.2, "quartz"), (5.3, 6.0, "violin"))
    cues.put(vid, {"speech": CueResult("speech", [CueSegment("speech", 4.0, 6.0, "Zebra quartz violin.", 0.9,
                                                             words=words)], recipe="speech:scripted")})
    p = plan(model, None, {"visual": 0.2}, cues.stored_cues())
    visual = visual_sources(model, lib)
    query = np.random.default_rng(1).standard_normal((1, model.dim)).astype(np.float32)
    query /= np.linalg.norm(query)
    text = "quartz violin"
    top = run_query(lib, visual, cues, text, query, HashEncoder().sentence_features([text])[0], p, 3)
    r = top[0]
    assert r.id == vid and r.match.cue == "speech" and r.match.text == "Zebra quartz violin."
    assert r.match.highlights == [(6, 12), (13, 19)]  # both words
    # the words outweigh the picture: the result's moment is the first matched word's (frames are at 0, 1, 2 s)
    assert r.moment == r.match.moment == 4.6 and r.frame == 2
    if visual.kind == "score":
        weights = _weights(model, p, visual)
        assert weights["speech"] * r.experts["speech"] > sum(weights[d] * r.experts[d] for d in visual.experts)
    top = run_query(lib, visual, cues, "budget", query, HashEncoder().sentence_features(["budget"])[0],
                    plan(model, None, {"speech": 0.0, "ocr": 0.0}, cues.stored_cues()), 3)
    for r in top:  # weight 0: the text never outweighs the picture: the moment is the best frame's
        best = max(r.frames, key=lambda f: f.score)
        assert r.frame == best.index and r.moment == best.t


def test_plan_and_weights():
    model = small_model("cosine")
    p = plan(model, None, {}, ["speech", "ocr"])
    assert p.visual and p.cues == ["speech", "ocr"]
    assert p.weights == {"visual": 1.0, "speech": DEFAULT_WEIGHTS["speech"], "ocr": DEFAULT_WEIGHTS["ocr"]}
    assert plan(model, None, {}, []).cues == []  # an index without cues: the model alone
    assert plan(model, None, {"visual": 3.0}, []).weights == {"visual": 1.0}  # ... scores as the model does
    assert plan(model, ["ocr"], parse_weights("ocr=2"), ["ocr"]).weights == {"ocr": 2.0}
    moe = small_model("moe")
    p = plan(moe, None, parse_weights("visual=2,speech=0.5"), ["speech"])
    assert p.weights == {"visual": 2.0, "speech": 0.5}
    # a score-fused mixture is one source (its fused score + the bias) weighted as the model; a rank-fused
    # one is a source per expert, each weighted by its own weight in the model, ranked among every video
    visual = visual_sources(moe, None)
    assert visual.weights(2.0) == {"visual": 2.0} and not visual.exhaustive
    assert visual.experts == {"object": "object", "scene": "scene"}
    ranked = visual_sources(small_model("moe-rank"), None)
    assert ranked.exhaustive and ranked.kind == "rank" and ranked.weights(2.0) == {"object": 2.0, "scene": 1.0}
    assert parse_experts("visual, speech,visual") == ["visual", "speech"] and parse_experts(None) is None
    for bad, message in [(lambda: plan(model, ["audio"], {}, []), "unknown expert 'audio'"),
                         (lambda: plan(model, ["speech"], {}, ["ocr"]), "holds no speech cue"),
                         (lambda: plan(model, None, {"music": 1.0}, []), "unknown expert 'music'"),
                         (lambda: parse_weights("speech=-1"), "finite number >= 0"),
                         (lambda: parse_weights("speech"), "NAME=NUMBER"),
                         (lambda: parse_weights("ocr=lots"), "not a number"),
                         (lambda: parse_experts(" , "), "no experts named")]:
        with pytest.raises(ExpertError, match=message):
            bad()


# ------------------------------------------------------------------------------------------- the cue stage
def test_search_mode_is_decided_when_the_model_loads(tmp_path):
    """The mode and the fusion are enums read once from the model folder; an unknown fusion kind names the file."""
    moe = small_model("moe")
    z = MixtureOfExperts(dict(moe.experts), {"kind": "score", "weights": {"object": 1.0, "scene": 0.5},
                                             "normalize": "zscore"}, name="z")
    assert z.search_mode is SearchMode.ZSCORE and z.search_mode.relative and z.fusion.normalize is Normalize.ZSCORE
    visual = visual_sources(z, None)
    assert visual.exhaustive and visual.kind is FusionKind.SCORE and visual.normalize is Normalize.ZSCORE
    assert small_model("moe-rank").search_mode is SearchMode.RANK and not moe.search_mode.relative
    z.save(tmp_path / "z")
    loaded = load_model(tmp_path / "z")
    assert loaded.search_mode is SearchMode.ZSCORE and loaded.fusion.kind is FusionKind.SCORE
    document = json.loads((tmp_path / "z" / "moe.json").read_text())
    assert document["fusion"]["kind"] == "score" and document["fusion"]["normalize"] == "zscore"
    document["fusion"]["kind"] = "max"
    (tmp_path / "z" / "moe.json").write_text(json.dumps(document))
    with pytest.raises(ReelsearchError, match=r"moe\.json: fusion\.kind: 'max' is not one of 'score', 'rank'"):
        load_model(tmp_path / "z")


def test_cue_stage_reuses_prunes_reports_and_holds_the_writer_lock(tmp_path):
    rng = np.random.default_rng(0)
    model = small_model("cosine")
    lib, report = _library(tmp_path, model, rng)
    paths = sorted(report.added)[:4]
    table = {p: {"speech": [f"spoken words {i}"], "ocr": [f"TITLE {i}"]} for i, p in enumerate(paths)}
    other = EmbeddedCatalog(tmp_path / "index")  # another writer (its own lock handle), as another process would be
    locked = []

    class Watching(ScriptedExtractor):
        def extract(self, path, cues):
            with pytest.raises(CatalogError, match="another process"):
                with other.writing(0):
                    pass
            locked.append(path)
            return super().extract(path, cues)

    extractor = Watching(table, fail={(paths[1], "ocr")})
    cues = EmbeddedTextCues(tmp_path / "index", encoder=HashEncoder())
    with lib.writing(0):
        small = lib.sync(paths, lambda p: None, model_id="synthetic", progress=False)  # all unchanged
        out = index_cues(lib, cues, small, ["speech", "ocr"], extractor, progress=False)
    assert len(locked) == 8 and len(out.extracted) == 4  # one task per video and cue
    assert out.failed == [(lib.find(paths[1]), "ocr", f"{paths[1]}: ocr failed")]
    second = lib.find(paths[1])
    assert [s.cue for s in cues.segments(second)] == ["speech"] and len(lib) == N_VIDEOS  # the rest is kept

    # again: only the failed cue runs; a copy of a file reuses its cues; a deleted file drops them
    copy = tmp_path / "media" / "copy.mp4"
    copy.write_bytes((tmp_path / "media" / "v000.mp4").read_bytes())
    (tmp_path / "media" / "v003.mp4").unlink()
    gone = lib.find(paths[3])
    extractor.calls.clear()
    table[paths[1]] = {"ocr": ["TITLE 1"]}
    extractor.fail.clear()
    with lib.writing(0):
        report = lib.sync([tmp_path / "media"], lambda p: None, model_id="synthetic", progress=False)
        out = index_cues(lib, cues, report, ["speech", "ocr"], extractor, progress=False)
    assert report.reused == 1 and len(report.removed) == 1
    assert [c for c in extractor.calls if c[0] in paths] == [(paths[1], ("ocr",))]
    assert out.reused == [lib.find(str(copy))]
    assert [s.text for s in cues.segments(lib.find(str(copy)))] == ["spoken words 0", "TITLE 0"]
    assert gone not in cues.video_ids() and cues.segments(gone) == []
    # cues of a changed file that were not extracted again are dropped, not kept for the old content
    (tmp_path / "media" / "v002.mp4").write_bytes(b"new content")
    report = lib.sync([tmp_path / "media"], lambda p: EmbeddedMedia(*_one(model)), model_id="synthetic",
                      progress=False)
    index_cues(lib, cues, report, [], progress=False)
    assert cues.segments(lib.find(paths[2])) == [] and cues.runs(lib.find(paths[2])) == {}
    other.close()
    cues.close()
    lib.close()


def _one(model):
    frames = np.ones((1, model.row_dim), np.float32) / np.sqrt(model.row_dim)
    return frames[0], frames, np.array([0.0]), 1.0


def test_cues_to_run_follows_the_installed_extras(monkeypatch):
    import reelsearch.search.cue_indexing as stage

    monkeypatch.setattr(stage, "available_cues", lambda: {"speech": None, "ocr": "rapidocr_onnxruntime is not "
                                                          "installed: pip install 'reelsearch[ocr]'"})
    monkeypatch.setattr(stage, "missing_extra", lambda extra: None)
    run, off = cues_to_run(None)
    assert run == ["speech"] and "reelsearch[ocr]" in off["ocr"]
    assert cues_to_run(["speech"]) == (["speech"], {"ocr": "turned off"})
    with pytest.raises(MissingExtraError, match=r"reelsearch\[ocr\]"):
        cues_to_run(["ocr"])
    with pytest.raises(ReelsearchError, match="unknown cue 'music'"):
        cues_to_run(["music"])
    monkeypatch.setattr(stage, "missing_extra", lambda extra: "sentence_transformers is not installed: "
                        "pip install 'reelsearch[text]'")
    run, off = cues_to_run(None)
    assert run == [] and "reelsearch[text]" in off["speech"] and "reelsearch[ocr]" in off["ocr"]
    with pytest.raises(MissingExtraError, match=r"reelsearch\[text\]"):
        cues_to_run(["speech"])
