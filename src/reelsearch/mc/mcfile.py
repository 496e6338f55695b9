"""Multiple-choice files in the layout of LSMDC16's ``LSMDC16_multiple_choice_test_randomized.csv``.

One question per line, TAB-separated, no header::

    <CLIP_ID> <START_ALIGNED> <END_ALIGNED> <START_EXTRACTED> <END_EXTRACTED> <SENTENCE1> .. <SENTENCE5> <ANSWER_INDEX>

with ANSWER_INDEX between 1 and 5. Time stamps (``hh.mm.ss.mmm``) are empty for datasets without them. The
training/validation layout (10 fields: the correct sentence first, then the four distractors, no index) is read
too. In Python the answer is a 0-based index.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from reelsearch.errors import DataFormatError
from reelsearch.io import atomic_write_text, numbered_lines, read_text

N_CHOICES = 5
_STAMPS = 4


@dataclass(frozen=True)
class Question:
    """One multiple-choice question: a clip, five candidate sentences, the 0-based index of the right one."""

    id: str
    candidates: tuple[str, ...]
    answer: int
    stamps: tuple[str, str, str, str] = ("", "", "", "")

    def __post_init__(self):
        if len(self.candidates) != N_CHOICES:
            raise ValueError(f"{self.id}: expected {N_CHOICES} candidates, got {len(self.candidates)}")
        if not 0 <= self.answer < N_CHOICES:
            raise ValueError(f"{self.id}: answer index {self.answer} outside 0..{N_CHOICES - 1}")

    @property
    def correct(self) -> str:
        return self.candidates[self.answer]


def _field(text: str) -> str:
    """A field with its white space (tabs, new lines) collapsed, so it cannot break the layout."""
    return " ".join(str(text).split())


def format_question(q: Question) -> str:
    """One line (without its end) in the randomized-test layout."""
    fields = [_field(q.id), *(_field(s) for s in q.stamps), *(_field(c) for c in q.candidates), str(q.answer + 1)]
    return "\t".join(fields)


def write_mc_file(path: str | Path, questions: Iterable[Question]) -> int:
    """Write ``questions`` to ``path`` atomically; returns how many were written."""
    lines = [format_question(q) for q in questions]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def parse_mc_line(line: str, path: str | Path, no: int) -> Question:
    """A Question from one line of either LSMDC16 layout (11 fields with the answer index, or 10 without)."""
    fields = line.split("\t")
    n = 1 + _STAMPS + N_CHOICES
    if len(fields) not in (n, n + 1):
        raise DataFormatError(path, f"expected {n + 1} TAB-separated fields (clip id, 4 time stamps, 5 sentences, "
                                    f"answer index 1-5) or {n} (correct sentence first), got {len(fields)}", no)
    clip = fields[0].strip()
    if not clip:
        raise DataFormatError(path, "empty clip id", no)
    stamps = tuple(f.strip() for f in fields[1 : 1 + _STAMPS])
    candidates = tuple(f.strip() for f in fields[1 + _STAMPS : n])
    if not all(candidates):
        raise DataFormatError(path, f"{clip}: empty candidate sentence", no)
    answer = 0
    if len(fields) == n + 1:
        raw = fields[n].strip()
        if raw not in {str(i) for i in range(1, N_CHOICES + 1)}:
            raise DataFormatError(path, f"{clip}: answer index must be 1..{N_CHOICES}, got {raw!r}", no)
        answer = int(raw) - 1
    return Question(clip, candidates, answer, stamps)  # type: ignore[arg-type]


def read_mc_file(path: str | Path) -> list[Question]:
    """Questions of a multiple-choice file (ours or LSMDC16's), in file order; a bad line is a DataFormatError."""
    path = Path(path)
    out = [parse_mc_line(line, path, no) for no, line in numbered_lines(read_text(path))]
    if not out:
        raise DataFormatError(path, "no questions in the file")
    return out
