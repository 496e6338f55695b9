"""A damaged embedded index is never a traceback (through the CLI): a lost or damaged vector file is rebuilt from
SQLite and search answers as before; a damaged ``library.sqlite`` (truncated, a page overwritten, not a database)
is one clear error naming the file, `index --check` says what is wrong, and `index --repair` keeps what is readable
and indexes the rest again, after which search answers as before."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from in_process import cli_here
from reelsearch.cli.main import app
from reelsearch.index import FaissIndex
from reelsearch.index.embedded.catalog import FAISS_NAME, SQLITE_NAME, EmbeddedCatalog
from test_search_support import CAPTIONS, make_media, small_model

torch.set_num_threads(1)
NO_CUES = ["--quiet", "--no-speech", "--no-ocr"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(media folder, a sound index, the model, search results of every caption on it)."""
    root = tmp_path_factory.mktemp("damage")
    make_media(root / "media")
    model_dir = small_model("cosine").save(root / "model")
    runner = CliRunner()
    res = runner.invoke(app, ["index", str(root / "media"), "--index", str(root / "index"), "--model",
                              str(model_dir), *NO_CUES])
    assert res.exit_code == 0, res.output
    return root / "media", root / "index", model_dir, {c: search(root / "index", c) for c in CAPTIONS}


def search(index, caption: str) -> list[tuple[str, float]]:
    res = CliRunner().invoke(app, ["search", caption, "--index", str(index), "-k", "10", "--json"])
    assert res.exit_code == 0, res.output
    return [(r["path"], r["score"]) for r in json.loads(res.stdout)]


def same_results(index, expected: dict) -> None:
    for caption, want in expected.items():
        got = search(index, caption)
        assert [p for p, _ in got] == [p for p, _ in want], caption
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-5)


def run_cli(args: list[str]) -> tuple[int, str]:
    """(exit status, stdout + stderr) of `reelsearch ARGS` run in this process (tests/in_process.py)."""
    res = cli_here(*args)
    return res.returncode, res.stdout + res.stderr


@pytest.fixture
def copy(built, tmp_path):
    media, index, _, expected = built
    shutil.copytree(index, tmp_path / "index")
    return media, tmp_path / "index", expected


@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbage", "emptied", "older"])
def test_a_damaged_vector_file_is_rebuilt(copy, damage):
    """Also one of an older reelsearch: the rows alone, D wide, where the index now holds [row, bias]."""
    media, index, expected = copy
    path = index / FAISS_NAME
    data = path.read_bytes()
    if damage == "older":
        with EmbeddedCatalog(index) as lib:
            ids = lib.ids()
            rows, dim = lib.rows(ids), lib.dim
        path.unlink()
        older = FaissIndex(dim, path)
        older.add(ids, rows)
        older.save()
        assert FaissIndex(dim, path).get(ids).shape == (len(ids), dim)
    elif damage == "deleted":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(len(data)))
    else:
        path.write_bytes(b"")
    same_results(index, expected)
    assert CliRunner().invoke(app, ["index", "--check", "--index", str(index)]).exit_code == 0


def damage_sqlite(path, how: str) -> None:
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 3]))
    elif how == "page":  # the second page (the first table's root) overwritten with noise
        data[page: 2 * page] = np.random.default_rng(1).bytes(page)
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(b"these are not the bytes of a SQLite database\n" * 200)


@pytest.mark.parametrize("how", ["truncated", "page", "garbage"])
def test_a_damaged_catalog_is_a_clear_error_then_repaired(copy, how):
    media, index, expected = copy
    damage_sqlite(index / SQLITE_NAME, how)
    for args in (["search", CAPTIONS[0], "--index", str(index)],
                 ["index", str(media), "--index", str(index), *NO_CUES]):
        code, out = run_cli(args)
        assert code == 2 and "Traceback" not in out, out
        assert out.startswith(f"error: {index / SQLITE_NAME}: the index is damaged") and out.count("\n") == 1, out
        assert f"reelsearch index --check --index {index}" in out and "--repair" in out
    code, out = run_cli(["index", "--check", "--index", str(index)])
    assert code == 2 and f"{index / SQLITE_NAME}: damaged" in out, out
    code, out = run_cli(["index", str(media), "--index", str(index), "--repair", *NO_CUES])
    assert code == 0, out
    assert "repaired:" in out and "5 in" in out
    assert (index / (SQLITE_NAME + ".damaged")).exists()
    assert run_cli(["index", "--check", "--index", str(index)])[0] == 0
    same_results(index, expected)


def test_repair_keeps_the_readable_videos(copy):
    """The last page lost (a thumbnail written last: its end reads back as garbage): the videos whose rows are intact
    are kept, not embedded again; the others are indexed again from their files; search answers as before."""
    media, index, expected = copy
    path = index / SQLITE_NAME
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    last = len(data) // page - 1
    data[last * page:] = np.random.default_rng(2).bytes(len(data) - last * page)
    path.write_bytes(bytes(data))
    code, out = run_cli(["index", str(media), "--index", str(index), "--repair", *NO_CUES])
    assert code == 0, out
    kept = int(out.split("repaired: ")[1].split(" videos kept")[0])
    added = int(out.split("\n")[1].split(" added")[0])
    assert kept + added == 5 and added >= 1 and kept >= 1, out
    same_results(index, expected)


def test_a_video_without_its_segments_is_found_by_check_and_indexed_again_by_repair(copy):
    """A video's segment rows deleted (the database itself sound): `index --check` names it, `--repair` leaves it out
    and the sync indexes its file again, with its segments; search answers as before."""
    media, index, expected = copy
    with EmbeddedCatalog(index) as lib:
        vid = lib.ids()[2]
        frames = len(lib.stored([vid])[vid].times)
        with lib._transaction() as db:
            db.execute("DELETE FROM video_segments WHERE video_id = ?", (int(vid),))
    code, out = run_cli(["index", "--check", "--index", str(index)])
    assert code == 2 and f"{index / SQLITE_NAME}: damaged: video {vid}: its segments cover 0 of its {frames} frames" \
        in out, out
    code, out = run_cli(["index", str(media), "--index", str(index), "--repair", *NO_CUES])
    assert code == 0 and "repaired: 4 videos kept, 1 unreadable" in out and "1 added" in out, out
    assert run_cli(["index", "--check", "--index", str(index)])[0] == 0
    with EmbeddedCatalog(index) as lib:
        segs, stored = lib.segments(lib.ids()), lib.stored(lib.ids())
        assert len(segs) == 5 and all(int(s.counts.sum()) == len(stored[i].times) for i, s in segs.items())
    same_results(index, expected)
