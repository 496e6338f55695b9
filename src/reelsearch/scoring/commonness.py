"""How common a query is among the model's training captions: the share of training videos a caption of which holds
every content word of the query (its words but the articles, a plural counting as the word: the rule that says which
development photos a derived short query is right for, ``reelsearch.evaluation.short_queries.relevance``).

"a dog" is held by a caption of 25% of the Flickr8k training photos, "trampoline" by 0.3%: a score of 0.24 means
more for the first than for the second, and a calibration of version 6 reads it so
(``reelsearch.scoring.calibration.CommonCurve``). Saved beside the calibration in the model folder
(``commonness.npz``: the words, each one's captions, each caption's video) and read without torch: a query costs a
dict lookup and an intersection of sorted arrays per word.
"""

from __future__ import annotations

import math
import re
import zipfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from reelsearch.errors import DataFormatError

ARTICLES = frozenset({"a", "an", "the"})
_WORD = re.compile(r"[a-z]+")
#: Added to a query's count of training videos (and twice to their number) before its share is taken: a query no
#: training caption holds (an unknown word) reads as rarer than one caption's, never as impossible.
SMOOTH = 0.5
#: The sets of query words whose counts a table keeps (``Commonness.count``).
LOOKUPS = 1024


def words(text: str) -> list[str]:
    """``text``'s words, lower case, letters only."""
    return _WORD.findall(text.lower())


def stem(word: str) -> str:
    """``word`` without a plural's ``-s`` or ``-es`` (a word of four letters or more)."""
    for end in ("es", "s"):
        if word.endswith(end) and len(word) > len(end) + 2:
            return word[: -len(end)]
    return word


def content_words(text: str) -> frozenset[str]:
    """The content words of ``text``: its words but the articles, stemmed (:func:`stem`)."""
    return frozenset(stem(w) for w in words(text) if w not in ARTICLES)


class Commonness:
    """The training captions' content words: ``vocabulary`` [W] sorted, ``starts`` [W + 1] where each word's captions
    begin in ``captions`` (sorted caption numbers per word), ``video`` [C] each caption's video, ``videos`` their
    number."""

    def __init__(self, vocabulary: Sequence[str], starts, captions, video, videos: int):
        self.vocabulary = [str(w) for w in vocabulary]
        self.starts = np.asarray(starts, np.int64)
        # int32 as saved: half the bytes of int64 in a serving process (2.2 MiB for the bundled model's two tables)
        self.captions, self.video = np.asarray(captions, np.int32), np.asarray(video, np.int32)
        self.videos = int(videos)
        if (len(self.starts) != len(self.vocabulary) + 1 or self.starts[0] != 0 or self.starts[-1] != len(self.captions)
                or np.any(np.diff(self.starts) < 0) or self.videos < 1
                or (len(self.captions) and (self.captions.min() < 0 or self.captions.max() >= len(self.video)))
                or (len(self.video) and (self.video.min() < 0 or self.video.max() >= self.videos))):
            raise ValueError("inconsistent commonness table")
        self._row = {w: i for i, w in enumerate(self.vocabulary)}
        self._held = lru_cache(maxsize=LOOKUPS)(self._count)

    @classmethod
    def of(cls, videos: Sequence[Sequence[str]]) -> Commonness:
        """The table of ``videos`` [the captions of each training video]."""
        holding: dict[str, list[int]] = {}
        video = []
        for v, captions in enumerate(videos):
            for caption in captions:
                for word in content_words(caption):
                    holding.setdefault(word, []).append(len(video))
                video.append(v)
        vocabulary = sorted(holding)
        counts = [len(holding[w]) for w in vocabulary]
        return cls(vocabulary, np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]),
                   np.array([c for w in vocabulary for c in holding[w]], np.int64), video, len(videos))

    def count(self, text: str) -> int | None:
        """How many training videos have a caption holding every content word of ``text`` (0 when one word is in
        none); None when ``text`` has no content word. Each set of words is counted once (:data:`LOOKUPS` kept): a
        search reads its query's commonness for every hit and moment, a negative term's for each round of its cut."""
        need = content_words(text)
        return self._held(need) if need else None

    def _count(self, need: frozenset[str]) -> int:
        rows = [self._row.get(w) for w in need]
        if any(r is None for r in rows):
            return 0
        held = None
        for r in sorted(rows, key=lambda r: self.starts[r + 1] - self.starts[r]):  # the rarest word first
            mine = self.captions[self.starts[r]:self.starts[r + 1]]
            held = mine if held is None else np.intersect1d(held, mine, assume_unique=True)
            if not len(held):
                return 0
        return len(np.unique(self.video[held]))

    def log_share(self, text: str) -> float | None:
        """log((:meth:`count` + SMOOTH) / (videos + 2 SMOOTH)): how common ``text`` is, at most 0; None without a
        content word."""
        n = self.count(text)
        return None if n is None else math.log((n + SMOOTH) / (self.videos + 2 * SMOOTH))

    def save(self, path: Path) -> None:
        with open(path, "wb") as f:
            np.savez_compressed(f, vocabulary=np.array(self.vocabulary, dtype=str), starts=self.starts,
                                captions=self.captions.astype(np.int32), video=self.video.astype(np.int32),
                                videos=np.array(self.videos))

    @classmethod
    def load(cls, path: Path) -> Commonness:
        """The table saved at ``path``; DataFormatError naming the file when it is missing or broken."""
        if not Path(path).is_file():
            raise DataFormatError(path, "missing: the calibration's commonness table")
        try:
            with np.load(path, allow_pickle=False) as doc:
                return cls(doc["vocabulary"].tolist(), doc["starts"], doc["captions"], doc["video"], int(doc["videos"]))
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
            raise DataFormatError(path, f"invalid commonness table: {exc}") from exc
