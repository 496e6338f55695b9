"""The model folder: one manifest (``reelsearch.json``) names every part of a saved model, each part saves and loads
itself, and this module alone writes (:func:`write_model`) and reads (:func:`read_model`) the folder.

    {"format": "reelsearch.model", "version": 1, "model": "mixture-of-experts", "name": "reelsearch-default",
     "parts": [{"kind": "config", "files": ["moe.json"]},
               {"kind": "expert", "name": "lite0", "files": ["experts/lite0"]},
               {"kind": "expert", "name": "lite2", "files": ["experts/lite2"]},
               {"kind": "querybank", "files": ["querybank.safetensors"]},
               {"kind": "calibration", "files": ["calibration.json"]},
               {"kind": "model-card", "files": ["MODEL_CARD.md"]}]}

A part (``reelsearch.models.parts``; ``QueryBank``; :class:`Expert`, a nested model folder) has a ``kind``,
``fields()`` (what its manifest entry records besides kind and files), ``save(directory) -> files`` and
``load(directory, entry)``. A model class registers its kind (:func:`model_kind`) and gives its own parts
(``model.parts()``: its config, weights, CNN tails, text tail, text encoder, or a mixture's experts) and is rebuilt
from them (``cls.from_parts(parts)``); the querybank (``model.querybank``), the fast text encoders
(``model.static_text``, ``model.student_text``), the confidence calibration (``model.calibration``; the student's
own, fitted on its scores, inside its part: ``student-text/calibration.json``) and the card (``model.card``) belong
to every model. A part its experts share alike (``SHARED_KINDS``: the tuned text tower they
run as one) a mixture holds once, beside them; their folders inside it leave it out and are handed the mixture's
when read.

Writing is atomic for the folder as a whole: the old manifest goes first, then every part, the config (the file an
earlier version's reader looks for) last of them, then the new manifest, so a folder is either complete or not a
model; files the old manifest named and the new one does not are removed after. A folder without a manifest was
written by an earlier version: ``legacy_folder`` lists its parts. A manifest of a newer format version is refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath
from typing import ClassVar, Protocol

import torch

from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.io import atomic_write_json

from .calibration import Calibration, read_json_object
from .legacy_folder import ROOT_FILES, is_legacy_folder, legacy_manifest
from .parts import CnnTail, ConfigPart, ModelCard, TextEncoder, TextTail, Weights
from .querybank import QueryBank
from .static_text import StaticText
from .student_text import StudentText

MANIFEST_FILE = "reelsearch.json"
FORMAT, VERSION = "reelsearch.model", 1
#: {model kind: class}, filled by :func:`model_kind`.
MODEL_KINDS: dict[str, type] = {}
#: Part kinds a mixture holds once when its experts hold the same one (the same bytes).
SHARED_KINDS = ("text-tail",)


class Part(Protocol):
    kind: ClassVar[str]

    def fields(self) -> dict: ...

    def save(self, directory: Path) -> list[str]: ...

    @classmethod
    def load(cls, directory: Path, entry: dict) -> Part: ...


def model_kind(name: str):
    """Class decorator: the model class that a manifest's ``"model": name`` is rebuilt by."""

    def register(cls):
        cls.folder_kind = name
        MODEL_KINDS[name] = cls
        return cls

    return register


class Expert:
    """One expert of a mixture: a model folder of its own in ``experts/<name>/``, complete but for the parts of
    ``shared_kinds`` (the mixture's, handed to it when read)."""

    kind: ClassVar[str] = "expert"

    def __init__(self, name: str, model, shared_kinds: tuple[str, ...] = ()):
        self.name, self.model, self.shared_kinds = name, model, shared_kinds

    def fields(self) -> dict:
        return {"name": self.name}

    def save(self, directory: Path) -> list[str]:
        path = f"experts/{self.name}"
        write_model(self.model, Path(directory) / path, leave_out=self.shared_kinds)
        return [path]

    @classmethod
    def load(cls, directory: Path, entry: dict, shared: list | tuple = ()) -> Expert:
        return cls(entry.get("name", ""), read_model(Path(directory) / entry["files"][0], shared=shared))


PART_KINDS: dict[str, type] = {c.kind: c for c in (ConfigPart, Weights, CnnTail, TextTail, TextEncoder, QueryBank,
                                                   StaticText, StudentText, ModelCard, Expert, Calibration)}
#: The parts every model may have, by attribute (``model.querybank``, ...) and part kind; the calibration's check
#: reads the querybank: after it.
MODEL_PARTS = {"querybank": QueryBank.kind, "static_text": StaticText.kind, "student_text": StudentText.kind,
               "calibration": Calibration.kind}


def shared_parts(models) -> list:
    """The parts of ``SHARED_KINDS`` that every one of ``models`` holding one holds alike (the same digest): what a
    mixture of them writes once (none when they differ: each expert keeps its own)."""
    found = [p for m in models for p in m.parts() if p.kind in SHARED_KINDS]
    out = []
    for kind in SHARED_KINDS:
        same = [p for p in found if p.kind == kind]
        if same and len({p.identity for p in same}) == 1:
            out.append(same[0])
    return out


class Parts:
    """The loaded parts of one folder, by kind, for ``from_parts``; ``manifest`` names the folder in errors;
    ``shared``: the parts its mixture hands it (used where the folder has none of that kind)."""

    def __init__(self, manifest: Path, loaded: list[tuple[dict, Part]], shared: list | tuple = ()):
        self.manifest, self._loaded, self.shared = manifest, loaded, list(shared)

    def all(self, kind: str) -> list:
        return [part for entry, part in self._loaded if entry["kind"] == kind]

    def optional(self, kind: str):
        found = self.all(kind) or [p for p in self.shared if p.kind == kind]
        if len(found) > 1:
            raise DataFormatError(self.manifest, f"{len(found)} {kind!r} parts; a model has at most one")
        return found[0] if found else None

    def one(self, kind: str):
        part = self.optional(kind)
        if part is None:
            raise DataFormatError(self.manifest, f"no {kind!r} part")
        return part

    def path(self, kind: str) -> Path:
        """The first file of the (one) part of ``kind``."""
        entry = next(entry for entry, _ in self._loaded if entry["kind"] == kind)
        return self.manifest.parent / entry["files"][0]


# ---------------------------------------------------------------- writing


def write_model(model, directory: str | Path, leave_out: tuple[str, ...] = ()) -> Path:
    """Save ``model`` (its own parts, its querybank and card) as a model folder at ``directory``; returns it.
    ``leave_out``: part kinds not written (an expert's parts that its mixture holds)."""
    directory = Path(directory)
    parts = [p for p in (*model.parts(), *_model_parts(model)) if p.kind not in leave_out]
    directory.mkdir(parents=True, exist_ok=True)
    before = _listed_files(directory)
    for name in (MANIFEST_FILE, *ROOT_FILES):  # not a model (for this reader or an earlier one) until complete
        (directory / name).unlink(missing_ok=True)
    entries = {}
    for part in sorted(parts, key=lambda p: p.kind == "config"):  # the config last
        entries[id(part)] = {"kind": part.kind, **part.fields(), "files": part.save(directory)}
    manifest = {"format": FORMAT, "version": VERSION, "model": model.folder_kind, "name": model.name or "",
                "parts": [entries[id(p)] for p in parts]}
    atomic_write_json(directory / MANIFEST_FILE, manifest)
    kept = {f for e in manifest["parts"] for f in e["files"]}
    for name in sorted(before - kept):  # parts of the model this one replaced
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return directory


def _model_parts(model) -> list:
    """The querybank, the fast text encoders, the calibration and the card of ``model``, when it has them (one of
    other weights is refused)."""
    parts = []
    for name in MODEL_PARTS:
        part = getattr(model, name, None)
        if part is not None:
            problem = part.mismatch(model)
            if problem:
                raise ConfigError(f"model {model.name!r}: {problem}; or drop it (model.{name} = None)")
            parts.append(part)
    if getattr(model, "card", None):
        parts.append(ModelCard(model.card))
    return parts


def _listed_files(directory: Path) -> set[str]:
    """The files the folder's manifest names (none when it has no readable one)."""
    try:
        return {f for e in _read_manifest(directory)["parts"] for f in e["files"]}
    except DataFormatError:
        return set()


# ---------------------------------------------------------------- reading


def is_model_folder(directory: str | Path) -> bool:
    """Whether ``directory`` holds a saved model (a manifest, or an earlier version's files)."""
    return (Path(directory) / MANIFEST_FILE).is_file() or is_legacy_folder(directory)


def read_model(directory: str | Path, map_location: str | torch.device = "cpu", shared: list | tuple = ()):
    """The model saved in ``directory`` (every part its manifest names), in eval mode on ``map_location``;
    ``shared``: the parts a mixture hands its expert (``SHARED_KINDS``)."""
    directory = Path(directory)
    if (directory / MANIFEST_FILE).is_file():
        manifest = _read_manifest(directory)
    else:
        manifest = legacy_manifest(directory)
        if manifest is None:
            raise DataFormatError(directory / MANIFEST_FILE, "missing; not a saved reelsearch model directory")
    where = directory / MANIFEST_FILE
    loaded = {i: PART_KINDS[e["kind"]].load(directory, e) for i, e in enumerate(manifest["parts"])
              if e["kind"] != Expert.kind}
    handed = [p for p in loaded.values() if p.kind in SHARED_KINDS]  # the experts' shared parts: read first
    for i, e in enumerate(manifest["parts"]):
        if e["kind"] == Expert.kind:
            loaded[i] = Expert.load(directory, e, handed)
    parts = Parts(where, [(e, loaded[i]) for i, e in enumerate(manifest["parts"])], shared)
    model = MODEL_KINDS[manifest["model"]].from_parts(parts)
    for name, kind in MODEL_PARTS.items():
        part = parts.optional(kind)
        setattr(model, name, part)
        problem = part.mismatch(model) if part is not None else None
        if problem:
            raise DataFormatError(parts.path(kind), problem)
    card = parts.optional("model-card")
    model.card = card.text if card is not None else None
    return model.to(map_location).eval()


def _read_manifest(directory: Path) -> dict:
    """The folder's manifest, checked: a known format version, model kind and part kinds, files inside the folder."""
    path = directory / MANIFEST_FILE
    manifest = read_json_object(path)
    if manifest.get("format") != FORMAT:
        raise DataFormatError(path, f"not a {FORMAT} manifest (format={manifest.get('format')!r})")
    version = manifest.get("version")
    if not isinstance(version, int) or version < 1:
        raise DataFormatError(path, f"invalid format version {version!r}")
    if version > VERSION:
        raise DataFormatError(path, f"format version {version} is newer than this reelsearch reads ({VERSION}): "
                                    "upgrade reelsearch")
    if manifest.get("model") not in MODEL_KINDS:
        raise DataFormatError(path, f"unknown model kind {manifest.get('model')!r} (known: {', '.join(MODEL_KINDS)})")
    parts = manifest.get("parts")
    if not isinstance(parts, list) or not all(isinstance(e, dict) for e in parts):
        raise DataFormatError(path, "'parts' must be a list of objects")
    for entry in parts:
        if entry.get("kind") not in PART_KINDS:
            raise DataFormatError(path, f"unknown part kind {entry.get('kind')!r} (known: {', '.join(PART_KINDS)})")
        files = entry.get("files")
        if not isinstance(files, list) or not files or not all(_inside(f) for f in files):
            raise DataFormatError(path, f"part {entry['kind']!r}: 'files' must list paths inside the folder, "
                                        f"got {files!r}")
    return manifest


def _inside(name) -> bool:
    """Whether ``name`` is a relative path that stays inside the folder."""
    if not isinstance(name, str) or not name or "\\" in name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts
