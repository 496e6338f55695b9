"""Flickr8k / Flickr30k in the original token format: ``<image>#<n>\\t<caption>`` plus one image list per split.

Layouts accepted (ROOT is the folder given to ``load_dataset``):

- ``ROOT/captions.txt`` (token format), ``ROOT/images/``, and ``ROOT/<split>.txt`` for every split;
- the original Flickr8k names, in ROOT or ``ROOT/Flickr8k_text/``: ``Flickr8k.token.txt`` and
  ``Flickr_8k.{train,dev,test}Images.txt``, images in ``Flicker8k_Dataset/`` (sic) or ``Flickr8k_Dataset/``;
- Flickr30k: ``results_20130124.token`` with ``<split>.txt`` lists, images in ``flickr30k-images/``.

Item id: the image file name without its extension (``1000268201_693b08cb0e``), the same id the Karpathy
JSON reader gives, so features are shared. Every image listed in a split must exist: media is required.
"""

from __future__ import annotations

import re
from pathlib import Path

from reelsearch.datasets.base import Dataset, MediaFinder, clean_caption, numbered_lines, read_id_list, read_text
from reelsearch.datasets.item import Item
from reelsearch.errors import DataFormatError

TOKEN_FILES = ["captions.txt", "Flickr8k.token.txt", "results_20130124.token", "results.token"]
TEXT_DIRS = [".", "Flickr8k_text", "Flickr30k_text"]
IMAGE_DIRS = ["images", "Flicker8k_Dataset", "Flickr8k_Dataset", "flickr30k-images", "flickr30k_images"]
_ORIGINAL_LIST = re.compile(r"^Flickr_(?:8|30)k\.(\w+)Images\.txt$")
# Text files of the original distributions that are not split lists.
_NOT_LISTS = {
    "captions.txt",
    "flickr8k.token.txt",
    "flickr8k.lemma.token.txt",
    "expertannotations.txt",
    "crowdflowerannotations.txt",
    "readme.txt",
    "license.txt",
}


def find_token_file(root: Path) -> Path | None:
    """The token-format caption file under ``root``, or None."""
    for sub in TEXT_DIRS:
        for name in TOKEN_FILES:
            p = root / sub / name
            if p.is_file():
                return p
    return None


def find_split_lists(text_dir: Path) -> dict[str, Path]:
    """Split name -> list file: ``<split>.txt`` or the original ``Flickr_8k.<split>Images.txt``."""
    lists: dict[str, Path] = {}
    for p in sorted(text_dir.iterdir()):
        if not p.is_file() or p.suffix != ".txt" or p.name.lower() in _NOT_LISTS:
            continue
        m = _ORIGINAL_LIST.match(p.name)
        split = m.group(1).lower() if m else p.stem
        if split in lists:
            raise DataFormatError(p, f"two list files for split {split!r}: {lists[split].name} and {p.name}")
        lists[split] = p
    return lists


def parse_token_file(path: Path) -> dict[str, list[tuple[int, str]]]:
    """Image name -> [(line, caption)] in file order; checks every row."""
    captions: dict[str, list[tuple[int, str]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for no, line in numbered_lines(read_text(path)):
        key, tab, caption = line.partition("\t")
        image, hash_, n = key.strip().rpartition("#")
        if not tab or not hash_ or not image or not n.isdigit():
            raise DataFormatError(path, f"expected '<image>#<n><TAB><caption>', got {line[:80]!r}", no)
        if (image, n) in seen:
            raise DataFormatError(path, f"duplicate caption id {image}#{n} (first on line {seen[image, n]})", no)
        seen[image, n] = no
        captions.setdefault(image, []).append((no, clean_caption(caption, path, no)))
    return captions


def load_token_format(name: str, root: Path, token_file: Path) -> Dataset:
    """Read a token-format caption file and every split list next to it (or in ``root``)."""
    captions = parse_token_file(token_file)
    lists = find_split_lists(token_file.parent) or find_split_lists(root)
    if not lists:
        raise DataFormatError(root, f"no split lists (<split>.txt) found beside {token_file.name}")
    finder = MediaFinder(root / d for d in IMAGE_DIRS)
    if finder.is_empty():
        raise DataFormatError(root, f"no images found: expected a folder {' or '.join(IMAGE_DIRS)} with the images")
    owner: dict[str, tuple[Path, int]] = {}
    splits: dict[str, list[Item]] = {}
    for split, list_file in lists.items():
        items = []
        for no, image in read_id_list(list_file):
            if image in owner:
                other, other_no = owner[image]
                raise DataFormatError(list_file, f"image {image} is also in split list {other.name}:{other_no}", no)
            owner[image] = (list_file, no)
            if image not in captions:
                raise DataFormatError(list_file, f"image {image} has no captions in {token_file.name}", no)
            path = finder.find(image)
            if path is None:
                raise DataFormatError(
                    list_file, f"image {image} not found in {root}/images/ (or {', '.join(IMAGE_DIRS[1:])})", no
                )
            items.append(Item(id=Path(image).stem, path=path, captions=[c for _, c in captions[image]], split=split))
        splits[split] = items
    return Dataset(name, root, splits, protocol="official")
