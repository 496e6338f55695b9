"""The timed text a cue extractor gives: a :class:`CueSegment` per piece of text, a :class:`CueResult` per cue and
file; ``shared_instance`` keeps one loaded model per process."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class CueSegment:
    """A timed piece of text: ``cue`` ("speech" | "ocr"), seconds ``start`` to ``end`` from the start of the video,
    ``text``, ``confidence`` in [0, 1].

    Speech segments may carry ``words`` ((start, end, word) triples); OCR segments carry ``box`` = (x0, y0, x1, y1),
    the text's bounding box as fractions of the frame's width and height.
    """

    cue: str
    start: float
    end: float
    text: str
    confidence: float
    box: tuple[float, float, float, float] | None = None
    words: tuple[tuple[float, float, str], ...] | None = None

    def to_json(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if v is not None}
        for key in ("box", "words"):
            if key in out:
                out[key] = [list(x) if isinstance(x, tuple) else x for x in out[key]]
        return out

    @classmethod
    def from_json(cls, obj: Mapping) -> CueSegment:
        box = obj.get("box")
        words = obj.get("words")
        return cls(str(obj["cue"]), float(obj["start"]), float(obj["end"]), str(obj["text"]),
                   float(obj["confidence"]), tuple(box) if box is not None else None,
                   tuple((float(a), float(b), str(w)) for a, b, w in words) if words is not None else None)


@dataclass
class CueResult:
    """One cue's outcome for one file: its segments, or the ``error`` that stopped it (segments then empty).

    ``recipe`` identifies the extractor and its settings (what produced the segments); ``stats`` holds counts such
    as frames sampled and frames read by OCR; ``seconds`` is the wall time spent.
    """

    cue: str
    segments: list[CueSegment] = field(default_factory=list)
    error: str | None = None
    recipe: str = ""
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


_SHARED: dict[tuple, object] = {}
_SHARED_LOCK = threading.Lock()


def shared_instance(factory: Callable, **options):
    """One ``factory(**options)`` per factory and options for the whole process (models then load once)."""
    key = (factory, tuple(sorted(options.items())))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = factory(**options)
        return _SHARED[key]
