"""`reelsearch index PATH --db URL --ray ADDRESS --workers N` (issue 23, point 3): a Ray cluster of two local nodes
(one CPU each, offline) runs two cooperating index workers, one per node, through the CLI over a folder of real
encoded clips and images and one broken file: every file indexed exactly once (one ``index_log`` row each), the
broken one reported once, the summary the sum of the workers', and search over the catalog gives the same results
as an embedded index of the same folder. `--ray` without a database is a clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import psycopg
import pytest
from typer.testing import CliRunner

from in_process import cli_here
from reelsearch.cli.main import app
from reelsearch.errors import ConfigError
from reelsearch.indexing.index_ray import index_on_ray
from test_search_support import CAPTIONS, make_media, small_model, write_image

ray_cluster_utils = pytest.importorskip("ray.cluster_utils", reason="the ray extra (a dev dependency) is missing")
SRC = Path(__file__).resolve().parents[1] / "src"
NO_CUES = ["--quiet", "--no-speech", "--no-ocr"]


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node, one CPU each, whose workers import this checkout's reelsearch."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), *([saved] if saved else [])])
    try:
        c = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield c
    finally:
        c.shutdown()


def test_two_ray_workers_on_two_nodes_index_every_file_exactly_once(cluster, pg_url, tmp_path):
    media = tmp_path / "media"
    files = make_media(media)
    files += [write_image(media / f"extra{i}.png", (25 * i, 200 - 15 * i, 60 + 10 * i), seed=10 + i) for i in range(5)]
    (media / "broken.jpg").write_bytes(b"not a picture")
    model_dir = small_model("cosine").save(tmp_path / "model")
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
    env.pop("REELSEARCH_DB", None)
    res = subprocess.run([sys.executable, "-m", "reelsearch", "index", "media", "--db", pg_url, "--model", "model",
                          "--ray", cluster.address, "--workers", "2", *NO_CUES],  # relative: the tasks' cwd is Ray's
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 3, res.stderr  # the broken file failed, the rest is indexed
    n = len(files)
    assert f"{n} added, 0 updated, 0 removed, 0 unchanged, 1 failed; {n} in " in res.stdout  # the workers' sum
    assert "2 Ray workers on 2 nodes" in res.stdout
    failed = [line for line in res.stderr.splitlines() if line.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith(f"failed: {media / 'broken.jpg'}: "), res.stderr

    with psycopg.connect(pg_url, autocommit=True) as conn:
        logged = dict(conn.execute("SELECT path, count(*) FROM index_log GROUP BY path").fetchall())
        videos = {bytes(r[0]) for r in conn.execute("SELECT path FROM videos")}
        claims = [bytes(r[0]) for r in conn.execute("SELECT path FROM claims")]
    want = {os.fsencode(str(p)) for p in files}
    assert videos == want and {bytes(p) for p in logged} == want and set(logged.values()) == {1}
    assert claims == [os.fsencode(str(media / "broken.jpg"))]  # its problem kept for the lease; nothing else held

    runner = CliRunner()
    embedded = runner.invoke(app, ["index", str(media), "--index", str(tmp_path / "index"), "--model", str(model_dir),
                                   *NO_CUES])
    assert embedded.exit_code == 3, embedded.output
    for caption in CAPTIONS:
        got = [json.loads(runner.invoke(app, ["search", caption, *where, "-k", "20", "--json"]).stdout)
               for where in (["--db", pg_url], ["--index", str(tmp_path / "index")])]
        assert sorted(r["path"] for r in got[0]) == sorted(str(p) for p in files)
        assert [r["path"] for r in got[0]] == [r["path"] for r in got[1]]
        np.testing.assert_allclose([r["score"] for r in got[0]], [r["score"] for r in got[1]], atol=1e-5)


def test_ray_without_a_database_or_a_cluster_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("REELSEARCH_DB", raising=False)
    res = cli_here("index", tmp_path, "--index", tmp_path / "ix", "--ray", "auto", *NO_CUES)
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: --ray needs a PostgreSQL catalog (--db postgresql://... or REELSEARCH_DB)")
    with pytest.raises(ConfigError, match=r"^--ray 127\.0\.0\.1:1: no Ray cluster answers there \(Connection "):
        index_on_ray([tmp_path], "127.0.0.1:1", db="postgresql://u@/db?host=/nonexistent")  # at once, not after minutes
    res = CliRunner().invoke(app, ["index", str(tmp_path), "--workers", "2", *NO_CUES])
    assert res.exit_code == 2 and "goes with --ray" in res.output
