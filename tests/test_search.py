"""Searcher on real media (H.264 clips and images written in the test, MSR-VTT clips when present), checked against
brute force with each model's own API, file by file; re-indexing after add / change / delete; annotation."""

from __future__ import annotations

import json
import shutil
import zipfile

import numpy as np
import pytest
import torch

from conftest import shared_path
from reelsearch.errors import ReelsearchError
from reelsearch.search import QueryError, Searcher
from test_search_support import CAPTIONS, make_media, reference, reference_scores, small_model, write_clip

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    folder = tmp_path_factory.mktemp("media")
    return folder, sorted(make_media(folder))


@pytest.fixture(scope="module")
def media_with_cuts(media, tmp_path_factory):
    """The media and a 16 s clip of four colours that the index cuts into segments (two: frames alike in features
    stay together), so a video's score is its best segment's, not the whole video's."""
    folder = tmp_path_factory.mktemp("cuts")
    for p in media[1]:
        shutil.copy2(p, folder / p.name)
    write_clip(folder / "cuts.mp4", [((210, 30, 30), 4.0), ((30, 40, 200), 4.0), ((245, 245, 245), 4.0),
                                     ((12, 12, 12), 4.0)], seed=5)
    return folder, sorted(folder.iterdir())


def _ranks(scores: list[float]) -> np.ndarray:
    """1 = best, ties share their average rank (plain loops)."""
    out = np.zeros(len(scores))
    for i, s in enumerate(scores):
        better = sum(1 for t in scores if t > s)
        equal = sum(1 for t in scores if t == s)
        out[i] = better + (equal + 1) / 2
    return out


def _expected(model, kind, ref):
    """Fused score per file from the brute-force per-file (per-expert) scores."""
    if kind in ("moe", "moe-mixed"):
        return [sum(model.fusion.weights[k] * v for k, v in r.items()) for r in ref]
    if kind == "moe-rank":
        names = list(model.experts)
        ranks = {k: _ranks([r[k] for r in ref]) for k in names}
        return [-sum(model.fusion.weights[k] * ranks[k][i] for k in names) for i in range(len(ref))]
    return ref


MODES = {"cosine": "ann", "order": "scan", "pairwise": "pairwise", "moe": "ann", "moe-rank": "rank",
         "moe-mixed": "scan"}


@pytest.mark.parametrize("kind", list(MODES))
def test_search_matches_brute_force(kind, media_with_cuts, tmp_path):
    folder, paths = media_with_cuts
    model = small_model(kind)
    with Searcher(tmp_path / "index", model) as searcher:
        assert searcher.mode == MODES[kind]
        report = searcher.index([folder], progress=False, cues=())
        assert sorted(report.added) == [str(p) for p in paths] and not report.failed
        for query in CAPTIONS[:3]:
            results = searcher.search(query, k=10, moments=10)
            refs = reference(model, query, paths)
            ref = [f.score for f in refs]
            want = dict(zip(map(str, paths), _expected(model, kind, ref)))
            assert [r.path for r in results] == sorted(want, key=lambda p: -want[p])
            tol = 2e-2 if kind == "pairwise" else 1e-4  # pairwise scores come from float16 frame rows
            for r in results:
                assert r.score == pytest.approx(want[r.path], abs=tol)
                i = paths.index(type(paths[0])(r.path))
                f = refs[i]
                assert len(r.frames) == len(f.times)
                assert [fr.t for fr in r.frames] == pytest.approx(f.times.tolist())
                assert [fr.score for fr in r.frames] == pytest.approx(f.frames.tolist(), abs=2e-2)
                # the segments, best first, and the best moment: the best frame inside the best segment
                order = np.argsort(-f.segment_scores, kind="stable")
                assert len(f.segments) == (2 if r.path.endswith("cuts.mp4") else 1)
                assert [t for m in r.moments for t in (m.start, m.end)] == pytest.approx(
                    [t for o in order for t in f.segments[o][2:]], abs=1e-6)
                assert [m.score for m in r.moments] == pytest.approx(f.segment_scores[order].tolist(), abs=2e-2)
                first, stop = f.segments[f.best][:2]
                assert first <= r.frame < stop
                assert f.frames[r.frame] >= f.frames[first:stop].max() - 2e-2  # up to float16 near-ties
                assert r.moment == pytest.approx(f.times[r.frame])
                if kind.startswith("moe"):
                    assert r.experts == pytest.approx(ref[i], abs=1e-4)
            top2 = searcher.search(query, k=2, frames=False)
            assert [r.id for r in top2] == [r.id for r in results[:2]] and top2[0].frames is None


def test_moments_follow_the_content(media, tmp_path):
    """The frames of one colour segment score alike: the frames strip is piecewise-constant-ish per segment."""
    folder, paths = media
    clip = next(p for p in paths if p.name == "red-green-blue.mp4")
    with Searcher(tmp_path / "index", small_model("cosine")) as searcher:
        searcher.index([clip], progress=False, cues=())
        (r,) = searcher.search("a red car", k=5)
    scores = np.array([f.score for f in r.frames])
    times = np.array([f.t for f in r.frames])
    seg = np.minimum(times // 1.0, 2).astype(int)  # segments of 1 s
    within = max(np.ptp(scores[seg == s]) for s in range(3))
    between = np.ptp([scores[seg == s].mean() for s in range(3)])
    assert between > within  # the strip changes where the picture changes
    assert r.duration == pytest.approx(3.0, abs=0.15)


def test_reindex_add_change_delete(media, tmp_path):
    folder = tmp_path / "lib"
    shutil.copytree(media[0], folder)
    model = small_model("cosine")
    with Searcher(tmp_path / "index", model) as searcher:
        first = searcher.index([folder], progress=False, cues=())
        assert len(first.added) == 5
        ids = {r.path: r.id for r in searcher.catalog.videos()}
        again = searcher.index([folder], progress=False, cues=())
        assert len(again.unchanged) == 5 and not (again.added or again.updated or again.removed)

        changed = folder / "yellow.mp4"
        write_clip(changed, [((20, 20, 230), 1.0), ((230, 20, 20), 1.0)], seed=7)  # new content, same name
        (folder / "white-black.mp4").unlink()
        (folder / "sub").mkdir()
        write_clip(folder / "sub" / "new.mp4", [((0, 160, 0), 1.5)])
        report = searcher.index([folder], progress=False, cues=())
        assert report.added == [str(folder / "sub" / "new.mp4")]
        assert report.updated == [str(changed)]
        assert report.removed == [str(folder / "white-black.mp4")]
        assert len(report.unchanged) == 3 and not report.failed

        results = searcher.search("green grass in a field", k=100)
        paths = sorted(folder.rglob("*.*"))
        assert sorted(r.path for r in results) == [str(p) for p in paths]
        by_path = {r.path: r for r in results}
        assert by_path[str(changed)].id == ids[str(changed)]  # same id, new embedding
        ref, _ = reference_scores(model, "green grass in a field", [changed])
        assert by_path[str(changed)].score == pytest.approx(ref[0], abs=1e-4)
        assert len(by_path[str(changed)].frames) == 2  # 2 s sampled at 1 frame a second


def test_annotate_ranks_captions_like_brute_force(media, tmp_path):
    folder, paths = media
    for kind in ("cosine", "pairwise", "moe"):
        model = small_model(kind)
        clip = paths[0]
        with Searcher(tmp_path / kind, model) as searcher:
            fresh = searcher.annotate(clip, CAPTIONS)  # not indexed: decoded and embedded now
            searcher.index([clip], progress=False, cues=())
            stored = searcher.annotate(clip, CAPTIONS)  # indexed: stored embeddings
            by_id = searcher.annotate_id(searcher.catalog.find(clip), CAPTIONS)
        want = {c: reference(model, c, [clip])[0].whole for c in CAPTIONS}  # all frames as one video
        if kind in ("moe", "moe-mixed"):
            want = {c: sum(model.fusion.weights[k] * v for k, v in s.items()) for c, s in want.items()}
        assert [r["caption"] for r in fresh] == sorted(CAPTIONS, key=lambda c: -want[c])
        assert [r["score"] for r in fresh] == pytest.approx([want[r["caption"]] for r in fresh], abs=1e-4)
        tol = 2e-2 if kind == "pairwise" else 1e-5
        assert [r["score"] for r in stored] == pytest.approx(sorted((want[c] for c in CAPTIONS), reverse=True),
                                                             abs=tol)
        assert by_id == stored


def test_query_and_caption_validation(media, tmp_path):
    with Searcher(tmp_path / "index", small_model("cosine")) as searcher:
        assert searcher.search("anything", k=3) == []  # empty index
        searcher.index([media[1][0]], progress=False, cues=())
        for bad in ("", "   ", "x" * 1001):
            with pytest.raises(QueryError):
                searcher.search(bad, k=3)
        with pytest.raises(QueryError):
            searcher.search("a car", k=0)
        with pytest.raises(QueryError):
            searcher.annotate(media[1][0], ["", "  "])
        with pytest.raises(ReelsearchError, match="no such file"):
            searcher.annotate(tmp_path / "missing.mp4", ["a car"])
        broken = tmp_path / "broken.mp4"
        broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 100)
        with pytest.raises(ReelsearchError, match="broken.mp4"):
            searcher.annotate(broken, ["a car"])
        report = searcher.index([broken], progress=False, cues=())  # one bad file: reported, the rest stays
        assert [f[0] for f in report.failed] == [str(broken)]
        assert len(searcher.search("a car", k=5)) == 1


def test_another_model_needs_reindexing(media, tmp_path):
    folder, paths = media
    with Searcher(tmp_path / "index", small_model("cosine", seed=0)) as a:
        a.index(paths[:2], progress=False, cues=())
    with Searcher(tmp_path / "index", small_model("cosine", seed=1)) as b:
        assert b.stale()
        with pytest.raises(ReelsearchError, match="another model"):
            b.search("a red car", k=3)
        report = b.index(paths[:2], progress=False, cues=())
        assert len(report.updated) == 2 and not report.added and not b.stale()  # re-embedded: updated
        assert len(b.search("a red car", k=3)) == 2


def _msrvtt_captions(video_ids: list[str]) -> dict[str, list[str]]:
    archive = shared_path("msrvtt", "test_videodatainfo.json.zip")
    with zipfile.ZipFile(archive) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".json"))
        data = json.loads(zf.read(name))
    out: dict[str, list[str]] = {v: [] for v in video_ids}
    for s in data["sentences"]:
        if s["video_id"] in out:
            out[s["video_id"]].append(s["caption"])
    return out


def test_real_msrvtt_clips(tmp_path):
    clips = shared_path("msrvtt", "clips")
    paths = sorted(clips.glob("*.mp4"))
    captions = _msrvtt_captions([p.stem for p in paths])
    model = small_model("cosine", max_frames=8)
    with Searcher(tmp_path / "index", model) as searcher:
        report = searcher.index([clips], progress=False, cues=())
        assert len(report.added) == len(paths) == 2 and not report.failed
        query = captions[paths[0].stem][0]
        results = searcher.search(query, k=5)
        refs = reference(model, query, paths)
        ref = [f.score for f in refs]
        assert [r.path for r in results] == [str(paths[i]) for i in np.argsort(-np.array(ref), kind="stable")]
        for r in results:
            assert 0 <= r.moment <= r.duration
            i = [str(p) for p in paths].index(r.path)
            assert r.score == pytest.approx(ref[i], abs=1e-4)
            assert [f.score for f in r.frames] == pytest.approx(refs[i].frames.tolist(), abs=2e-2)
            # the recipe's cap (8) does not bound the index: 1 frame a second, the whole clip
            assert len(r.frames) == len(refs[i].times) > 8
            assert [f.t for f in r.frames] == pytest.approx(refs[i].times.tolist(), abs=1e-6)
        ranked = searcher.annotate(paths[0], captions[paths[0].stem] + captions[paths[1].stem])
    assert len(ranked) == 40 and ranked == sorted(ranked, key=lambda r: -r["score"])


def test_default_model_finds_the_right_msrvtt_clip(tmp_path):
    """With the bundled model (when present): each real clip's own captions rank it first more often than not."""
    from reelsearch.models.checkpoint import default_model_dir

    try:
        default_model_dir()
    except ReelsearchError as exc:
        pytest.skip(str(exc))
    clips = shared_path("msrvtt", "clips")
    paths = sorted(clips.glob("*.mp4"))
    captions = _msrvtt_captions([p.stem for p in paths])
    with Searcher(tmp_path / "index", "default") as searcher:
        searcher.index([clips], progress=False, cues=())
        hits = [searcher.search(c, k=1)[0].path == str(p) for p in paths for c in captions[p.stem]]
    assert np.mean(hits) > 0.5


def test_default_model_name_resolves_to_the_bundled_model():
    from reelsearch.models import load_model, resolve_checkpoint
    from reelsearch.models.checkpoint import default_model_dir

    try:
        directory = default_model_dir()
    except ReelsearchError as exc:
        assert "bundled default model is missing" in str(exc) and "--model" in str(exc)
        with pytest.raises(ReelsearchError, match="bundled default model"):
            load_model("default")
        return
    assert resolve_checkpoint("default") == directory
    assert directory.parts[-2:] == ("assets", "default-model")
