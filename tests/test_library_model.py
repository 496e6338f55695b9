"""Which model an index uses (``reelsearch.search.library_model``): the folder a Searcher indexed with is recorded
and reopened without ``--model``; a folder gone since falls back to the bundled model of its name with one warning."""

from __future__ import annotations

import logging
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from reelsearch.errors import ReelsearchError
from reelsearch.index import open_catalog
from reelsearch.indexing.index_folder import open_searcher
from reelsearch.models.query_model import bundled_model_dir
from reelsearch.search import Searcher
from reelsearch.search.library_model import _bundled_name, index_model, model_record
from reelsearch.service.server import serve_settings
from test_search_support import make_media, small_model

torch.set_num_threads(1)
MARKER = "a model folder of this test's own"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An index made through the Python API (no CLI) with a model folder named as the bundled model (as one made by
    ``reelsearch distill-text`` from it is) and a part of its own (a card with MARKER); (index, folder, image)."""
    root = tmp_path_factory.mktemp("library-model")
    image = [p for p in make_media(root / "media") if p.name == "stage.png"][0]
    model = small_model("moe")
    model.name, model.card = _bundled_name(), MARKER
    folder = model.save(root / "model")
    with Searcher(root / "index", str(folder)) as searcher:
        searcher.index([image], progress=False, cues=())
        fingerprint = searcher.model.fingerprint()
    return root / "index", folder, fingerprint


def test_an_index_reopens_with_the_model_folder_it_was_made_with(built):
    index, folder, fingerprint = built
    with open_catalog(index) as catalog:
        assert catalog.settings()["model"] == os.path.realpath(folder)
        assert catalog.model_id.startswith(f"{_bundled_name()}@{fingerprint};")
    with Searcher(index) as searcher:  # no model: the index's, not the bundled model of the same name
        assert searcher.model.card == MARKER and searcher.model.fingerprint() == fingerprint
        assert not searcher.stale() and searcher.model_source == os.path.realpath(folder)
    searcher, model = open_searcher(index, None)  # what `reelsearch search` / `duplicates` / `index` open
    with searcher:
        assert model == os.path.realpath(folder) and searcher.model.card == MARKER
    assert serve_settings(index, None)["model"] == os.path.realpath(folder)  # what `reelsearch serve` loads


def test_a_folder_gone_falls_back_to_the_bundled_model_of_its_name_with_one_warning(built, tmp_path, caplog):
    index, folder, _ = built
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    with open_catalog(copy) as catalog:
        catalog.remember(catalog.settings() | {"model": str(tmp_path / "gone")})
    with caplog.at_level(logging.WARNING, logger="reelsearch"):
        assert serve_settings(copy, None)["model"] == "default"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(tmp_path / "gone") in warnings[0] and "student" in warnings[0], warnings
    assert serve_settings(copy, str(folder))["model"] == str(folder)  # --model: no record read


def test_a_folder_changed_since_is_refused_at_the_first_search(built, tmp_path):
    """Retrained in place (other weights, the same name): the rows are another model's; the search says so."""
    index, _, fingerprint = built
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    model = small_model("moe", seed=1)
    model.name = _bundled_name()
    changed = model.save(tmp_path / "model")
    with open_catalog(copy) as catalog:
        catalog.remember(catalog.settings() | {"model": str(changed)})
    with Searcher(copy) as searcher:
        assert searcher.model_source == os.path.realpath(changed) and searcher.model.fingerprint() != fingerprint
        assert searcher.stale()
        with pytest.raises(ReelsearchError, match=f"another model .*{fingerprint}.*re-run `reelsearch index`"):
            searcher.search("a purple stage", 1)


def test_a_missing_folder_of_another_name_is_an_error_naming_it(tmp_path, caplog):
    gone = str(tmp_path / "gone")
    catalog = SimpleNamespace(settings=lambda: {"model": gone}, model_id="toy@0123456789ab;frames=1/s",
                              location=str(tmp_path / "index"))
    with pytest.raises(ReelsearchError, match=f"{tmp_path / 'index'}: .*model folder {gone} .*'toy'.*--model"):
        index_model(catalog, None)
    catalog.settings = lambda: {"model": "hf:" + gone}  # an hf: checkpoint folder alike
    with pytest.raises(ReelsearchError, match=f"model folder {gone} "):
        index_model(catalog, None)
    for record in ({}, {"model": "default"}, {"model": "hf:org/name"}):  # names: as they are
        catalog.settings = lambda r=record: r
        assert index_model(catalog, None) == record.get("model", "default")
    assert index_model(catalog, "other") == "other" and not caplog.records


def test_model_records(tmp_path, monkeypatch):
    """A folder by its real path (also reached by a relative path or a link), the bundled folder as "default", a
    name as it is, a loaded model (None) unknown."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "folder")
    monkeypatch.chdir(tmp_path)
    real = os.path.realpath(tmp_path / "folder")
    assert model_record("folder") == model_record(tmp_path / "link") == real
    assert model_record(bundled_model_dir()) == model_record("default") == "default"
    assert model_record("hf:org/name") == "hf:org/name" and model_record(None) is None
