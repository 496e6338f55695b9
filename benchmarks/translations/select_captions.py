"""Pick the Flickr8k dev captions that benchmarks/translations/flickr8k-dev.tsv translates.

240 distinct dev images in a seeded random order (``random.Random(0)`` shuffling the sorted dev image names), and for
each one caption index drawn with the same generator among that image's non-empty captions. Prints TSV
``image<TAB>n<TAB>caption`` to stdout. Stdlib only; deterministic.

Run: python benchmarks/translations/select_captions.py [--data ../shared/data/flickr8k] [--count 240]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "flickr8k"
SEED = 0
COUNT = 240


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file; a missing file stops the script with its name."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SystemExit(f"{path}: not found (pass --data: the Flickr8k folder with captions.txt, dev.txt)") from None


def read_captions(path: Path) -> dict[str, dict[int, str]]:
    """``captions.txt`` (``<image>#<n>\\t<caption>``) as {image: {n: caption}}."""
    captions: dict[str, dict[int, str]] = {}
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        key, sep, caption = line.partition("\t")
        image, hash_, n = key.rpartition("#")
        if not sep or not hash_ or not n.isdigit():
            raise SystemExit(f"{path}:{lineno}: expected '<image>#<n>\\t<caption>', got {line[:80]!r}")
        captions.setdefault(image, {})[int(n)] = caption.strip()
    return captions


def read_split(path: Path) -> list[str]:
    """Image names of a split file, one per line, blank lines skipped."""
    return [name.strip() for name in read_lines(path) if name.strip()]


def select(captions: dict[str, dict[int, str]], dev: list[str], count: int = COUNT, seed: int = SEED):
    """The (image, n, caption) triples: ``count`` distinct dev images, one non-empty caption each."""
    rng = random.Random(seed)
    images = sorted(set(dev))
    rng.shuffle(images)
    picked = []
    for image in images:
        indices = sorted(n for n, text in captions.get(image, {}).items() if text)
        if not indices:
            continue
        n = rng.choice(indices)
        picked.append((image, n, captions[image][n]))
        if len(picked) == count:
            return picked
    raise SystemExit(f"only {len(picked)} dev images have a non-empty caption; {count} wanted")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with captions.txt and dev.txt")
    parser.add_argument("--count", type=int, default=COUNT)
    args = parser.parse_args(argv)
    captions = read_captions(args.data / "captions.txt")
    dev = read_split(args.data / "dev.txt")
    for image, n, caption in select(captions, dev, args.count):
        sys.stdout.write(f"{image}\t{n}\t{caption}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
