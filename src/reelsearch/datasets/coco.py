"""Image-caption JSON: Karpathy's ``dataset_{coco,flickr30k,flickr8k}.json`` and COCO's ``captions_<split><year>.json``.

Karpathy: ``{"images": [{"filename", "filepath"?, "split", "sentences": [{"raw", "tokens"}]}]}``, splits
train / val / test / restval as written in the file. COCO official: ``{"images": [{"id", "file_name"}],
"annotations": [{"image_id", "id", "caption"}]}``, one file per split (``captions_train2014.json`` -> ``train``).

Item id: the image file name without extension (``COCO_val2014_000000391895``) in both, so features are shared.
Media is optional: ``path`` is the image when found (``ROOT/<filepath>/``, ``ROOT/images/[<filepath>/]``, ...),
else None.
"""

from __future__ import annotations

import re
from pathlib import Path

from reelsearch.datasets.base import Dataset, MediaFinder, clean_caption, line_of, load_json
from reelsearch.datasets.item import Item
from reelsearch.errors import DataFormatError

IMAGE_DIRS = [".", "images", "Flicker8k_Dataset", "Flickr8k_Dataset", "flickr30k-images", "flickr30k_images"]
ANNOTATION_DIRS = [".", "annotations", "annotation"]
_OFFICIAL = re.compile(r"^captions_([A-Za-z]+)(\d{4})?\.json$")


def _where(index: int, filename: object) -> str:
    return f"images[{index}] ({filename})"


def load_karpathy(name: str, root: Path, json_path: Path) -> Dataset:
    """Read one Karpathy split file; media is looked up under ``root``."""
    data, text = load_json(json_path)
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise DataFormatError(json_path, 'expected an object with an "images" list (Karpathy format)', 1)
    finder = MediaFinder(root / d for d in IMAGE_DIRS)
    seen: dict[str, int] = {}
    splits: dict[str, list[Item]] = {}
    for i, img in enumerate(images):
        if not isinstance(img, dict) or not all(k in img for k in ("filename", "split", "sentences")):
            raise DataFormatError(json_path, f"images[{i}]: needs filename, split and sentences")
        filename, split, sentences = img["filename"], img["split"], img["sentences"]

        def line(filename=filename):
            return line_of(text, filename)

        if not isinstance(filename, str) or not filename or not isinstance(split, str) or not split:
            raise DataFormatError(
                json_path, f"{_where(i, filename)}: filename and split must be non-empty strings", line()
            )
        item_id = Path(filename).stem
        if item_id in seen:
            raise DataFormatError(
                json_path,
                f"{_where(i, filename)}: duplicate image id {item_id} (first at images[{seen[item_id]}])",
                line_of(text, filename, 2),
            )
        seen[item_id] = i
        if not isinstance(sentences, list):
            raise DataFormatError(json_path, f"{_where(i, filename)}: sentences must be a list", line())
        captions = []
        for j, s in enumerate(sentences):
            raw = s.get("raw") if isinstance(s, dict) else None
            if raw is None and isinstance(s, dict) and isinstance(s.get("tokens"), list):
                raw = " ".join(map(str, s["tokens"]))
            captions.append(clean_caption(raw, json_path, line, f"{_where(i, filename)} sentences[{j}]"))
        filepath = img.get("filepath")
        path = (finder.find(filename, subdir=filepath) if filepath else None) or finder.find(filename)
        meta = {k: img[k] for k in ("cocoid", "imgid") if k in img}
        splits.setdefault(split, []).append(Item(id=item_id, path=path, captions=captions, split=split, meta=meta))
    return Dataset(name, root, splits, protocol="karpathy")


def find_official_files(root: Path) -> dict[str, Path]:
    """Split -> ``captions_<split><year>.json``; the year is dropped from the name unless two years clash."""
    found: list[tuple[str, str, Path]] = []
    for sub in ANNOTATION_DIRS:
        folder = root / sub
        if folder.is_dir():
            for p in sorted(folder.glob("captions_*.json")):
                m = _OFFICIAL.match(p.name)
                if m:
                    found.append((m.group(1), m.group(1) + (m.group(2) or ""), p))
    short = [s for s, _, _ in found]
    return {(s if short.count(s) == 1 else full): p for s, full, p in found}


def load_official_file(json_path: Path, split: str, root: Path, finder: MediaFinder) -> list[Item]:
    """Items of one COCO ``captions_*.json`` file."""
    data, text = load_json(json_path)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("images"), list)
        or not isinstance(data.get("annotations"), list)
    ):
        raise DataFormatError(json_path, 'expected an object with "images" and "annotations" lists (COCO format)', 1)
    folder = json_path.stem.removeprefix("captions_")
    items: dict[object, Item] = {}
    for i, img in enumerate(data["images"]):
        if not isinstance(img, dict) or "id" not in img or not isinstance(img.get("file_name"), str):
            raise DataFormatError(json_path, f"images[{i}]: needs id and file_name")
        if img["id"] in items:
            raise DataFormatError(
                json_path, f"images[{i}]: duplicate image id {img['id']}", line_of(text, img["file_name"])
            )
        name = img["file_name"]
        path = finder.find(name, subdir=folder) or finder.find(name)
        items[img["id"]] = Item(Path(name).stem, path, [], split, meta={"coco_id": img["id"]})
    seen_ann: set = set()
    for j, ann in enumerate(data["annotations"]):
        if not isinstance(ann, dict) or "image_id" not in ann or "caption" not in ann:
            raise DataFormatError(json_path, f"annotations[{j}]: needs image_id and caption")
        where = f"annotations[{j}] (id {ann.get('id')})"

        def line(ann=ann):
            return line_of(text, ann["caption"]) if isinstance(ann["caption"], str) else None

        if ann.get("id") is not None:
            if ann["id"] in seen_ann:
                raise DataFormatError(json_path, f"{where}: duplicate annotation id", line())
            seen_ann.add(ann["id"])
        if ann["image_id"] not in items:
            raise DataFormatError(json_path, f"{where}: unknown image_id {ann['image_id']}", line())
        items[ann["image_id"]].captions.append(clean_caption(ann["caption"], json_path, line, where))
    ids: dict[str, int] = {}
    for it in items.values():
        if it.id in ids:
            raise DataFormatError(json_path, f"two images share the file name stem {it.id}")
        ids[it.id] = 1
    return list(items.values())


def load_official(name: str, root: Path, files: dict[str, Path]) -> Dataset:
    """Read COCO's official per-split caption files."""
    finder = MediaFinder(root / d for d in IMAGE_DIRS)
    splits = {split: load_official_file(p, split, root, finder) for split, p in files.items()}
    owner: dict[str, str] = {}
    for split, items in splits.items():
        for it in items:
            if it.id in owner:
                raise DataFormatError(
                    files[split], f"image {it.id} is also in split {owner[it.id]} ({files[owner[it.id]]})"
                )
            owner[it.id] = split
    return Dataset(name, root, splits, protocol="official")
