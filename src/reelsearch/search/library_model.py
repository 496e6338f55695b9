"""Which model a library's index uses: what ``Searcher.index`` records in the catalog's settings
(``Catalog.settings``: an index folder's ``searcher.json``, a PostgreSQL catalog's meta) and what a command opened
without ``--model`` loads.

The record is the model as the Searcher was given it: a name ("default": the bundled model; ``hf:`` and a hub id) as
it is, a model folder (a training run's, ``reelsearch distill-text``'s, ``hf:`` and a checkpoint folder) by its real
path. Beside it the catalog keeps the model's name and fingerprint in its rows' model id (``Searcher.model_id``:
``NAME@FINGERPRINT;RECIPE``). Reopened, a recorded folder is loaded while it exists (one whose weights changed since is
refused at the first search: the rows are another model's, ``Searcher.stale``). When it is gone, the bundled model is
loaded in its place if it has the folder's name (a model derived from the bundled one keeps its name and, with the
same weights, its fingerprint: the rows stay valid), with one warning naming the missing folder: what that folder
held beyond the bundled model (a student or static text encoder, a querybank or calibration of its own) is not used.
Another missing folder is an error naming it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from reelsearch.errors import ReelsearchError
from reelsearch.location import model_location
from reelsearch.models.query_model import DEFAULT_MODEL, bundled_model_dir

logger = logging.getLogger(__name__)


def model_record(model: str | os.PathLike | None) -> str | None:
    """The record of ``model`` as a Searcher was given it (None: a loaded model, whose origin is unknown): a name as
    it is, an existing folder by its real path (``reelsearch.location.model_location``), the bundled model's folder
    as "default" (where the package lives is not the library's business)."""
    if model is None:
        return None
    record = model_location(os.fspath(model))
    if record != DEFAULT_MODEL and _folder(record) == os.path.realpath(bundled_model_dir()):
        return DEFAULT_MODEL
    return record


def record_model(catalog, model: str | None, frames_per_second: float) -> None:
    """Remember in ``catalog`` the model its rows were just made with (``model_record``; None keeps what was
    recorded) and the frames sampled a second, where they changed (a sync calls this, holding the writer lock)."""
    before = catalog.settings()
    after = before | {"frames_per_second": frames_per_second} | ({} if model is None else {"model": model})
    if after != before:
        catalog.remember(after)


def index_model(catalog, model: str | None) -> str:
    """The model to open ``catalog`` with: ``model`` when given, else the recorded one (see the module docstring),
    else the bundled one. ReelsearchError when the recorded folder is gone and the bundled model is not of its
    name."""
    if model:
        return model
    record = catalog.settings().get("model") or DEFAULT_MODEL
    folder = _folder(record)
    if folder is None or Path(folder).exists():
        return record
    name = (catalog.model_id or "").partition("@")[0]
    if name and name == _bundled_name():
        logger.warning("%s: the index was made with the model folder %s, which no longer exists: searching with the "
                       "bundled model of the same name (%s) instead, without what that folder held beyond it (a "
                       "student or static text encoder, a querybank or calibration of its own); pass --model to "
                       "choose", catalog.location, folder, name)
        return DEFAULT_MODEL
    raise ReelsearchError(f"{catalog.location}: the index was made with the model folder {folder} (model "
                          f"{name or 'unknown'!r}), which no longer exists; pass --model MODEL")


def _folder(record: str) -> str | None:
    """The folder a model record names (an absolute path, also after ``hf:``), or None for a name."""
    path = record[3:] if record.startswith("hf:") else record
    return path if os.path.isabs(path) else None


def _bundled_name() -> str | None:
    """The bundled model's name (its manifest's), or None when this installation lacks it."""
    try:
        return json.loads((bundled_model_dir() / "reelsearch.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError):
        return None
