"""A model folder's confidence calibration (``calibration.json``, ``reelsearch calibrate``) and the reading of a
folder's JSON parts: torch-free, so that a cold search (``reelsearch.models.query_model``) reads them without
loading torch. ``reelsearch.models.parts`` holds the other parts.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import ClassVar

import numpy as np

from reelsearch.errors import DataFormatError
from reelsearch.io import atomic_path, atomic_write_json
from reelsearch.scoring.calibration import (
    COMMON_NEGATIVE_CONFIDENCE,
    LENGTHS,
    NEGATIVE_CONFIDENCE,
    NO_GOOD_MATCH,
    OWN_SCORE,
    SENTENCE,
    CommonCurve,
    Curve,
)
from reelsearch.scoring.commonness import Commonness

CALIBRATION_FILE, CALIBRATION_FORMAT = "calibration.json", "reelsearch.calibration"
#: The training captions' table of a version-6 calibration (``reelsearch.scoring.commonness``), beside it.
COMMONNESS_FILE = "commonness.npz"
#: The files a calibration may save (``Calibration.save``).
CALIBRATION_FILES = (CALIBRATION_FILE, COMMONNESS_FILE)
#: Version 6: per length of one to six words, a curve of the score and the query's commonness in the model's
#: training captions (``common``, ``commonness``: ``reelsearch.scoring.calibration.CommonCurve``). Version 5: the
#: curves are fitted on every (query, video) pair, not a gallery's top 10 (a confidence that does not
#: depend on the library's size), 1-6 words' of the model's own score (``OWN_SCORE``), with a "no good match"
#: threshold per length and library size (``no_good_match``). Version 4: a curve of its own for 4-6-word queries,
#: of the model's own score (``lengths`` "4-6"). Version 3: the negative terms' curves are of the model's own score
#: (no querybank offsets, as a search scores 1-3 words: ``reelsearch.scoring.calibration.banked``); version 2 had them
#: less the offsets.
CALIBRATION_VERSION = 6
#: The text encoder with a calibration of its own (``reelsearch calibrate --text-encoder student``; the others read
#: the model's).
STUDENT = "student"
#: The lengths whose curve reads the model's own score in a calibration of version 4 or older.
LEGACY_OWN_SCORE = frozenset({"4-6"})
log = logging.getLogger(__name__)


def read_json_object(path: Path) -> dict:
    """A JSON object from ``path``; DataFormatError naming the file when it is missing or not one."""
    if not path.is_file():
        raise DataFormatError(path, "missing; not a saved reelsearch model directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"invalid JSON: {exc}", getattr(exc, "lineno", None)) from exc
    if not isinstance(data, dict):
        raise DataFormatError(path, "expected a JSON object")
    return data


def entry_path(directory: Path, entry: dict) -> Path:
    """The first file a manifest entry names, in ``directory``."""
    return Path(directory) / entry["files"][0]


class Calibration:
    """The model's confidence curves (``reelsearch calibrate``): its score of a hit (less the querybank's offset for
    the lengths not in ``own``: :meth:`less_offsets`) mapped to the probability that the hit is right
    (``reelsearch.scoring.calibration.Curve``): since version 5 the share of development (query, video) pairs at that
    score that are right, over every video, not a gallery's top (version 4 and older: the share of the top 10 hits
    of the 1,000-photo gallery, which read low for a small library's best hits). ``curve``: full sentences' (the
    development captions'); ``lengths``: {length: curve} of shorter queries (``reelsearch.scoring.calibration.LENGTHS``:
    fitted on short queries derived from the captions, ``reelsearch.evaluation.short_queries``); a length without
    its own curve reads ``curve``. ``thresholds``: {length: {library size: the confidence below which the best hit of
    a search over that many videos says "no good match"}} (:meth:`threshold`; ``NO_GOOD_MATCH`` for a length without
    them). ``own``: the lengths whose curve reads the model's own score (``OWN_SCORE``; version 4: "4-6" alone).
    ``terms``: {length: curve} from a photo's own score for a term (no offset) to the share of development photos
    at that score that show it (all photos, not a top: what a negative term removes,
    ``reelsearch.search.filters.pictured``). ``common``: {length: the ``CommonCurve`` its queries read, with the
    ``commonness`` table of the training captions, where the query has a content word} (version 6).
    Tied to the model's fingerprint and querybank, like the bank to the model; ``source`` the data it was fitted on,
    ``hits`` the hits per query it counted (version 5: every video of the split), ``queries`` how many captions."""

    kind: ClassVar[str] = "calibration"

    def __init__(self, curve: Curve, model: str, querybank: str | None, source: str = "", hits: int = 0,
                 queries: int = 0, lengths: dict[str, Curve] | None = None, terms: dict[str, Curve] | None = None,
                 thresholds: dict[str, dict[int, float]] | None = None, own: frozenset[str] = OWN_SCORE,
                 common: dict[str, CommonCurve] | None = None, commonness: Commonness | None = None):
        self.curve, self.model, self.querybank = curve, model, querybank
        self.source, self.hits, self.queries = source, hits, queries
        self.lengths, self.terms = dict(lengths or {}), dict(terms or {})
        self.thresholds = {n: {int(size): float(t) for size, t in sorted(cuts.items(), key=lambda c: int(c[0]))}
                           for n, cuts in (thresholds or {}).items()}
        self.own = frozenset(own)
        self.common, self.commonness = dict(common or {}), commonness
        unknown = (set(self.lengths) | set(self.terms) | set(self.thresholds) | self.own | set(self.common)) - set(
            LENGTHS)
        if unknown:
            raise ValueError(f"unknown query lengths {sorted(unknown)} (lengths: {', '.join(LENGTHS)})")
        if any(not 0 <= t <= 1 or size < 1 for cuts in self.thresholds.values() for size, t in cuts.items()):
            raise ValueError(f"a no-good-match threshold must lie in [0, 1], got {self.thresholds}")

    def __call__(self, scores, length: str = SENTENCE, text: str | None = None):
        """The confidence (0-1) of each score of a query of ``length`` (``query_length`` of its text ``text``: how
        common it is, where the length has a ``common`` curve; without ``text``, the length's curve)."""
        share = self._share(length, text)
        return self.read(scores, length, math.nan if share is None else share)

    def read(self, scores, length: str = SENTENCE, commonness=math.nan):
        """The confidence of each score of a query of ``length`` and ``commonness`` (its log share: ``Commonness``;
        broadcast against ``scores``, NaN or a length without a ``common`` curve: the length's curve)."""
        curve = self.lengths.get(length, self.curve)
        common = self.common.get(length)
        return curve(scores) if common is None else common(curve, scores, commonness)

    def threshold(self, length: str = SENTENCE, videos: int | None = None) -> float:
        """The confidence below which the best hit of a query of ``length`` over a library of ``videos`` says "no good
        match": the threshold of the largest fitted library size not above ``videos`` (the smallest's below them, and
        without ``videos``: a right best hit of a bigger library scores higher, never lower), the captions' curve's
        for a length without a curve of its own."""
        cuts = self.thresholds.get(length if length in self.lengths else SENTENCE)
        if not cuts:
            return NO_GOOD_MATCH
        fitted = [n for n in cuts if videos is not None and n <= videos]
        return cuts[fitted[-1] if fitted else next(iter(cuts))]

    def less_offsets(self, length: str = SENTENCE) -> bool:
        """Whether the curve a query of ``length`` reads maps scores less the querybank's offsets (a length without a
        curve of its own reads ``curve``, the captions': less the offsets)."""
        return (length if length in self.lengths else SENTENCE) not in self.own

    def shows(self, scores, length: str = SENTENCE, text: str | None = None):
        """The probability (0-1) that a photo with each score for a term of ``length`` shows it: with the term's
        ``text``, where this calibration knows how common it is (version 6, a term with a content word), the
        confidence of a search for the term alone (:meth:`__call__`); else its ``terms`` curve, the longest shorter
        one for a length without its own; None without any."""
        share = self._share(length, text)
        if share is not None:
            return self.read(scores, length, share)
        known = [n for n in LENGTHS[:LENGTHS.index(length) + 1] if n in self.terms]
        return self.terms[known[-1]](scores) if known else None

    def pictures(self, scores, length: str = SENTENCE, text: str | None = None):
        """[bool] whether each photo may well show a term of ``length`` (and ``text``): :meth:`shows` reaches
        ``COMMON_NEGATIVE_CONFIDENCE`` where it reads the term's commonness, ``NEGATIVE_CONFIDENCE`` where it reads a
        term curve; None without any curve."""
        shown = self.shows(scores, length, text)
        cut = NEGATIVE_CONFIDENCE if self._share(length, text) is None else COMMON_NEGATIVE_CONFIDENCE
        return None if shown is None else np.asarray(shown) >= cut

    def _share(self, length: str, text: str | None) -> float | None:
        """How common ``text`` is (``Commonness.log_share``) where a query of ``length`` reads it: this calibration
        has the table and a ``common`` curve for the length, and ``text`` a content word; else None."""
        if text is None or self.commonness is None or length not in self.common:
            return None
        return self.commonness.log_share(text)

    def mismatch(self, model) -> str | None:
        """Why this curve does not describe ``model``'s scores (None when it does): another model's, or a
        querybank added, dropped or rebuilt since (the scores it mapped have moved)."""
        bank = getattr(model, "querybank", None)
        if self.model != model.fingerprint():
            return (f"a calibration of another model (fingerprint {self.model}, this model {model.fingerprint()}): "
                    "rerun `reelsearch calibrate`")
        if self.querybank != (bank.digest() if bank is not None else None):
            return "a calibration of the model's scores with another querybank: rerun `reelsearch calibrate`"
        return None

    def fields(self) -> dict:
        return {}

    def save(self, directory: Path) -> list[str]:
        if self.commonness is not None:
            with atomic_path(Path(directory) / COMMONNESS_FILE) as tmp:
                self.commonness.save(tmp)
        atomic_write_json(Path(directory) / CALIBRATION_FILE, {
            "format": CALIBRATION_FORMAT, "version": CALIBRATION_VERSION, "model": self.model,
            "querybank": self.querybank,
            "source": self.source, "hits": self.hits, "queries": self.queries,
            "score": self.curve.score.tolist(), "right": self.curve.right.tolist(),
            "no_good_match": {n: {str(size): t for size, t in cuts.items()} for n, cuts in self.thresholds.items()},
            "own_score": sorted(self.own),
            **{part: {n: {"score": c.score.tolist(), "right": c.right.tolist()} for n, c in curves.items()}
               for part, curves in (("lengths", self.lengths), ("terms", self.terms))},
            "common": {n: {"weights": c.weights.tolist(), "span": list(c.span), "score": c.correction.score.tolist(),
                           "right": c.correction.right.tolist()} for n, c in self.common.items()},
            "commonness": None if self.commonness is None else {"file": COMMONNESS_FILE,
                                                                "videos": self.commonness.videos}})
        return [CALIBRATION_FILE] + ([COMMONNESS_FILE] if self.commonness is not None else [])

    @classmethod
    def load(cls, directory: Path, entry: dict) -> Calibration:
        """Version 6 (its commonness table: the entry's second file); version 5 (no commonness: each length reads
        its curve); version 4 (curves of the top 10 hits, the 4-6-word one of the model's own score, the others
        less the offsets; "no good match" below ``NO_GOOD_MATCH`` for every length); version 3 (no 4-6-word curve:
        such queries read ``curve``, less the offsets); version 2 (its term curves read scores less the querybank's
        offsets, which a search no longer subtracts for 1-3 words: a warning says to recalibrate) or version 1 (one
        curve, for every length)."""
        path = entry_path(directory, entry)
        doc = read_json_object(path)
        version = doc.get("version")
        if doc.get("format") != CALIBRATION_FORMAT or version not in range(1, CALIBRATION_VERSION + 1):
            raise DataFormatError(path, f"not a {CALIBRATION_FORMAT} file of version 1 to {CALIBRATION_VERSION} "
                                        f"(format={doc.get('format')!r}, version={version!r})")
        if version == 2 and doc.get("querybank") and doc.get("terms"):
            log.warning("%s: its negative-term curves were fitted on scores less the querybank's offsets, which a "
                        "search no longer subtracts for 1-3 words: rerun `reelsearch calibrate`", path)
        try:
            curve = Curve(doc["score"], doc["right"])
            lengths, terms = ({str(n): Curve(c["score"], c["right"]) for n, c in dict(doc.get(part) or {}).items()}
                              for part in ("lengths", "terms"))
            own = frozenset(doc["own_score"]) if version >= 5 else LEGACY_OWN_SCORE
            common = {str(n): CommonCurve(c["weights"], c["span"], Curve(c["score"], c["right"]))
                      for n, c in dict(doc.get("common") or {}).items()} if version >= 6 else {}
            table = doc.get("commonness") if version >= 6 else None
            commonness = None if not table else Commonness.load(Path(directory) / str(table["file"]))
            return cls(curve, str(doc["model"]), doc.get("querybank"), str(doc.get("source", "")),
                       int(doc.get("hits", 0)), int(doc.get("queries", 0)), lengths, terms,
                       dict(doc.get("no_good_match") or {}), own, common, commonness)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataFormatError(path, f"invalid calibration curve: {exc}") from exc


def encoder_calibration(folder: Path) -> Calibration | None:
    """The calibration a text encoder's part keeps in its own ``folder`` (``calibration.json``, as
    ``Calibration.save`` writes it there), or None where it has none."""
    if not (Path(folder) / CALIBRATION_FILE).is_file():
        return None
    return Calibration.load(Path(folder), {"files": [CALIBRATION_FILE]})


def search_calibration(model):
    """The calibration of the scores a search of ``model`` gives its hits (None without one): its student text
    encoder's own while that encodes the queries (``model.text_encoder_name`` "student", ``model.student_calibration``);
    else, and for a student without one, the model's (fitted on float32 MiniLM's scores: float32, int8 and static
    read it)."""
    if getattr(model, "text_encoder_name", None) == STUDENT:
        own = getattr(model, "student_calibration", None)
        if own is not None:
            return own
    return getattr(model, "calibration", None)


def log_fallback(model) -> None:
    """One log line (a Searcher's, when it opens) where ``model`` encodes queries with its student text encoder,
    which has no calibration of its own while the model has one (what its searches read instead:
    :func:`search_calibration`)."""
    if getattr(model, "text_encoder_name", None) == STUDENT and getattr(model, "student_calibration", None) is None \
            and getattr(model, "calibration", None) is not None:
        log.warning("model %r: its student text encoder has no calibration of its own; a search by it reads the "
                    "model's, fitted on float32 MiniLM's scores (`reelsearch calibrate --text-encoder student` fits "
                    "one)", getattr(model, "name", ""))
