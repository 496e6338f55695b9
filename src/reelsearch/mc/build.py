"""Build a 5-choice multiple-choice test from a dataset split (Torabi et al. 2016, section 3).

For each item: the ground-truth caption (one of its captions, drawn at random when it has several) and four
distractors drawn at random from the same split's captions, under three conditions:

1. the distractor's activity words do not intersect the ground truth's (``reelsearch.mc.phrases``); when the
   ground truth has no activity phrase (a bare noun phrase), the distractor shares no content word with it;
2. it is not a caption of the same item (nor the same text as one of them);
3. the four are different texts.

Candidates are the split's *unique* caption texts (sorted), each equally likely. Every draw uses
``numpy.random.default_rng([seed, hash(item id)])``, so an item's question depends only on the seed, the item and
the split's captions — not on the order or number of items before it. An item with fewer than four eligible
distractors (or no captions) gets no question and is listed in ``BuildResult.too_small`` / ``no_captions``.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.datasets import load_dataset, parse_data_spec
from reelsearch.datasets.item import Item
from reelsearch.mc.mcfile import N_CHOICES, Question, write_mc_file
from reelsearch.mc.phrases import ActivityTagger, Tagged

logger = logging.getLogger(__name__)

N_DISTRACTORS = N_CHOICES - 1


@dataclass
class BuildResult:
    """Questions built for a split and everything that did not become a question."""

    questions: list[Question]
    too_small: list[tuple[str, int]] = field(default_factory=list)  # (item id, eligible distractors)
    no_captions: list[str] = field(default_factory=list)
    answers_fallback: int = 0  # ground truths without an activity word (content words compared)
    answers_without_words: int = 0  # ground truths without even a content word: only conditions 2 and 3 apply
    captions: int = 0
    unique_captions: int = 0
    tag_seconds: float = 0.0
    seconds: float = 0.0

    def summary(self) -> dict:
        return {
            "questions": len(self.questions),
            "too_small": len(self.too_small),
            "no_captions": len(self.no_captions),
            "answers_fallback": self.answers_fallback,
            "answers_without_words": self.answers_without_words,
            "captions": self.captions,
            "unique_captions": self.unique_captions,
            "tag_seconds": round(self.tag_seconds, 2),
            "seconds": round(self.seconds, 2),
        }


def build_mc_file(data: str, split: str, out: str | Path, seed: int = 0, protocol: str | None = None,
                  progress: bool = True) -> tuple[BuildResult, dict]:
    """Build the questions of ``split`` of dataset ``data`` (``FORMAT:ROOT[:SPLIT]``) and write them to ``out``
    (LSMDC16 layout): the result and its summary (the file, data, split, seed and item counts besides
    ``BuildResult.summary``). Each item that did not become a question gets a warning on stderr."""
    fmt, root, _ = parse_data_spec(data)
    items = load_dataset(fmt, root, **({"protocol": protocol} if protocol else {})).items(split)
    result = build_questions(items, seed=seed, progress=progress)
    for item_id, n in result.too_small:
        logger.warning("%s: only %d eligible distractor(s), no question built", item_id, n)
    for item_id in result.no_captions:
        logger.warning("%s: no caption, no question built", item_id)
    write_mc_file(out, result.questions)
    return result, {"file": str(out), "data": f"{fmt}:{root}", "split": split, "seed": seed, "items": len(items),
                    **result.summary()}


def summary_text(summary: dict) -> str:
    """``build_mc_file``'s summary in a few lines."""
    return "\n".join([
        f"{summary['questions']:,} questions from {summary['items']:,} {summary['split']} items -> {summary['file']}",
        f"  not built: {summary['too_small']} (pool too small), {summary['no_captions']} (no caption)",
        f"  ground truths without an activity word (content words compared): {summary['answers_fallback']}",
        f"  {summary['captions']:,} captions ({summary['unique_captions']:,} unique) tagged in "
        f"{summary['tag_seconds']:.1f} s; total {summary['seconds']:.1f} s"])


def item_rng(seed: int, item_id: str) -> np.random.Generator:
    """The random generator of one item: independent of every other item, fixed by (seed, id)."""
    digest = int.from_bytes(hashlib.sha256(str(item_id).encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, digest])


def format_stamp(seconds: float | None) -> str:
    """Seconds -> LSMDC ``hh.mm.ss.mmm`` (empty when None)."""
    if seconds is None:
        return ""
    ms = int(round(float(seconds) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}.{m:02d}.{s:02d}.{ms:03d}"


def item_stamps(item: Item) -> tuple[str, str, str, str]:
    """LSMDC time stamps (aligned start/end, extracted start/end) from an LSMDC item's meta, else empty."""
    aligned = item.meta.get("aligned") or (None, None)
    extracted = item.meta.get("extracted") or (None, None)
    return tuple(format_stamp(s) for s in (*aligned, *extracted))  # type: ignore[return-value]


class _Pool:
    """The split's unique caption texts with inverted indexes word -> texts, for fast eligibility masks."""

    def __init__(self, texts: list[str], tags: list[Tagged]):
        self.texts = texts
        self.words = self._index(t.words for t in tags)
        self.content = self._index(t.content for t in tags)

    @staticmethod
    def _index(word_sets) -> dict[str, np.ndarray]:
        postings: dict[str, list[int]] = {}
        for i, words in enumerate(word_sets):
            for w in words:
                postings.setdefault(w, []).append(i)
        return {w: np.asarray(ix, dtype=np.int64) for w, ix in postings.items()}

    def eligible(self, truth: Tagged, own: Sequence[int]) -> np.ndarray:
        """Indices of texts sharing no activity word (no content word, for a phrase-less ``truth``) with ``truth``
        and not among ``own``."""
        index, words = (self.content, truth.content) if truth.fallback else (self.words, truth.words)
        mask = np.ones(len(self.texts), dtype=bool)
        for w in words:
            ix = index.get(w)
            if ix is not None:
                mask[ix] = False
        mask[np.asarray(own, dtype=np.int64)] = False
        return np.flatnonzero(mask)


def build_questions(items: Sequence[Item], tagger: ActivityTagger | None = None, seed: int = 0,
                    progress: bool = True) -> BuildResult:
    """One question per item of ``items`` (one split); see the module docstring for the rules."""
    start = time.perf_counter()
    tagger = tagger or ActivityTagger()
    tag_before = tagger.seconds
    all_caps = [c for it in items for c in it.captions]
    texts = sorted(set(all_caps))  # sorted: an item's draw does not depend on the order of the items
    text_id = {t: i for i, t in enumerate(texts)}
    tags = tagger.tag_many(texts, progress=progress)
    pool = _Pool(texts, tags)
    result = BuildResult([], captions=len(all_caps), unique_captions=len(texts))
    for it in tqdm(items, desc="building questions", unit="item", disable=not progress, file=sys.stderr,
                   mininterval=1.0):
        if not it.captions:
            result.no_captions.append(it.id)
            continue
        rng = item_rng(seed, it.id)
        truth = it.captions[int(rng.integers(len(it.captions)))]
        tag = tags[text_id[truth]]
        result.answers_fallback += tag.fallback
        result.answers_without_words += not tag.words
        eligible = pool.eligible(tag, sorted({text_id[c] for c in it.captions}))
        if len(eligible) < N_DISTRACTORS:
            result.too_small.append((it.id, int(len(eligible))))
            continue
        picks = rng.choice(eligible, size=N_DISTRACTORS, replace=False)
        candidates = [texts[i] for i in picks]
        answer = int(rng.integers(N_CHOICES))
        candidates.insert(answer, truth)
        result.questions.append(Question(it.id, tuple(candidates), answer, item_stamps(it)))
    result.tag_seconds = tagger.seconds - tag_before
    result.seconds = time.perf_counter() - start
    return result
