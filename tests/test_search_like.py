"""Query by example (``Searcher.search(like=...)``) on real encoded media: scores checked against a brute-force loop
over every video's stored frames, the example's own file (same id, same bytes) left out, a rescaled copy found first,
text and example fused by the one fusion, and clear errors for bad examples."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from reelsearch.datasets.variants import Variant, make_variant
from reelsearch.errors import ReelsearchError
from reelsearch.index.pg import PostgresCatalog
from reelsearch.search import Searcher
from reelsearch.search.example import ExampleError
from reelsearch.search.frames import DETAIL_FLOOR
from test_search_support import make_media, small_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("like")
    paths = {p.name: p for p in make_media(root / "media")}
    clip = paths["red-green-blue.mp4"]
    make_variant(clip, root / "media" / "rgb-small.mp4", Variant("rescale", 0.5))
    shutil.copyfile(paths["yellow.mp4"], root / "media" / "yellow-copy.mp4")  # same bytes
    with Searcher(root / "index", small_model("cosine")) as searcher:
        searcher.index([root / "media"], progress=False, cues=())
        ids = {p.name: searcher.catalog.find(p) for p in (root / "media").iterdir()}
        yield searcher, root / "media", ids


@pytest.fixture(scope="module")
def pg_library(library, pg_server):
    """The same library copied into a PostgreSQL catalog (``copy_from``: nothing embedded again)."""
    searcher, media, _ = library
    name = pg_server.create_database()
    url = pg_server.url(name)
    with PostgresCatalog(url) as catalog:
        catalog.copy_from(searcher.catalog, progress=False)
    with Searcher(url, searcher.model) as pg:
        yield pg, media, {p.name: pg.catalog.find(p) for p in media.iterdir()}
    pg_server.drop_database(name)


def check_ranking(got, want: dict[str, float]) -> None:
    """``got`` is every video of ``want`` once, with its brute-force score, best first (ties in any order)."""
    assert sorted(r.id for r in got) == sorted(want)
    assert [r.score for r in got] == pytest.approx([want[r.id] for r in got], abs=1e-5)
    assert all(a.score >= b.score - 1e-9 for a, b in zip(got, got[1:]))


def _unit(rows):
    rows = np.asarray(rows, np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def brute_force(searcher, example_rows, example_detail) -> dict[str, float]:
    """{id: the mean over the example's informative frames of the best cosine with one of the video's frames} by
    loops over every stored video."""
    keep = [i for i, d in enumerate(example_detail) if d >= DETAIL_FLOOR] or list(range(len(example_rows)))
    ex = _unit(example_rows)
    out = {}
    for id_ in searcher.catalog.ids():
        rows = _unit(searcher.catalog.media(id_).frame_vectors)
        out[id_] = float(np.mean([max(float(ex[i] @ r) for r in rows) for i in keep]))
    return out


@pytest.mark.parametrize("catalog", ["library", "pg_library"])
def test_like_a_clip_ranks_by_frame_sequences_and_leaves_itself_out(catalog, request):
    searcher, media, ids = request.getfixturevalue(catalog)
    clip = media / "red-green-blue.mp4"
    got = searcher.search(None, 10, like=str(clip))
    stored = searcher.catalog.media(ids[clip.name])
    want = brute_force(searcher, stored.frame_vectors, stored.detail)
    del want[ids[clip.name]]
    check_ranking(got, want)
    assert got[0].id == ids["rgb-small.mp4"]  # the same footage at half the resolution comes first
    # the moment of each result is its frame that best matches one of the example's frames
    small = searcher.catalog.media(ids["rgb-small.mp4"])
    fs = _unit(small.frame_vectors) @ _unit(stored.frame_vectors).T
    assert got[0].moment == small.timestamps[int(np.argmax(fs.max(1)))]


def test_near_duplicates_are_the_same_on_postgresql(library, pg_library):
    """Near-duplicate detection (``Catalog.nearest_many``, frame detail, ``with_content``) finds the same groups in
    the PostgreSQL catalog as in the embedded index."""
    def groups(searcher):
        return sorted(sorted(v.path for v in g.videos) for g in searcher.duplicates())

    want = groups(library[0])
    assert want and groups(pg_library[0]) == want
    catalog, ids = pg_library[0].catalog, pg_library[2]
    assert catalog.with_content(catalog.video(ids["yellow.mp4"]).sha256) == \
        sorted([ids["yellow.mp4"], ids["yellow-copy.mp4"]], key=int)


def test_a_copy_with_the_same_bytes_is_left_out_too(library):
    searcher, media, ids = library
    got = [r.id for r in searcher.search(None, 10, like=str(media / "yellow.mp4"))]
    assert ids["yellow.mp4"] not in got and ids["yellow-copy.mp4"] not in got and len(got) == len(ids) - 2
    by_id = [r.id for r in searcher.search(None, 10, like=ids["yellow-copy.mp4"])]
    assert by_id == got


def test_like_one_moment_uses_that_frame(library):
    searcher, media, ids = library
    vid = ids["red-green-blue.mp4"]
    stored = searcher.catalog.media(vid)
    frame = int(np.argmin(np.abs(stored.timestamps - 1.4)))  # green
    want = brute_force(searcher, stored.frame_vectors[frame:frame + 1], [1.0])
    del want[vid]
    for like in (f"{vid}@1.4", f"{media / 'red-green-blue.mp4'}@1.4"):
        got = searcher.search(None, 10, like=like)
        check_ranking(got, want)


def test_an_unindexed_image_is_embedded_and_searched_with(library, tmp_path):
    searcher, media, ids = library
    outside = tmp_path / "sea-again.jpg"
    shutil.copyfile(media / "sea.jpg", outside)
    got = searcher.search(None, 10, like=str(outside))
    emb = searcher.embedder(str(outside))
    want = brute_force(searcher, emb.frame_vectors, emb.detail)
    del want[ids["sea.jpg"]]  # same content: left out
    check_ranking(got, want)


def test_text_and_example_are_fused(library):
    searcher, media, ids = library
    text = "a yellow flower"
    clip = media / "white-black.mp4"
    fused = searcher.search(text, 10, like=str(clip))
    alone = {r.id: r.score for r in searcher.search(text, 10)}
    like = {r.id: r.score for r in searcher.search(None, 10, like=str(clip))}
    assert set(r.id for r in fused) == set(like)
    for r in fused:  # weights visual 1, like 1 (DEFAULT_WEIGHTS)
        assert r.score == pytest.approx(alone[r.id] + like[r.id], abs=1e-5)
        assert r.experts == pytest.approx({"visual": alone[r.id], "like": like[r.id]}, abs=1e-5)
    assert [r.score for r in fused] == sorted((r.score for r in fused), reverse=True)
    half = searcher.search(text, 10, like=str(clip), weights="like=0.5")
    assert {r.id: r.score for r in half} == pytest.approx({i: alone[i] + 0.5 * like[i] for i in like}, abs=1e-5)


def test_bad_examples_are_clear_errors(library, tmp_path):
    searcher, media, ids = library
    with pytest.raises(ExampleError, match="nope.mp4: no such file"):
        searcher.search(None, 3, like=str(tmp_path / "nope.mp4"))
    with pytest.raises(ExampleError, match="no indexed video with id 4242"):
        searcher.search(None, 3, like="4242")
    with pytest.raises(ExampleError, match=r"99 s is outside the video \(0 to 3 s\)"):
        searcher.search(None, 3, like=f"{ids['red-green-blue.mp4']}@99")
    with pytest.raises(ExampleError, match="'x' is not a number of seconds"):
        searcher.search(None, 3, like=f"{ids['red-green-blue.mp4']}@x")
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\0" * 64)
    with pytest.raises(ReelsearchError, match="broken.mp4: not a readable media file"):
        searcher.search(None, 3, like=str(broken))
