"""The parts of a model folder that are files: a config document, weights, a tuned CNN tail, a tuned text tail, a
bundled text encoder, a model card, a confidence calibration. Each saves itself into a folder (``save(directory) ->
files``, paths relative to it) and loads itself from the manifest entry that names those files (``load(directory,
entry)``);
``reelsearch.models.folder`` writes and reads the folder. The querybank (``reelsearch.models.querybank``) and a
mixture's experts (``folder.Expert``) are parts too.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import ClassVar

import torch
from safetensors.torch import load_file, save_file

from reelsearch.errors import DataFormatError
from reelsearch.io import atomic_path, atomic_write_json, atomic_write_text, file_identity, read_text
from reelsearch.text.mlm import BUNDLED_NAME, bundle_encoder
from reelsearch.text.tail import tail_layers

from .calibration import entry_path, read_json_object

#: The files of a model folder (also the names earlier versions wrote, without a manifest).
CONFIG_FILE, WEIGHTS_FILE, MOE_FILE, CARD_FILE = "config.json", "model.safetensors", "moe.json", "MODEL_CARD.md"
TAIL_FILE = "tail-{modality}.safetensors"
TEXT_TAIL_FILE = "text-tail.safetensors"
log = logging.getLogger(__name__)


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
        copy_into(self.path, Path(directory) / self.file)
        return [self.file]

    @classmethod
    def load(cls, directory: Path, entry: dict) -> CnnTail:
        path = entry_path(directory, entry)
        if not path.is_file():
            raise DataFormatError(path, "missing: the model's tuned CNN weights")
        return cls(entry.get("modality", ""), path.resolve())


def copy_into(path: Path, dest: Path) -> None:
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
        first, last = tail_layers(self.path)
        return {"sha256": self.identity, "first_layer": first, **({} if last is None else {"last_layer": last})}

    def save(self, directory: Path) -> list[str]:
        copy_into(self.path, Path(directory) / TEXT_TAIL_FILE)
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
