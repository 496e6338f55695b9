"""Filters in the search box: ``beach after:2023-07 before:2024 folder:holiday kind:video duration:>60 has:speech
-people "exact phrase"``.

:func:`parse_query` splits the box into its free text and a :class:`Filter`; the CLI options and HTTP parameters
give the same filters by key (:meth:`Filter.of`), through the same value parser. A token is

* ``"words in quotes"``: a phrase that must be said or written in the video, word for word (case-insensitive);
* ``-word`` (or ``-"some words"``): a negative term (:func:`pictured`, ``reelsearch.search.query``);
* ``key:value`` (or ``key:"a value with spaces"``) with a key of :data:`KEYS`: a filter; a word made of letters
  before the colon that is not a key (``colour:red``) is an error, anything else with a colon (``10:30``, ``1:1``)
  is text;
* anything else: the free text, ranked as before.

Dates (``after:``, ``before:``) are ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` in UTC, compared with when each video was
taken (``reelsearch.media.dates``): ``after:P`` keeps what was taken from the start of P on (P included),
``before:P`` what was taken before the start of P (P excluded), so ``after:2023-07 before:2024`` is July to December
2023. A period that starts in the future is an error. Filters select the videos ranking runs over
(``reelsearch.search.subset``): a filtered top k is the exact top k of the matching videos.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import Catalog, VideoFacts
from reelsearch.index.textcues import TextCues
from reelsearch.models.calibration import search_calibration
from reelsearch.scoring.calibration import query_length
from reelsearch.search.fusion import fuse
from reelsearch.search.sources import Visual
from reelsearch.search.subset import Selection

#: The filter keys, and what each value is.
KEYS = {"after": "a date: YYYY, YYYY-MM or YYYY-MM-DD", "before": "a date: YYYY, YYYY-MM or YYYY-MM-DD",
        "folder": "a folder name on the path, or a path prefix", "kind": "video, image or audio",
        "duration": "seconds: >60, <30, >=10, <=10 or 30-90 (s, m or h after a number)",
        "has": "speech or text"}
#: ``kind:`` values: "audio" is a file without a picture (sound alone, whatever its extension: an .mp4 of audio alone
#: too), "image" an image file, "video" any other (``VideoFacts.kinds``).
KINDS = ("video", "image", "audio")
#: ``has:`` values and the text cue each needs.
HAS = {"speech": "speech", "text": "ocr"}
_TOKEN = re.compile(r'(-?)"([^"]*)"?|([A-Za-z]+):"([^"]*)"?|(\S+)')
_KEY = re.compile(r"([A-Za-z]+):(.*)", re.S)
_DATE = re.compile(r"([0-9]{4})(?:-([0-9]{1,2}))?(?:-([0-9]{1,2}))?")
_DURATION = re.compile(r"(>=|<=|>|<|=)?\s*([0-9.]+)\s*([smh]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "=": operator.eq}


class FilterError(ReelsearchError):
    """A filter that cannot be used (a malformed value, an unknown key, a date in the future)."""


@dataclass(frozen=True)
class Filter:
    """What a search is restricted to. Each part as written (``written``: (key, value) pairs, for showing how the
    box was read) and as used: ``after`` / ``before`` in seconds since the epoch, ``durations`` ((op, seconds)
    pairs, all must hold), ``has`` (text cues, all needed), ``exclude`` (negative terms), ``phrases``."""

    written: tuple[tuple[str, str], ...] = ()
    after: float | None = None
    before: float | None = None
    folders: tuple[str, ...] = ()
    kind: str | None = None
    durations: tuple[tuple[str, float], ...] = ()
    has: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.written)

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]], now: float | None = None) -> Filter:
        """The filter of (key, value) pairs: the :data:`KEYS`, ``exclude`` (a negative term) and ``phrase``; a
        FilterError names the first bad one."""
        out = cls()
        for key, value in pairs:
            out = out._with(key, str(value).strip(), now)
        return out

    def merged(self, other: Filter | None) -> Filter:
        """Both filters at once (a video must pass both)."""
        return self if not other else Filter.of((*self.written, *other.written))

    def _with(self, key: str, value: str, now: float | None) -> Filter:
        shown = f"{key}:{value}"
        if not value:
            raise FilterError(f"{shown}: the value is missing ({KEYS.get(key, 'some words')})")
        written = (*self.written, (key, value))
        if key in ("after", "before"):
            start = period_start(value, shown, now)
            if key == "after":
                return replace(self, written=written, after=start if self.after is None else max(start, self.after))
            return replace(self, written=written, before=min(start, self.before if self.before is not None else start))
        if key == "folder":
            return replace(self, written=written, folders=(*self.folders, value))
        if key == "kind":
            if value.lower() not in KINDS:
                raise FilterError(f"{shown}: the kind is video, image or audio")
            if self.kind not in (None, value.lower()):
                raise FilterError(f"{shown}: kind:{self.kind} is given too (a file is one or the other)")
            return replace(self, written=written, kind=value.lower())
        if key == "duration":
            return replace(self, written=written, durations=(*self.durations, *parse_duration(value, shown)))
        if key == "has":
            if value.lower() not in HAS:
                raise FilterError(f"{shown}: has: takes {' or '.join(HAS)}")
            return replace(self, written=written, has=(*self.has, HAS[value.lower()]))
        if key == "exclude":
            return replace(self, written=written, exclude=(*self.exclude, value))
        if key == "phrase":
            return replace(self, written=written, phrases=(*self.phrases, value))
        raise FilterError(f"{shown}: unknown filter {key!r} (filters: {', '.join(f'{k}:' for k in KEYS)})")

    def describe(self) -> str:
        """How the box was read, in words: ``after 2023-07, folder holiday, not "people", "exact phrase"``."""
        parts = []
        for key, value in self.written:
            if key == "exclude":
                parts.append(f'not "{value}"')
            elif key == "phrase":
                parts.append(f'"{value}"')
            else:
                parts.append(f"{key} {value}")
        return ", ".join(parts)

    def to_json(self) -> dict:
        """{key: [values as written]} (keys: the :data:`KEYS`, ``exclude``, ``phrase``)."""
        out: dict[str, list[str]] = {}
        for key, value in self.written:
            out.setdefault(key, []).append(value)
        return out


#: Folder masks and selections kept per catalog generation (``VideoFacts.derived``) before they are all dropped.
MAX_DERIVED = 64


def parse_query(text: str | None, now: float | None = None) -> tuple[str | None, Filter]:
    """(free text or None when only filters were given, Filter) of a search box (module docstring)."""
    if text is None:
        return None, Filter()
    words: list[str] = []
    pairs: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(text):
        minus, quoted, token = m.group(1), m.group(2), m.group(5)
        if quoted is not None:
            if quoted.strip():
                pairs.append(("exclude" if minus else "phrase", " ".join(quoted.split())))
            continue
        if m.group(3) is not None:  # key:"a value with spaces"
            pairs.append((m.group(3).lower(), m.group(4)))
            continue
        key = _KEY.fullmatch(token)
        if key is not None:
            pairs.append((key.group(1).lower(), key.group(2)))
        elif token.startswith("-") and len(token) > 1 and token[1].isalpha():
            pairs.append(("exclude", token[1:]))
        else:
            words.append(token)
    filt = Filter.of(pairs, now)
    free = " ".join(words + [p for k, p in pairs if k == "phrase"])
    return (free or None), filt


def read_box(text: str | None, options: Filter | None = None, now: float | None = None
             ) -> tuple[str | None, Filter]:
    """(free text, filter) of a search box and the filters given beside it (CLI options, HTTP parameters)."""
    free, filt = parse_query(text, now)
    return free, filt.merged(options)


def period_start(value: str, shown: str, now: float | None = None) -> float:
    """The first second (UTC, since the epoch) of the period ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``; FilterError
    naming ``shown`` when it is no such date or starts in the future."""
    m = _DATE.fullmatch(value)
    if m is None:
        raise FilterError(f"{shown}: not a date (YYYY, YYYY-MM or YYYY-MM-DD)")
    year, month, day = int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1)
    try:
        start = datetime(year, month, day, tzinfo=UTC).timestamp()
    except ValueError as exc:
        raise FilterError(f"{shown}: not a date ({exc})") from None
    current = datetime.now(UTC).timestamp() if now is None else now
    if start > current:
        raise FilterError(f"{shown}: {value} is in the future")
    return start


def parse_duration(value: str, shown: str) -> tuple[tuple[str, float], ...]:
    """``>60``, ``<=2m``, ``30-90`` (both included), ``60`` (exactly) -> ((op, seconds), ...); FilterError naming
    ``shown`` otherwise."""
    low, dash, high = value.partition("-")
    if dash and low and high and not low.startswith((">", "<", "=")):
        return (">=", _seconds(low, shown)), ("<=", _seconds(high, shown))
    m = _DURATION.fullmatch(value.strip())
    if m is None:
        raise FilterError(f"{shown}: not a duration ({KEYS['duration']})")
    return ((m.group(1) or "="), _seconds(m.group(2) + m.group(3), shown)),


def _seconds(text: str, shown: str) -> float:
    m = _DURATION.fullmatch(text.strip())
    if m is None or m.group(1):
        raise FilterError(f"{shown}: not a duration ({KEYS['duration']})")
    try:
        return float(m.group(2)) * _UNITS[m.group(3)]
    except ValueError:
        raise FilterError(f"{shown}: not a duration ({KEYS['duration']})") from None


def select(filt: Filter, catalog: Catalog, cues: TextCues | None) -> Selection:
    """The ids of the videos of ``catalog`` that pass ``filt``'s dates, folders, kind, duration, ``has``, phrases,
    and whose speech or on-screen text does not say a negative term, newest first (ties by id); the picture's part of
    a negative term is :func:`pictured`'s. Reads the catalog's facts (``Catalog.facts``: one query per generation)
    and looks up each text condition once. Kept with the facts, per filter and, for a filter that reads the text
    cues, their generation (a search's "no good match" reads its size after it: ``Searcher.no_good_match``)."""
    facts = catalog.facts()
    reads_cues = cues is not None and bool(filt.has or filt.phrases or filt.exclude)
    keep = _derived(facts, ("select", filt, cues.generation if reads_cues else None),
                    lambda: _passing(filt, facts, cues))
    return Selection(facts.id_array[facts.newest[keep[facts.newest]]].tolist(), keep, facts)


def _passing(filt: Filter, facts: VideoFacts, cues: TextCues | None) -> np.ndarray:
    """[N] bool, read-only: the videos of ``facts`` that pass ``filt`` (:func:`select`)."""
    keep = np.ones(len(facts.ids), bool)
    if filt.after is not None:
        keep &= facts.taken_at >= filt.after
    if filt.before is not None:
        keep &= facts.taken_at < filt.before
    if filt.kind is not None:
        keep &= facts.kinds == filt.kind
    for op, seconds in filt.durations:
        with np.errstate(invalid="ignore"):
            keep &= _COMPARE[op](facts.duration, seconds) & ~np.isnan(facts.duration)
    if filt.folders:
        keep &= np.logical_or.reduce([in_folders(facts, f) for f in filt.folders])
    wanted = _text_conditions(filt, cues)
    if wanted is not None:
        order = np.flatnonzero(keep)
        keep[order[np.array([not wanted(i) for i in facts.id_array[order].tolist()], bool)]] = False
    keep.flags.writeable = False
    return keep


def _text_conditions(filt: Filter, cues: TextCues | None):
    """A test ``id -> bool`` of ``has``, phrases and negative words on the text cues (None: no such condition)."""
    if not (filt.has or filt.phrases or filt.exclude):
        return None
    need: list[set[str]] = []
    for cue in filt.has:
        need.append(cues.with_cue(cue) if cues is not None else set())
    for phrase in filt.phrases:
        need.append(cues.containing(phrase) if cues is not None else set())
    banned: set[str] = set()
    if cues is not None:
        for term in filt.exclude:
            banned |= cues.containing(term)
    return lambda i: i not in banned and all(i in s for s in need)


def pictured(visual: Visual, query: np.ndarray, text: str, first: int = 64) -> set[str]:
    """The videos of ``visual``'s catalog whose picture shows the negative term ``text`` (its embedding ``query``
    [1, D]): the model's calibrated probability that a photo with its own score for the term shows it
    (``Calibration.pictures``: the confidence of a search for the term alone where the calibration knows how common
    it is, at least ``COMMON_NEGATIVE_CONFIDENCE``; else the term curve of its length (``query_length``), at least
    ``NEGATIVE_CONFIDENCE``: ``reelsearch.scoring.calibration``; none without a calibration
    of terms). The score is the model's own, without the querybank's offsets (the curves are fitted on short queries,
    which a search ranks so). The calibration is monotone, so the model's top is read from ``first`` on, doubling,
    until no video outside it can reach the cut (the fusion's ``keep``)."""
    calibration = search_calibration(visual.model)
    length = query_length(text)
    if calibration is None or calibration.shows(0.0, length, text) is None:
        return set()
    visual = visual.with_bias(False)
    catalog = visual.catalog
    fused = fuse(visual.sources(query), visual.weights(1.0), len(catalog), catalog, visual,
                 keep=lambda scores: calibration.pictures(scores, length, text), first=first)
    return set(fused.ids)


def in_folders(facts: VideoFacts, folder: str) -> np.ndarray:
    """[N] bool: each video lies under ``folder``: a folder name (``holiday``: any folder of the path so named,
    case-insensitive) or a path (with a ``/``: the path starts with it, as a folder). Kept with the facts (read-only:
    callers combine it into masks of their own)."""
    if "/" in folder:
        return _derived(facts, ("folder", folder),
                        lambda: np.char.startswith(np.array(facts.paths, str), folder.rstrip("/") + "/"))
    return _derived(facts, ("folder", folder), lambda: np.char.find(facts.folders, f"/{folder.lower()}/") >= 0)


def _derived(facts: VideoFacts, key: tuple, make) -> np.ndarray:
    """``facts.derived[key]``, made by ``make()`` the first time (all are dropped beyond :data:`MAX_DERIVED`)."""
    if key not in facts.derived:
        mask = make()
        if len(facts.derived) >= MAX_DERIVED:
            facts.derived.clear()
        facts.derived[key] = mask
    return facts.derived[key]


def filter_pairs(options: Mapping[str, Iterable[str] | str | None]) -> list[tuple[str, str]]:
    """(key, value) pairs of options given by name (CLI options, HTTP parameters): a value or a list of them each."""
    pairs = []
    for key, values in options.items():
        if values is None:
            continue
        for value in [values] if isinstance(values, str) else values:
            pairs.append((key, value))
    return pairs
