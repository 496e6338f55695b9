"""The parts of a model folder that are files: a config document, weights, a tuned CNN tail, a tuned text tail, a
bundled text encoder, a model card, a confidence calibration. Each saves itself into a folder (``save(directory) ->
files``, paths relative to it) and loads itself from the manifest entry that names those files (``load(directory,
entry)``);
``reelsearch.models.folder`` writes and reads the folder. The querybank (``reelsearch.models.querybank``) and a
mixture's experts (``folder.Expert``) are parts too.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import ClassVar

import torch
from safetensors.torch import load_file, save_file

from reelsearch.errors import DataFormatError
from reelsearch.io import atomic_path, atomic_write_json, atomic_write_text, file_identity, read_text
from reelsearch.scoring.calibration import LENGTHS, SENTENCE, Curve
from reelsearch.text.mlm import BUNDLED_NAME, bundle_encoder
from reelsearch.text.tail import tail_first_layer

#: The files of a model folder (also the names earlier versions wrote, without a manifest).
CONFIG_FILE, WEIGHTS_FILE, MOE_FILE, CARD_FILE = "config.json", "model.safetensors", "moe.json", "MODEL_CARD.md"
TAIL_FILE = "tail-{modality}.safetensors"
CALIBRATION_FILE, CALIBRATION_FORMAT = "calibration.json", "reelsearch.calibration"
#: Version 3: the negative terms' curves are of the model's own score (no querybank offsets, as a search scores
#: 1-3 words: ``reelsearch.scoring.calibration.banked``); version 2 had them less the offsets.
CALIBRATION_VERSION = 3
TEXT_TAIL_FILE = "text-tail.safetensors"
log = logging.getLogger(__name__)


def read_json_object(path: Path) -> dict:
    """A JSON object from ``path``; DataFormatError naming the file when it is missing or not one."""
    if not path.is_file():
        raise DataFormatError(path, "missing; not a saved reelsearch model directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"invalid JSON: {exc}", getattr(exc, "lineno", None)) from exc
    if not isinstance(data, dict):
        raise DataFormatError(path, "expected a JSON object")
    return data


def entry_path(directory: Path, entry: dict) -> Path:
    """The first file a manifest entry names, in ``directory``."""
    return Path(directory) / entry["files"][0]


class ConfigPart:
    """The model's own config document (a joint model's ``config.json``, a mixture's ``moe.json``), written last of
    the parts: with it a folder is complete. ``document["format"]`` says what it configures."""

    kind: ClassVar[str] = "config"

    def __init__(self, file: str, document: dict, path: Path | None = None):
        self.file, self.document, self.path = file, document, path

    def fields(self) -> dict:
        return {}

    def save(self, directory: Path) -> list[str]:
        atomic_write_json(Path(directory) / self.file, self.document)
        return [self.file]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> ConfigPart:
        path = entry_path(directory, entry)
        return cls(entry["files"][0], read_json_object(path), path)

    def of_format(self, expected: str) -> dict:
        """The document, or DataFormatError naming the file when it configures something else."""
        found = self.document.get("format")
        if found != expected:
            raise DataFormatError(self.path or self.file, f"not a {expected} file (format={found!r})")
        return self.document


class Weights:
    """Every parameter and buffer of a joint model (safetensors, no pickle); loaded on the CPU."""

    kind: ClassVar[str] = "weights"

    def __init__(self, tensors: dict[str, torch.Tensor], file_format: str = "", path: Path | None = None):
        self.tensors, self.file_format, self.path = tensors, file_format, path

    def fields(self) -> dict:
        return {}

    def save(self, directory: Path) -> list[str]:
        with atomic_path(Path(directory) / WEIGHTS_FILE) as tmp:
            save_file(self.tensors, str(tmp), metadata={"format": self.file_format})
        return [WEIGHTS_FILE]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> Weights:
        path = entry_path(directory, entry)
        if not path.is_file():
            raise DataFormatError(path, "missing model weights")
        try:
            return cls(load_file(str(path), device="cpu"), path=path)
        except Exception as exc:  # noqa: BLE001 (safetensors raises its own error types)
            raise DataFormatError(path, f"unreadable safetensors file: {exc}") from exc


class CnnTail:
    """The tuned last blocks of one modality's frame CNN (``reelsearch tune-cnn``), named by the recipe's ``tail``
    option; ``path`` is the file (anywhere before saving, the folder's own once loaded)."""

    kind: ClassVar[str] = "cnn-tail"

    def __init__(self, modality: str, path: str | Path):
        self.modality, self.path = modality, Path(path)

    @property
    def file(self) -> str:
        return TAIL_FILE.format(modality=self.modality)

    def fields(self) -> dict:
        return {"modality": self.modality}

    def save(self, directory: Path) -> list[str]:
        _copy_into(self.path, Path(directory) / self.file)
        return [self.file]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> CnnTail:
        path = entry_path(directory, entry)
        if not path.is_file():
            raise DataFormatError(path, "missing: the model's tuned CNN weights")
        return cls(entry.get("modality", ""), path.resolve())


def _copy_into(path: Path, dest: Path) -> None:
    """Copy the file ``path`` to ``dest`` (atomically), unless it is that file already."""
    if not path.is_file():
        raise DataFormatError(path, "missing: a file the model's feature recipe names")
    if not (dest.exists() and dest.resolve() == path.resolve()):
        with atomic_path(dest) as tmp:
            shutil.copyfile(path, tmp)


class TextTail:
    """The tuned top layers of the text tower (``reelsearch tune-text``, ``reelsearch.text.tail``), named by the text
    recipe's ``tail``; ``path`` is the file (anywhere before saving, the folder's own once loaded). Its manifest entry
    records the file's digest, checked on load. A mixture whose experts share one tuned tower holds it once, beside
    its experts, and hands it to them (``folder.SHARED_KINDS``)."""

    kind: ClassVar[str] = "text-tail"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def identity(self) -> str:
        return file_identity(self.path)

    def fields(self) -> dict:
        return {"sha256": self.identity, "first_layer": tail_first_layer(self.path)}

    def save(self, directory: Path) -> list[str]:
        _copy_into(self.path, Path(directory) / TEXT_TAIL_FILE)
        return [TEXT_TAIL_FILE]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> TextTail:
        path = entry_path(directory, entry)
        if not path.is_file():
            raise DataFormatError(path, "missing: the model's tuned text layers")
        if entry.get("sha256") and file_identity(path) != entry["sha256"]:
            raise DataFormatError(path, f"changed since the model was saved (digest {file_identity(path)}, the "
                                        f"manifest's {entry['sha256']})")
        return cls(path.resolve())


class TextEncoder:
    """An adapted MiniLM folder (``reelsearch adapt-text``) the model's text recipe reads, bundled as
    ``text-encoder/`` so the folder is self-contained."""

    kind: ClassVar[str] = "text-encoder"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def fields(self) -> dict:
        return {}

    def save(self, directory: Path) -> list[str]:
        return [bundle_encoder(self.path, directory, BUNDLED_NAME)]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> TextEncoder:
        path = entry_path(directory, entry)
        if not (path / "modules.json").is_file():
            raise DataFormatError(path, "missing: the model's adapted text encoder folder")
        return cls(path.resolve())


class ModelCard:
    """``MODEL_CARD.md``: what the model is, how it was trained and measured (copied along on save)."""

    kind: ClassVar[str] = "model-card"

    def __init__(self, text: str):
        self.text = text

    def fields(self) -> dict:
        return {}

    def save(self, directory: Path) -> list[str]:
        atomic_write_text(Path(directory) / CARD_FILE, self.text)
        return [CARD_FILE]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> ModelCard:
        return cls(read_text(entry_path(directory, entry)))


class Calibration:
    """The model's confidence curves (``reelsearch calibrate``): its score of a hit less the querybank's offset
    (whatever the query's length: a search ranks 1-3 words without it, ``reelsearch.scoring.calibration.banked``),
    mapped to the share of development hits at that score that were right
    (``reelsearch.scoring.calibration.Curve``). ``curve``: full sentences' (the development captions'); ``lengths``:
    {length: curve} of shorter queries (``reelsearch.scoring.calibration.LENGTHS``: fitted on short queries derived
    from the captions, ``reelsearch.evaluation.short_queries``); a length without its own curve reads ``curve``.
    ``terms``: {length: curve} from a photo's own score for a term (no offset) to the share of development photos
    at that score that show it (all photos, not a top: what a negative term removes,
    ``reelsearch.search.filters.pictured``).
    Tied to the model's fingerprint and querybank, like the bank to the model; ``source`` the data it was fitted on,
    ``hits`` the hits per query it counted, ``queries`` how many captions."""

    kind: ClassVar[str] = "calibration"

    def __init__(self, curve: Curve, model: str, querybank: str | None, source: str = "", hits: int = 0,
                 queries: int = 0, lengths: dict[str, Curve] | None = None, terms: dict[str, Curve] | None = None):
        self.curve, self.model, self.querybank = curve, model, querybank
        self.source, self.hits, self.queries = source, hits, queries
        self.lengths, self.terms = dict(lengths or {}), dict(terms or {})
        unknown = (set(self.lengths) | set(self.terms)) - set(LENGTHS)
        if unknown:
            raise ValueError(f"unknown query lengths {sorted(unknown)} (lengths: {', '.join(LENGTHS)})")

    def __call__(self, scores, length: str = SENTENCE):
        """The confidence (0-1) of each score of a query of ``length`` (``query_length`` of its text)."""
        return self.lengths.get(length, self.curve)(scores)

    def shows(self, scores, length: str = SENTENCE):
        """The probability (0-1) that a photo with each score for a term of ``length`` shows it: its ``terms`` curve,
        the longest shorter one for a length without its own; None without any."""
        known = [n for n in LENGTHS[:LENGTHS.index(length) + 1] if n in self.terms]
        return self.terms[known[-1]](scores) if known else None

    def mismatch(self, model) -> str | None:
        """Why this curve does not describe ``model``'s scores (None when it does): another model's, or a
        querybank added, dropped or rebuilt since (the scores it mapped have moved)."""
        bank = getattr(model, "querybank", None)
        if self.model != model.fingerprint():
            return (f"a calibration of another model (fingerprint {self.model}, this model {model.fingerprint()}): "
                    "rerun `reelsearch calibrate`")
        if self.querybank != (bank.digest() if bank is not None else None):
            return "a calibration of the model's scores with another querybank: rerun `reelsearch calibrate`"
        return None

    def fields(self) -> dict:
        return {}

    def save(self, directory: Path) -> list[str]:
        atomic_write_json(Path(directory) / CALIBRATION_FILE, {
            "format": CALIBRATION_FORMAT, "version": CALIBRATION_VERSION, "model": self.model,
            "querybank": self.querybank,
            "source": self.source, "hits": self.hits, "queries": self.queries,
            "score": self.curve.score.tolist(), "right": self.curve.right.tolist(),
            **{part: {n: {"score": c.score.tolist(), "right": c.right.tolist()} for n, c in curves.items()}
               for part, curves in (("lengths", self.lengths), ("terms", self.terms))}})
        return [CALIBRATION_FILE]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> Calibration:
        """Version 3; version 2 (its term curves read scores less the querybank's offsets, which a search no longer
        subtracts for 1-3 words: a warning says to recalibrate) or version 1 (one curve, for every length)."""
        path = entry_path(directory, entry)
        doc = read_json_object(path)
        if doc.get("format") != CALIBRATION_FORMAT or doc.get("version") not in (1, 2, CALIBRATION_VERSION):
            raise DataFormatError(path, f"not a {CALIBRATION_FORMAT} file of version 1 to {CALIBRATION_VERSION} "
                                        f"(format={doc.get('format')!r}, version={doc.get('version')!r})")
        if doc.get("version") == 2 and doc.get("querybank") and doc.get("terms"):
            log.warning("%s: its negative-term curves were fitted on scores less the querybank's offsets, which a "
                        "search no longer subtracts for 1-3 words: rerun `reelsearch calibrate`", path)
        try:
            curve = Curve(doc["score"], doc["right"])
            lengths, terms = ({str(n): Curve(c["score"], c["right"]) for n, c in dict(doc.get(part) or {}).items()}
                              for part in ("lengths", "terms"))
            return cls(curve, str(doc["model"]), doc.get("querybank"), str(doc.get("source", "")),
                       int(doc.get("hits", 0)), int(doc.get("queries", 0)), lengths, terms)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(path, f"invalid calibration curve: {exc}") from exc
