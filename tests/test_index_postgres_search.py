"""A search of the PostgreSQL catalog in one round trip: inside a search's snapshot, the nearest statement also reads
the found videos' paths, frames and segments (``PostgresCatalog.WITH_ROWS``), and the search gives what it gives
with a statement per read — on a library of one segment a video and on one of several, exact and by HNSW; a
Searcher's search of a library without text cues asks nothing of its own about them, and sees cues stored later."""

from __future__ import annotations

import numpy as np
import pytest

from cue_fixtures import HashEncoder
from reelsearch.features.cues import CueResult, CueSegment
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.pg.database import Database
from reelsearch.index.pg.hnsw import buffers_advice
from reelsearch.search import Searcher
from reelsearch.search import searcher as searcher_module
from test_index_library import search
from test_index_postgres_copy import DIM, library
from test_search_filters import _fake_embed
from test_search_support import small_model


def one_segment_each(n: int) -> list:
    """``library(n)`` with each video one segment of all its frames (a clip)."""
    out = []
    for change in library(n, seed=3):
        media = change.media
        if media.pictured:
            media.segment_vectors = media.segment_frames = media.segment_times = media.segment_biases = None
            media = media.checked(DIM)
        out.append(change._replace(media=media))
    return out


def described(results) -> str:
    """What a search returns, every field of every result (the same stored bytes read either way: equal)."""
    return repr(results)


def read(lib: PostgresCatalog, ids: list[str]) -> str:
    """``stored`` and ``segments`` of ``ids``, every field."""
    return repr([sorted(lib.stored(ids).items()), sorted(lib.segments(ids).items())])


@pytest.mark.parametrize("threshold", [0, 10**6], ids=["hnsw", "exact"])
@pytest.mark.parametrize("segments", ["several", "one"])
def test_a_search_reads_its_hits_frames_and_segments_in_one_statement(pg_url, monkeypatch, threshold, segments):
    changes = library(40, seed=5) if segments == "several" else one_segment_each(40)
    said: list[str] = []
    execute = Database.execute
    monkeypatch.setattr(Database, "execute",
                        lambda db, sql, params=(), **kw: said.append(sql) or execute(db, sql, params, **kw))
    with PostgresCatalog(pg_url, threshold=threshold) as lib:
        lib._commit(changes, [], "m")
        assert lib.several_segments() == (segments == "several")
        queries = np.random.default_rng(9).standard_normal((8, DIM)).astype(np.float32)
        detail = 0  # searches that found a video with its frames' detail measured
        for q in queries:
            apart = described(search(lib, q, 5))  # a statement per read
            ids = [r.id for r in search(lib, q, 5)]
            rows_apart = read(lib, ids)
            with lib.snapshot():
                said.clear()
                together = described(search(lib, q, 5))
                rows_together = read(lib, ids)  # what the one statement read of them
            assert rows_together == rows_apart
            detail += "detail=array(" in rows_apart
            assert together == apart and "moments=[Moment(" in together and together.count("SearchResult(") == 5
            reads = [s for s in said if not s.startswith(("SELECT 'meta', key, value FROM meta", "SELECT set_config"))]
            assert len(reads) == 1 and reads[0].startswith("WITH hits"), reads
        assert detail > 0


def test_the_nearest_statement_is_planned_once_and_answers_as_exact(pg_url, messages):
    """``n`` is in the nearest statement's text, not a parameter: after its first few executions the server keeps one
    plan of it (a generic plan, ``pg_prepared_statements``) instead of planning each search; the answers are the exact
    ones. The test server's shared_buffers hold the small graph: no advice logged."""
    changes = one_segment_each(60)
    queries = np.random.default_rng(11).standard_normal((30, DIM)).astype(np.float32)
    with PostgresCatalog(pg_url, threshold=10**6) as lib:
        lib._commit(changes, [], "m")
        exact = [search(lib, q, 5) for q in queries]
    messages()
    with PostgresCatalog(pg_url, threshold=0) as lib:
        assert [search(lib, q, 5) for q in queries] == exact
        plans = lib._db.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE "
                                "statement LIKE '%::halfvec%'").fetchall()
        assert plans and all("LIMIT $" not in s for s, _, _ in plans)
        # psycopg prepares a statement at its sixth execution, and the server's first five plans of it are custom
        assert sum(g for _, g, _ in plans) >= len(queries) - 10 > sum(c for _, _, c in plans)
    assert "shared_buffers" not in messages()


def test_the_advice_when_the_graphs_outgrow_shared_buffers():
    """Graphs larger than the server's shared_buffers: the advice names both sizes and a setting that holds the
    graphs with room (1.5 times, in whole GiB); none when they fit."""
    assert buffers_advice(100 << 20, 128 << 20) is None
    said = buffers_advice(260 << 20, 128 << 20)
    assert "(260 MiB)" in said and "(128 MiB)" in said and "shared_buffers = '1GB'" in said
    assert "shared_buffers = '4GB'" in buffers_advice(2600 << 20, 1 << 30)  # 3.8 GiB rounded up


def test_a_searcher_asks_nothing_of_its_own_about_text_cues_and_sees_those_stored_later(pg_url, tmp_path,
                                                                                        monkeypatch):
    """``Searcher.search`` and ``answer`` (what `serve` and the CLI run) of a library without text cues send two
    statements: the meta, which brings the text cues' generation along (``PostgresCatalog._meta``), and the nearest
    statement; whether the library has cues is asked once per text-cue generation (it was ``SELECT 1 FROM runs``
    twice a search). Speech that another connection stores afterwards moves that generation: the next search asks
    again and fuses it (its cue query encoded by the index stage), and the searches after it read the text cues'
    generation from the same meta statement."""
    monkeypatch.setattr(searcher_module, "sentence_encoder", HashEncoder())  # the cue queries' encoder (no MiniLM)
    media = tmp_path / "media"
    media.mkdir()
    for i in range(30):
        (media / f"v{i:02d}.mp4").write_bytes(b"clip %d" % i)
    said: list[str] = []
    execute = Database.execute
    monkeypatch.setattr(Database, "execute",
                        lambda db, sql, params=(), **kw: said.append(sql) or execute(db, sql, params, **kw))
    query = "preheat the oven to two hundred degrees"
    with Searcher(PostgresCatalog(pg_url), str(small_model("cosine").save(tmp_path / "model"))) as searcher:
        searcher.catalog.sync([media], _fake_embed(searcher.model.row_dim), model_id=searcher.model_id,
                              progress=False)
        first = searcher.answer(query, 5)  # (the first: the session's settings; whether there are cues)
        assert any("FROM runs" in s for s in said)
        for ask in (searcher.search, searcher.answer, searcher.search):
            said.clear()
            found = ask(query, 5)
            assert len(said) == 2 and said[0].startswith("SELECT 'meta', key, value FROM meta UNION ALL") and \
                said[1].startswith("WITH hits"), said
            assert [r.id for r in getattr(found, "results", found)] == [r.id for r in first.results]
        assert all(r.match is None and r.experts is None for r in first.results)

        target = first.results[-1].id  # its words said, stored by another process's connection
        with PostgresCatalog(pg_url) as other:
            cues = other.text_cues(HashEncoder(), create=True)
            cues.put(target, {"speech": CueResult("speech", [CueSegment("speech", 0.5, 3.0, query, 0.9)],
                                                  recipe="speech:test")}, other.video(target).sha256)
        said.clear()
        spoken = searcher.search(query, 5)
        assert any("FROM runs" in s for s in said)  # the text cues' generation moved: asked again
        assert spoken[0].id == target and spoken[0].match is not None and spoken[0].match.text == query
        assert spoken[0].experts["speech"] > 0 and spoken[0].match.cue == "speech"
        said.clear()
        assert [r.to_json() for r in searcher.search(query, 5)] == [r.to_json() for r in spoken]
        assert said[0].startswith("SELECT 'meta'") and not any("FROM runs" in s or "FROM cue_meta" in s
                                                               for s in said[1:]), said
