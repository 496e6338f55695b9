"""Phones' photos: HEIC / HEIF and AVIF files made from real Flickr8k photos are indexed through `reelsearch index` and
found through the HTTP API; a folder's other files are named once each (never skipped silently), and a file indexed
by name stays through later runs over its folder."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import shared_path
from reelsearch.cli.main import app
from reelsearch.search import Searcher
from reelsearch.service import create_app
from test_search_support import small_model

pillow_heif = pytest.importorskip("pillow_heif")
torch.set_num_threads(1)

#: The EXIF date written into the HEIC and AVIF copies (what `after:` / `before:` filter by).
TAKEN = "2021:06:05 10:00:00"


def _cli(*args) -> SimpleNamespace:
    """`reelsearch` run with ``args`` in this process (these tests are about what it indexes, not about a process):
    its exit status, stdout and stderr (its messages) as a finished process's."""
    res = CliRunner().invoke(app, [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=res.stderr)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """Two dev photos: the first as JPEG, HEIC and AVIF (with an EXIF date), the second as JPEG; a note and a copy
    of the second photo under a name no reader knows (.xyz); a small model."""
    from PIL import Image

    pillow_heif.register_heif_opener()
    images = shared_path("flickr8k", "images")
    names = shared_path("flickr8k", "dev.txt").read_text().split()[:2]
    root = tmp_path_factory.mktemp("phone")
    media = root / "media"
    media.mkdir()
    exif = Image.Exif()
    exif[306] = TAKEN
    with Image.open(images / names[0]) as first:
        first.save(media / "first.jpg")
        first.save(media / "first.heic", exif=exif.tobytes())
        first.save(media / "first.avif", exif=exif.tobytes())
    with Image.open(images / names[1]) as second:
        second.save(media / "second.jpg")
        second.save(media / "second-copy.xyz", format="JPEG")
    (media / "notes.txt").write_text("not a picture")
    model = small_model("cosine").save(root / "model")
    return root, media, model


def test_heic_and_avif_are_indexed_and_found(library):
    root, media, model = library
    index = root / "index"
    res = _cli("index", media, "--index", index, "--model", model, "--no-speech", "--no-ocr")
    assert res.returncode == 0, res.stderr
    assert "4 added, 0 updated, 0 removed, 0 unchanged, 0 failed, 2 skipped; 4 in" in res.stdout
    skipped = [line for line in res.stderr.splitlines() if line.startswith("skipped: ")]
    why = "not a photo, video or audio format reelsearch reads"
    assert skipped == [f"skipped: {media / 'notes.txt'}: {why}", f"skipped: {media / 'second-copy.xyz'}: {why}"]

    with Searcher(index, str(model)) as searcher, TestClient(create_app(searcher)) as client:
        ids = {Path(v.path).name: v.id for v in searcher.catalog.videos()}
        assert set(ids) == {"first.jpg", "first.heic", "first.avif", "second.jpg"}
        body = client.get("/search", params={"like": ids["first.jpg"], "k": 4}).json()
        names = [r["name"] for r in body["results"]]
        # the HEIC and AVIF copies decode to the JPEG's picture: closer to it than the other photo (the example itself
        # is left out)
        assert set(names[:2]) == {"first.heic", "first.avif"} and names[2:] == ["second.jpg"], names
        assert all(r["kind"] == "image" for r in body["results"])
        dated = client.get("/search", params={"q": "after:2021-06 before:2021-07", "k": 4}).json()
        assert sorted(r["name"] for r in dated["results"]) == ["first.avif", "first.heic"]  # their EXIF date


def test_a_file_indexed_by_name_stays_through_runs_over_its_folder(library):
    root, media, model = library
    index = root / "by-name"
    common = ["--index", index, "--model", model, "--no-speech", "--no-ocr", "--quiet"]
    assert _cli("index", media, *common).returncode == 0
    res = _cli("index", media / "second-copy.xyz", *common)
    assert res.returncode == 0 and "1 added" in res.stdout, res.stderr
    res = _cli("index", media, *common)
    assert res.returncode == 0, res.stderr
    assert "0 added, 0 updated, 0 removed, 5 unchanged, 0 failed, 1 skipped; 5 in" in res.stdout
    assert "second-copy.xyz" not in res.stderr  # indexed: not named as skipped
    (media / "second-copy.xyz").unlink()
    res = _cli("index", media, *common)
    assert "0 added, 0 updated, 1 removed, 4 unchanged, 0 failed, 1 skipped; 4 in" in res.stdout, res.stderr
