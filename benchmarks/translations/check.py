"""Verify benchmarks/translations/flickr8k-dev.tsv against the Flickr8k captions it translates.

Checks: the header, 240 rows of 6 fields, unique (image, n), each (image, n) a dev image's caption in captions.txt
and the selection ``select_captions.py`` makes (same pairs, same order), no empty or padded field, zh rows contain
CJK characters and no Latin word longer than 3 letters (proper names excepted), de/fr/es rows differ from the
English. Stdlib only. Exit status 0 when all pass, 1 with one line per problem otherwise.

Run: python benchmarks/translations/check.py [--data ../shared/data/flickr8k] [--tsv .../flickr8k-dev.tsv]
"""

from __future__ import annotations

import argparse
import re
import unicodedata
from pathlib import Path

from select_captions import COUNT, DEFAULT_DATA, read_captions, read_split, select

HERE = Path(__file__).resolve().parent
HEADER = ["image", "n", "de", "fr", "es", "zh"]
CJK = re.compile(r"[\u4e00-\u9fff]")
LATIN_WORD = re.compile(r"[A-Za-z]+")
PROPER_NAMES: frozenset[str] = frozenset()  # Latin words a zh row may keep (brand or place names); none needed yet


def comparable(text: str) -> str:
    """Lower case, letters and digits only: how far a translation must differ from its source."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def check_row(lineno: int, fields: list[str], captions: dict[str, dict[int, str]], dev: set[str]) -> list[str]:
    """The problems of one data row (``lineno`` is 1-based, counting the header)."""
    where = f"line {lineno}"
    if len(fields) != len(HEADER):
        return [f"{where}: {len(fields)} fields, expected {len(HEADER)}"]
    problems = []
    row = dict(zip(HEADER, fields))
    for name, value in row.items():
        if not value:
            problems.append(f"{where}: empty {name}")
        elif value != value.strip():
            problems.append(f"{where}: {name} has leading or trailing whitespace")
        elif value != unicodedata.normalize("NFC", value):
            problems.append(f"{where}: {name} is not NFC-normalised")
    image, n = row["image"], row["n"]
    if image not in dev:
        problems.append(f"{where}: {image} is not in dev.txt")
    if not n.isdigit() or int(n) not in captions.get(image, {}):
        problems.append(f"{where}: {image}#{n} is not in captions.txt")
        return problems
    english = comparable(captions[image][int(n)])
    for lang in ("de", "fr", "es"):
        if row[lang] and comparable(row[lang]) == english:
            problems.append(f"{where}: {lang} is identical to the English caption")
    zh = row["zh"]
    if zh and not CJK.search(zh):
        problems.append(f"{where}: zh has no CJK characters")
    for word in LATIN_WORD.findall(zh):
        if len(word) > 3 and word not in PROPER_NAMES:
            problems.append(f"{where}: zh keeps the Latin word {word!r}")
    return problems


def check(tsv: Path, data: Path) -> list[str]:
    """All problems of ``tsv`` checked against ``data``/captions.txt and dev.txt; empty when it passes."""
    captions = read_captions(data / "captions.txt")
    dev = read_split(data / "dev.txt")
    try:
        lines = tsv.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        return [f"{tsv}: not UTF-8 ({error})"]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0].split("\t") != HEADER:
        return [f"{tsv}: header must be {chr(9).join(HEADER)!r}"]
    rows = [line.split("\t") for line in lines[1:]]
    dev_images = set(dev)
    problems = [
        f"{tsv}: {problem}" for i, row in enumerate(rows, 2) for problem in check_row(i, row, captions, dev_images)
    ]
    if len(rows) != COUNT:
        problems.append(f"{tsv}: {len(rows)} rows, expected {COUNT}")
    keys = [(fields[0], fields[1]) for fields in rows if len(fields) >= 2]
    seen = set()
    for i, key in enumerate(keys, 2):
        if key in seen:
            problems.append(f"{tsv}: line {i}: duplicate {key[0]}#{key[1]}")
        seen.add(key)
    expected = [(image, str(n)) for image, n, _ in select(captions, dev, COUNT)]
    if keys != expected:
        problems.append(f"{tsv}: (image, n) pairs differ from select_captions.py's selection")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with captions.txt and dev.txt")
    parser.add_argument("--tsv", type=Path, default=HERE / "flickr8k-dev.tsv")
    args = parser.parse_args(argv)
    problems = check(args.tsv, args.data)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{args.tsv}: {COUNT} rows OK")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
