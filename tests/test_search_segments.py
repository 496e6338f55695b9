"""Segments (issue 32): a generated slideshow of Flickr8k dev photos is indexed by time (1 frame a second, no cap),
cut into segments, and a caption of one of its photos finds that video first with its moment inside the photo's
time; a short clip of one shot is one segment; an index of another sampling re-embeds; on both catalogs."""

from __future__ import annotations

import pytest
import torch

from conftest import shared_path
from reelsearch.datasets.long_videos import LongVideo, Shot, write_video
from reelsearch.index import EmbeddedCatalog, PostgresCatalog
from reelsearch.search import Searcher
from reelsearch.search import example as example_module

torch.set_num_threads(1)

FLICKR = shared_path("flickr8k")
#: Distinct photos of Flickr8k dev with one of their captions each, shown for SHOWN s each (72 s in all: more frames
#: at 1 a second than the 64 of the default cap, and more than a minute).
PHOTOS, SHOWN = 6, 12.0


def _captions() -> dict[str, str]:
    dev = (FLICKR / "dev.txt").read_text().split()
    first: dict[str, str] = {}
    for line in (FLICKR / "captions.txt").read_text().splitlines():
        key, _, text = line.partition("\t")
        photo = key.split("#")[0]
        if photo in dev and photo not in first:
            first[photo] = text
    return {p[:-4]: first[p] for p in dev[:PHOTOS]}


@pytest.fixture(scope="module")
def slideshow(tmp_path_factory):
    """(folder, the video's truth, {photo: caption}): one 72-second 320x240 slideshow and one 3-second clip of one
    photo beside it."""
    captions = _captions()
    folder = tmp_path_factory.mktemp("slides")
    photos = list(captions)
    shots = tuple(Shot("photo", p, SHOWN, "cut" if i % 2 == 0 else "fade", 0.0 if i % 2 == 0 else 1.0)
                  for i, p in enumerate(photos))
    video = LongVideo("slideshow", shots, (320, 240), 10)
    write_video(video, folder, FLICKR / "images", threads=1)
    short = LongVideo("short", (Shot("photo", photos[0], 3.0),), (320, 240), 10)
    write_video(short, folder, FLICKR / "images", threads=1)
    return folder, video, captions


@pytest.fixture(scope="module", params=["embedded", "postgres"])
def indexed(request, slideshow, tmp_path_factory):
    """(searcher, its report of indexing the slideshow's folder): the folder indexed once per catalog (a database of
    the session's server, dropped after the module) for the tests that only search it."""
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    name = server.create_database() if server else None
    where = server.url(name) if server else tmp_path_factory.mktemp("index") / "index"
    with Searcher(where, "default") as searcher:
        yield searcher, searcher.index([slideshow[0]], progress=False, cues=())
    if server:
        server.drop_database(name)


def test_a_caption_finds_its_video_and_moment(slideshow, indexed):
    folder, video, captions = slideshow
    searcher, report = indexed
    assert len(report.added) == 2 and not report.failed and not report.warnings
    catalog = searcher.catalog
    ids = {p.rsplit("/", 1)[-1]: catalog.find(p) for p in report.added}
    segs = catalog.segments([ids["slideshow.mp4"], ids["short.mp4"]])
    assert len(segs[ids["short.mp4"]]) == 1  # a short clip of one shot is one segment
    cut = segs[ids["slideshow.mp4"]]
    assert PHOTOS <= len(cut) <= 2 * PHOTOS and cut.ends[-1] == pytest.approx(video.duration, abs=1.0)
    assert len(catalog.stored([ids["slideshow.mp4"]])[ids["slideshow.mp4"]].times) >= video.duration - 2 > 64  # 1/s,
    # not capped at the default 64 frames
    right = 0
    for shot, start in zip(video.shots, video.starts, strict=True):
        results = searcher.search(captions[shot.source], k=2, moments=2)
        hit = next(r for r in results if r.id == ids["slideshow.mp4"])
        assert hit.moments and len(hit.moments) == 2 and hit.moments[0].score >= hit.moments[1].score
        assert hit.score == pytest.approx(hit.moments[0].score, abs=1e-4)
        assert hit.moments[0].start <= hit.moment <= hit.moments[0].end
        right += start - 1.0 <= hit.moment <= start + shot.duration + 1.0
        assert "moments" in hit.to_json()
    assert right >= PHOTOS - 1  # the photo's own interval, for (nearly) every caption


def test_a_filter_ranks_the_videos_it_keeps_by_their_best_segment(slideshow, indexed):
    """A filter's exact scan of the kept videos' segments (with their biases) gives each kept video the score and
    moments the unfiltered search gives it; the video the filter drops is gone."""
    folder, video, captions = slideshow
    searcher, _ = indexed
    long_id = searcher.catalog.find(str(folder / "slideshow.mp4"))
    for caption in list(captions.values())[:3]:
        free = next(r for r in searcher.search(caption, k=2, moments=2) if r.id == long_id)
        kept = searcher.search(f"duration:>60 {caption}", k=2, moments=2)
        assert [r.id for r in kept] == [long_id]
        assert kept[0].score == pytest.approx(free.score, abs=1e-4)
        assert [(m.start, m.end) for m in kept[0].moments] == [(m.start, m.end) for m in free.moments]


@pytest.mark.parametrize("indexed", ["embedded"], indirect=True)
def test_a_clip_cut_from_the_long_video_finds_it_at_its_time(slideshow, indexed, tmp_path, monkeypatch):
    """``--like`` a clip of one of the slideshow's photos: the long video comes first with its moment in that photo's
    time, found by its best segment's score (its whole-video row, the mean of six photos, scores far lower), even
    when the first stage keeps one candidate."""
    folder, video, _ = slideshow
    shot, start = video.shots[3], video.starts[3]
    clip = write_video(LongVideo("cutout", (Shot("photo", shot.source, 8.0),), (320, 240), 10), tmp_path,
                       FLICKR / "images", threads=1)
    searcher, _ = indexed
    slides = searcher.catalog.find(folder / "slideshow.mp4")
    example = searcher.example(str(clip))
    source = example.source(searcher.catalog, searcher.visual)
    segs = searcher.catalog.segments([slides])[slides]
    assert source.scores([slides])[0] == pytest.approx(float((segs.rows @ example.row).max()), abs=1e-5)
    monkeypatch.setattr(example_module, "RESCORED", 1)
    hit = searcher.search(None, 1, like=str(clip))[0]
    assert hit.id == slides and start - 1.0 <= hit.moment <= start + shot.duration + 1.0


def test_an_index_of_another_sampling_re_embeds(slideshow, tmp_path):
    folder, _, _ = slideshow
    with Searcher(tmp_path / "index", "default") as searcher:
        searcher.index([folder / "short.mp4"], progress=False, cues=())
        model_id = searcher.model_id
        assert "frames=1/s" in model_id and "segments=kts:" in model_id
    with EmbeddedCatalog(tmp_path / "index") as lib:  # as an index of the 64-frame sampling left it
        with lib._transaction():
            lib._set_meta("model_id", model_id.replace(";frames=1/s", ""))
    with Searcher(tmp_path / "index", "default") as searcher:
        assert searcher.stale()
        report = searcher.index([folder / "short.mp4"], progress=False, cues=())
        assert len(report.updated) + len(report.added) == 1 and not searcher.stale()


def test_postgres_schema_6_is_migrated_to_segments(pg_url, slideshow):
    """A catalog of schema 6 (no video_segments) opens migrated: each video one segment of its row and bias."""
    from reelsearch.index.pg.database import Database
    from reelsearch.index.pg.schema import MIGRATIONS

    segments_migration = 7  # video_segments; it and those after it are applied again
    assert MIGRATIONS[segments_migration - 1][2].__name__ == "_v7"

    folder, _, _ = slideshow
    with Searcher(pg_url, "default") as searcher:
        searcher.index([folder / "short.mp4"], progress=False, cues=())
        vid = searcher.catalog.find(folder / "short.mp4")
        row = searcher.catalog.rows([vid])[0]
    db = Database(pg_url)
    with db.transaction():
        db.execute("DROP TABLE video_segments")
        db.execute("DELETE FROM schema_version WHERE version >= ?", (segments_migration,))
    db.close()
    with PostgresCatalog(pg_url) as lib:
        segs = lib.segments([vid])[vid]
        assert len(segs) == 1 and segs.counts[0] == len(lib.stored([vid])[vid].times)
        assert abs(segs.rows[0] - row).max() < 1e-6
        ids, _ = lib.nearest_segments(row, 1)
        assert ids == [f"{vid}:0"]
