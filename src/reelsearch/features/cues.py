"""Text cues of a video: what is said (``speech``) and what is written on screen (``ocr``), as timed segments.

``CueExtractor().extract(path)`` runs every available cue on one file and returns one :class:`CueResult` per cue;
a cue that fails (undecodable audio, a missing extra) carries its error and never loses the other cue's segments.
The speech recogniser and the OCR reader are loaded on first use and shared (see ``shared_recognizer`` and
``shared_reader``), so extracting many files loads each model once.

Another stage that decodes a file's frames anyway (``reelsearch index``'s picture stage) reads its on-screen text in
the same pass: it feeds the session of :meth:`CueExtractor.text_beside` and hands it back with
:meth:`CueExtractor.read_beside`; ``extract`` of that file then gives that result instead of decoding it again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from reelsearch.errors import ReelsearchError
from reelsearch.extras import missing_extra
from reelsearch.features.cue_types import CueResult, CueSegment, shared_instance
from reelsearch.features.ocr import TextSession, shared_reader
from reelsearch.features.speech import shared_recognizer
from reelsearch.media.decode import escaped_path

__all__ = ["CUES", "CueExtractor", "CueResult", "CueSegment", "available_cues", "shared_instance"]

CUES = ("speech", "ocr")


def available_cues() -> dict[str, str | None]:
    """cue -> None when its extra is installed, else the reason it is not (with the pip command)."""
    return {cue: missing_extra(cue) for cue in CUES}


class CueExtractor:
    """Runs the speech and OCR cues on files. ``speech`` / ``ocr``: a SpeechRecognizer / TextReader, or None for
    the shared default instance (created, not loaded, on first use). ``parallel``: run a file's cues at the same
    time (one thread each)."""

    def __init__(self, speech=None, ocr=None, *, parallel: bool = False):
        self._speech, self._ocr = speech, ocr
        self.parallel = parallel
        self._read: dict[str, CueResult] = {}  # path -> the OCR result read beside another stage's decode pass

    @property
    def speech(self):
        if self._speech is None:
            self._speech = shared_recognizer()
        return self._speech

    @property
    def ocr(self):
        if self._ocr is None:
            self._ocr = shared_reader()
        return self._ocr

    def recipes(self, cues: Iterable[str] = CUES) -> dict[str, str]:
        """cue -> the identity of its extractor and settings (store it; a different recipe means re-extract)."""
        return {cue: self._tool(cue).recipe for cue in _check(cues)}

    def extract(self, path, cues: Iterable[str] = CUES) -> dict[str, CueResult]:
        """cue -> CueResult for ``path``; one cue's failure is its result's ``error``, never an exception.

        With ``parallel`` (see the constructor) the cues run at the same time, one Python thread each (the models
        release the GIL): on 2 cores, speech and OCR with one thread each finish sooner than one after the other.
        """
        cues = _check(cues)
        if not self.parallel or len(cues) < 2:
            return {cue: self._run(cue, path) for cue in cues}

        for cue in cues:
            self._tool(cue)  # create the shared tools in this thread
        with ThreadPoolExecutor(len(cues), thread_name_prefix="cue") as pool:
            futures = {cue: pool.submit(self._run, cue, path) for cue in cues}
            return {cue: f.result() for cue, f in futures.items()}

    def text_beside(self, path, duration: float | None) -> TextSession:
        """The OCR session of ``path`` (its video stream declaring ``duration`` s) for a stage that decodes its
        frames anyway to feed (``FrameStream.tap``); give it back to ``read_beside`` once its frames are fed."""
        return self.ocr.session(path, duration)

    def read_beside(self, path, session: TextSession, report) -> None:
        """Keep the result of ``session`` (fed every frame of ``path``'s stream, whose ``report`` says where they
        end) for the next ``extract`` of ``path``'s OCR."""
        self._read[os.fspath(path)] = self._run("ocr", path, lambda: session.finish(report), session.began)

    def _tool(self, cue: str):
        return self.speech if cue == "speech" else self.ocr

    def _run(self, cue: str, path, work: Callable | None = None, began: float | None = None) -> CueResult:
        if work is None and cue == "ocr" and (read := self._read.pop(os.fspath(path), None)) is not None:
            return read
        began = time.perf_counter() if began is None else began
        result = CueResult(cue)
        try:
            tool = self._tool(cue)
            result.recipe = tool.recipe
            result.segments, result.stats = work() if work is not None else tool.extract(path)
        except ReelsearchError as exc:
            result.segments, result.error = [], str(exc)
        except Exception as exc:  # noqa: BLE001 - an engine's own failure must not lose the other cue
            result.segments, result.error = [], f"{escaped_path(path)}: {cue} failed ({type(exc).__name__}: {exc})"
        result.seconds = time.perf_counter() - began
        return result


def _check(cues: Iterable[str]) -> list[str]:
    cues = list(cues)
    for cue in cues:
        if cue not in CUES:
            raise ReelsearchError(f"unknown cue {cue!r}; known: {', '.join(CUES)}")
    return cues
