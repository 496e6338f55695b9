"""The PostgreSQL catalog's own behaviour (the functions it shares with the embedded index run in
test_index_library.py and test_textcues.py): versioned migrations, a newer schema and a missing extension refused
clearly, passwords never shown, a server restart mid-search (a clear error, then the next request succeeds), and
`index / search --db` through the CLI giving the same results as the embedded index."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cue_fixtures import HashEncoder, ScriptedExtractor
from reelsearch.cli.main import app
from reelsearch.errors import ConfigError
from reelsearch.index import EmbeddedCatalog, open_catalog
from reelsearch.index.catalog import CatalogUnavailable
from reelsearch.index.pg import LATEST, PostgresCatalog, SchemaError, hnsw, masked
from reelsearch.index.pg.database import Database
from reelsearch.index.pg.hnsw import MAX_EF_SEARCH, rows_ef, rows_graph
from reelsearch.index.pg.schema import schema_version
from test_index_library import FakeEmbedder, folder  # noqa: F401  (a fixture)
from test_search_support import CAPTIONS, cli_indexed

torch.set_num_threads(1)


def test_migrations_are_versioned_and_applied_once(pg_url):
    with PostgresCatalog(pg_url) as lib:
        assert lib.schema == LATEST
        rows = lib._db.execute("SELECT version, description FROM schema_version ORDER BY version").fetchall()
        assert [r[0] for r in rows] == list(range(1, LATEST + 1)) and all(r[1] for r in rows)
    with PostgresCatalog(pg_url) as again:  # a second open finds the schema current and changes nothing
        assert again._db.execute("SELECT count(*) FROM schema_version").fetchone()[0] == LATEST


def test_a_newer_schema_is_refused(pg_url):
    with PostgresCatalog(pg_url) as lib:
        lib._db.execute("INSERT INTO schema_version (version, description) VALUES (?, 'from the future')",
                        (LATEST + 1,))
    with pytest.raises(SchemaError, match=f"schema version {LATEST + 1}, written by a newer reelsearch"):
        PostgresCatalog(pg_url)


def test_a_missing_extension_is_a_clear_error(pg_server):
    """A user who may not create the vector extension, on a database without it: one error saying what is missing
    and who can add it."""
    pg_server.sql("DO $$ BEGIN CREATE ROLE plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    name = pg_server.create_database(owner="plain")
    try:
        with pytest.raises(SchemaError, match=r"the vector extension \(pgvector.*\) is missing and this user cannot "
                                              r"create it .*CREATE EXTENSION vector"):
            PostgresCatalog(pg_server.url(name, user="plain"))
    finally:
        pg_server.drop_database(name)


def test_passwords_are_never_shown(pg_server):
    url = pg_server.url("no_such_database", password="s3cret-pw")
    assert masked(url).count("***") == 1 and "s3cret-pw" not in masked(url)
    assert masked("postgresql://u@h/db?password=s3cret-pw") == "postgresql://u@h/db?password=***"
    with pytest.raises(CatalogUnavailable) as info:
        PostgresCatalog(url)
    assert "s3cret-pw" not in str(info.value) and "***" in str(info.value)
    assert "no_such_database" in str(info.value)


def test_a_server_restart_mid_search_is_a_clear_error_then_recovers(pg_server, pg_url, folder):  # noqa: F811
    lib = open_catalog(pg_url)
    try:
        lib.sync([folder], FakeEmbedder(), progress=False)
        q = lib.rows(lib.ids()[:1])[0]
        before = lib.nearest(q, 3)
        pg_server.stop()
        try:
            with pytest.raises(CatalogUnavailable, match="lost the connection|cannot connect"):
                lib.nearest(q, 3)
        finally:
            pg_server.start()
        after = lib.nearest(q, 3)  # the next request connects again
        assert after[0] == before[0]
        np.testing.assert_allclose(after[1], before[1])
    finally:
        lib.close()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """(media folder, an embedded index of it built through the CLI, the model)."""
    root = tmp_path_factory.mktemp("embedded")
    model_dir = cli_indexed(root)
    return root / "media", root / "index", model_dir


NO_CUES = ["--quiet", "--no-speech", "--no-ocr"]


def same_search(runner, a: list[str], b: list[str]) -> None:
    """Every caption finds the same files with the same scores and moments through ``a`` and ``b``."""
    for caption in CAPTIONS:
        got = [json.loads(runner.invoke(app, ["search", caption, *where, "-k", "5", "--json"]).stdout)
               for where in (a, b)]
        assert [r["path"] for r in got[1]] == [r["path"] for r in got[0]]
        np.testing.assert_allclose([r["score"] for r in got[1]], [r["score"] for r in got[0]], atol=1e-5)
        assert [r["moment"] for r in got[1]] == [r["moment"] for r in got[0]]


def test_index_and_search_with_db_give_the_embedded_results(embedded, pg_url, monkeypatch):
    media, index, model_dir = embedded
    runner = CliRunner()
    monkeypatch.setenv("REELSEARCH_DB", pg_url)  # the same as --db when no --index is given
    res = runner.invoke(app, ["index", str(media), "--model", str(model_dir), *NO_CUES])
    assert res.exit_code == 0, res.output
    assert f"5 added, 0 updated, 0 removed, 0 unchanged, 0 failed; 5 in {masked(pg_url)}" in res.output
    same_search(runner, ["--index", str(index)], ["--db", pg_url])
    same_search(runner, ["--index", str(index)], [])
    both = runner.invoke(app, ["search", "x", "--index", str(index), "--db", pg_url])
    assert isinstance(both.exception, ConfigError) and "not both" in str(both.exception)  # exit status 2


def test_migrate_an_embedded_index_without_extracting_anything(embedded, pg_url, monkeypatch):
    """`index --from DIR --db URL` copies everything (the model is not even loaded: every embedder fails) and search
    answers exactly as before."""
    media, index, model_dir = embedded
    runner = CliRunner()
    monkeypatch.setattr("reelsearch.search.embed.MediaEmbedder.__call__", lambda *a: pytest.fail("re-extracted"))
    res = runner.invoke(app, ["index", "--from", str(index), "--db", pg_url, "--quiet"])
    assert res.exit_code == 0, res.output
    assert f"5 added, 0 updated, 0 removed, 0 unchanged, 0 failed; 5 in {masked(pg_url)}" in res.output
    same_search(runner, ["--index", str(index)], ["--db", pg_url])
    again = runner.invoke(app, ["index", "--from", str(index), "--db", pg_url, "--quiet"])
    assert "0 added, 0 updated, 0 removed, 5 unchanged" in again.output  # a second copy changes nothing


def test_migrate_carries_the_text_cues(tmp_path, pg_url, folder):  # noqa: F811
    """The speech / on-screen-text segments are copied with their embeddings: the same scores on both."""
    corpus = {}
    with EmbeddedCatalog(tmp_path / "idx") as lib:
        lib.sync([folder], FakeEmbedder(), progress=False)
        for i, record in enumerate(lib.videos()):
            corpus[record.id] = {"speech": [f"a dog runs on the beach {i}", "the weather is fine"],
                                 "ocr": [f"BREAKINGNEWS {i}"]}
        cues = lib.text_cues(HashEncoder(), create=True)
        cues.update([(v, v, lib.contents()[v]) for v in corpus], ScriptedExtractor(corpus), progress=False)
        with open_catalog(pg_url) as shared:
            shared.copy_from(lib, progress=False)
            copied = shared.text_cues(HashEncoder())
            by_path = {r.path: r.id for r in shared.videos()}
            ids = {r.id: by_path[r.path] for r in lib.videos()}
            for query in ("dog beach", "weather", "news", "breaking"):
                a, b = cues.scores(query), copied.scores(query, [ids[v] for v in cues.video_ids()])
                for cue in ("speech", "ocr"):
                    np.testing.assert_allclose(b.keyword[cue], a.keyword[cue], atol=1e-6)
                    np.testing.assert_allclose(b.semantic[cue], a.semantic[cue], atol=1e-6)
            assert sum(len(copied.segments(v)) for v in copied.video_ids()) == 3 * len(corpus)
        cues.close()


def test_schema_version_of_an_empty_database(pg_url):
    db = Database(pg_url)
    try:
        assert schema_version(db) == 0
    finally:
        db.close()




def test_hnsw_search_uses_a_halfvec_index_of_rows_and_biases_and_float32_scores(pg_url, tmp_path):
    """Above ``threshold`` the catalog searches its HNSW index over [vector, bias] cast to halfvec (float16) and
    returns the candidates' float32 inner products (+ bias when asked), best first: the ids and scores (to 1e-6, far
    below float16's error) of a brute-force scan of the stored vectors and biases. Migration 4 replaces a schema-3
    index over ``vector`` with a halfvec one and migration 6 that with the one over [vector, bias], keeping its M and
    efConstruction."""
    from reelsearch.index.pg.copy import vector_recv
    from reelsearch.index.pg.schema import MIGRATIONS
    from test_index_library import FakeEmbedder, write_png

    for i in range(40):
        write_png(tmp_path / "media" / f"img{i:02d}.png", seed=100 + i)
    queries = np.random.default_rng(7).standard_normal((6, 8)).astype(np.float32)

    def check(lib) -> None:
        ids = lib.ids()
        x, bias = lib.rows(ids), lib.biases(ids)
        assert np.ptp(bias) > 0.1  # the biases differ: they can reorder
        for biased in (False, True):
            found, scores = lib.nearest_many(queries, 10, biased=biased)
            for q, got, score in zip(queries, found, scores, strict=True):
                brute = x @ q + (bias if biased else 0.0)
                best = np.argsort(-brute)[:10]
                assert got == [ids[i] for i in best]
                np.testing.assert_allclose(score, brute[best], rtol=0, atol=1e-6)
        with lib._db.transaction():  # the query can be served by the index (the planner picks it at scale)
            lib._db.execute("SET LOCAL enable_seqscan = off")
            plan = lib._db.execute("EXPLAIN " + lib.nearest_sql(8, exact=False, biased=True, n=10),
                                   (vector_recv(np.eye(8)[0]), vector_recv(np.eye(9)[0] + np.eye(9)[8])),
                                   binary=True)
            assert "videos_hnsw" in "\n".join(r[0] for r in plan)

    def index_definition(lib) -> str:
        return lib._db.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'videos_hnsw'").fetchone()[0]

    migrations = {n: apply for n, _, apply in MIGRATIONS}
    with PostgresCatalog(pg_url, threshold=0, hnsw_m=8, ef_construction=32) as lib:
        lib.sync([tmp_path / "media"], FakeEmbedder(biased=True), progress=False)
        folded = "(vector || (ARRAY[bias])::vector))::halfvec(9)"
        assert folded in index_definition(lib) and "halfvec_ip_ops" in index_definition(lib)
        check(lib)
        lib._db.execute("DROP INDEX videos_hnsw")  # as schema 3 made it
        lib._db.execute("CREATE INDEX videos_hnsw ON videos USING hnsw (vector vector_ip_ops) WITH (m = 12, "
                        "ef_construction = 40)")
        migrations[4](lib._db)
        definition = index_definition(lib)
        assert "(vector)::halfvec(8)" in definition and "m='12'" in definition and "ef_construction='40'" in definition
        migrations[6](lib._db)
        definition = index_definition(lib)
        assert folded in definition and "m='12'" in definition and "ef_construction='40'" in definition
        check(lib)


def test_a_pgvector_without_halfvec_is_a_clear_error(pg_url, monkeypatch):
    from reelsearch.index.pg import schema

    monkeypatch.setattr(schema, "PGVECTOR_MIN", (99, 0))  # the server's pgvector (0.8) as if older than needed
    with pytest.raises(SchemaError, match=r"pgvector 0\.\d+\.\d+ is too old: reelsearch needs 99\.0 or later "
                                          r"\(halfvec\): .*ALTER EXTENSION vector UPDATE"):
        PostgresCatalog(pg_url)


def test_the_segments_query_keeps_as_many_candidates_per_video_as_the_videos_query(pg_url, folder):  # noqa: F811
    """The segments' HNSW search runs at ``ef_search`` times the segments per video (a video's segments crowd the
    candidate list; docs/benchmarks.md), or at ``segment_ef_search`` when set; the videos' at ``ef_search``."""

    class TwoSegments(FakeEmbedder):
        def __call__(self, path):
            media = super().__call__(path)
            media.segment_vectors, media.segment_biases = media.frame_vectors[[0, 2]], np.zeros(2)
            media.segment_frames, media.segment_times = np.array([[0, 2], [2, 4]]), np.array([[0.0, 1.0], [1.0, 2.0]])
            return media

    with PostgresCatalog(pg_url, threshold=0, ef_search=40) as lib:
        lib.sync([folder], TwoSegments(), progress=False)
        assert lib.segment_count() == 12 and lib.segments_ef() == 80
        said = []

        def ef_search() -> None:  # the session's setting, as the server holds it after a search
            said.append(lib._db.execute("SHOW hnsw.ef_search").fetchone()[0])

        q = np.random.default_rng(5).standard_normal(8).astype(np.float32)
        keys, _ = lib.nearest_segments(q, 5)
        ef_search()
        lib.nearest(q, 5)
        ef_search()
        lib.segment_ef_search = 300
        assert lib.nearest_segments(q, 5)[0] == keys
        ef_search()
        assert said == ["80", "40", "300"]
        rows = np.concatenate([lib.segments([v])[v].rows for v in lib.ids()])
        every = [f"{v}:{o}" for v in lib.ids() for o in range(2)]
        assert keys == [every[i] for i in np.argsort(-(rows @ q))[:5]]


def test_ef_search_grows_with_the_rows_and_the_candidates_asked_for():
    """``rows_ef``: 128 up to 100,000 rows, then growing as a power of the rows (a larger graph hides the best rows
    deeper: recall@10 0.985 at 100,000 rows but 0.843 at 1,000,000 with 128; docs/benchmarks.md) to pgvector's most,
    1,000, at about 1,000,000; never fewer than the candidates asked for."""
    assert [rows_ef(rows, 10) for rows in (0, 20_000, 100_000)] == [128, 128, 128]
    grown = [rows_ef(rows, 10) for rows in (150_000, 200_000, 300_000, 500_000, 700_000)]
    assert grown == sorted(set(grown)) and 128 < grown[0] and grown[-1] < MAX_EF_SEARCH
    assert rows_ef(300_000, 10) == 345  # 128 x 3 ^ 0.9 = 344.9, rounded up
    assert rows_ef(1_000_000, 10) == rows_ef(10_000_000, 10) == MAX_EF_SEARCH
    assert rows_ef(20_000, 300) == 300 and rows_ef(20_000, 5000) == MAX_EF_SEARCH  # more than 1,000: a scan
    assert rows_graph(0) == rows_graph(499_999) == (16, 64) and rows_graph(500_000) == rows_graph(10**7) == (24, 128)


def test_ef_search_is_the_catalogs_the_users_setting_or_the_rows(pg_server, pg_url, folder, monkeypatch):  # noqa: F811
    """The graph is built as ``rows_graph`` of its rows says. The videos' query runs at ``ef_search`` when given; else
    at the session's ``hnsw.ef_search`` when the user set one (here the database's: ``ALTER DATABASE``; a role's or
    the URL's ``options`` alike); else at ``rows_ef`` of the videos."""
    q = np.random.default_rng(5).standard_normal(8).astype(np.float32)

    def searched(lib) -> str:  # the session's setting, as the server holds it after a search
        lib.nearest(q, 5)
        return lib._db.execute("SHOW hnsw.ef_search").fetchone()[0]

    def graph(lib) -> str:
        return lib._db.execute("SELECT reloptions::text FROM pg_class WHERE relname = 'videos_hnsw'").fetchone()[0]

    monkeypatch.setattr(hnsw, "GRAPH_ROWS", 6)  # these six videos built as a large catalog's graph
    with PostgresCatalog(pg_url, threshold=0) as lib:
        lib.sync([folder], FakeEmbedder(), progress=False)
        assert graph(lib) == "{m=24,ef_construction=128}"
        assert searched(lib) == "128" and lib.segments_ef() == 128
        lib.row_count = lambda: 1_000_000  # as if a million videos: pgvector's most
        assert lib.videos_ef() == MAX_EF_SEARCH and lib.videos_ef(20) == rows_ef(1_000_000, 20)
        name = lib._db.execute("SELECT current_database()").fetchone()[0]
    pg_server.sql(f"ALTER DATABASE {name} SET hnsw.ef_search = 77")
    with PostgresCatalog(pg_url, threshold=0) as lib:
        assert searched(lib) == "77" and lib.videos_ef(300) == 300
    with PostgresCatalog(pg_url, threshold=0, ef_search=50) as lib:
        assert searched(lib) == "50"
