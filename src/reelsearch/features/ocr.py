"""On-screen text cue: PP-OCR (``rapidocr-onnxruntime``, its bundled ONNX models) on the frames where the picture
changed, with the same text across consecutive frames merged into one timed segment.

Frames are sampled every ``interval`` seconds (1 s by default). Reading text costs about 0.2-1 s a frame on a CPU,
so a cheap test skips frames that look like the last frame read: both are shrunk to small grey thumbnails
(:func:`grey_thumbnail`) and the share of thumbnail pixels whose grey level moved by more than ``CHANGE_DELTA``
is compared with ``CHANGE_THRESHOLD`` (values chosen by measurement: docs/speech-and-text.md). A skipped frame
keeps the text of the last frame read. A text line read on consecutive frames (the same text, up to OCR noise)
becomes one segment from the first frame it was read on to the first frame without it. Install with
``pip install 'reelsearch[ocr]'``.

A :class:`TextSession` reads one video fed frame by frame: from a decode pass of its own (:meth:`TextReader.extract`)
or from another stage's (``reelsearch index``: its picture stage's pass, ``FrameStream.tap``), the same frames either
way; a thread of its own reads the selected frames while the decoder goes on.
"""

from __future__ import annotations

import difflib
import os
import queue
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from reelsearch.errors import MediaError, ReelsearchError
from reelsearch.extras import require
from reelsearch.features.cue_types import CueSegment, shared_instance
from reelsearch.media.decode import escaped_path, is_image_path, probe
from reelsearch.media.timeline import FrameStream, StreamReport

THUMB_SHORT_SIDE = 72  # px: the grey thumbnails the change test compares
CHANGE_DELTA = 12  # grey levels (of 255) a thumbnail pixel must move to count as changed
CHANGE_THRESHOLD = 0.0005  # share of changed thumbnail pixels (about 5 of 9,216) from which a frame is read again
SAME_TEXT = 0.8  # difflib ratio from which two readings are the same text
READ_AHEAD = 4  # selected frames a TextSession holds for its reader thread before the decoder waits
_WORD = re.compile(r"\w", re.UNICODE)


def grey_thumbnail(image: np.ndarray, short_side: int = THUMB_SHORT_SIDE) -> np.ndarray:
    """uint8 [h, w] grey version of an RGB frame with its shorter side ``short_side`` px (area averaging)."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    h, w = image.shape[:2]
    scale = short_side / min(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    grey = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA)


def frame_change(a: np.ndarray, b: np.ndarray, delta: int = CHANGE_DELTA) -> float:
    """Share of pixels of two equal-size grey thumbnails whose level differs by more than ``delta`` (0..1)."""
    if a.shape != b.shape:
        return 1.0
    return float(np.mean(np.abs(a.astype(np.int16) - b.astype(np.int16)) > delta))


class FrameSelector:
    """Says, frame by frame, whether the picture changed since the last frame it selected (the first always is)."""

    def __init__(self, threshold: float = CHANGE_THRESHOLD, delta: int = CHANGE_DELTA,
                 short_side: int = THUMB_SHORT_SIDE):
        self.threshold, self.delta, self.short_side = threshold, delta, short_side
        self._last: np.ndarray | None = None

    def __call__(self, image: np.ndarray) -> bool:
        thumb = grey_thumbnail(image, self.short_side)
        if self._last is not None and frame_change(self._last, thumb, self.delta) < self.threshold:
            return False
        self._last = thumb
        return True


@dataclass(frozen=True)
class TextBox:
    """One line of text read on one frame: ``box`` = (x0, y0, x1, y1) as fractions of the frame."""

    text: str
    confidence: float
    box: tuple[float, float, float, float]


@dataclass
class _Track:
    key: str
    best: TextBox
    start: float
    confidences: list[float] = field(default_factory=list)


class TextTracks:
    """Merges the lines read on successive frames into segments (same text on consecutive reads = one segment)."""

    def __init__(self, same_text: float = SAME_TEXT):
        self.same_text = same_text
        self._open: list[_Track] = []
        self.segments: list[CueSegment] = []

    def observe(self, t: float, boxes: list[TextBox]) -> None:
        """The lines read on the frame at ``t`` s: continue matching open segments, close the others, open new."""
        still: list[_Track] = []
        for box in boxes:
            key = _text_key(box.text)
            track = self._match(key)
            if track is None:
                track = _Track(key, box, t)
            else:
                self._open.remove(track)
                if box.confidence > track.best.confidence:
                    track.best, track.key = box, key
            track.confidences.append(box.confidence)
            still.append(track)
        self._close(self._open, t)
        self._open = still

    def finish(self, end: float) -> list[CueSegment]:
        """Close every open segment at ``end`` s; the segments in order of appearance."""
        self._close(self._open, end)
        self._open = []
        return sorted(self.segments, key=lambda s: (s.start, s.box[1] if s.box else 0.0, s.box[0] if s.box else 0.0))

    def _match(self, key: str) -> _Track | None:
        best, best_ratio = None, self.same_text
        for track in self._open:
            ratio = 1.0 if track.key == key else difflib.SequenceMatcher(None, track.key, key).ratio()
            if ratio >= best_ratio:
                best, best_ratio = track, ratio
        return best

    def _close(self, tracks: list[_Track], end: float) -> None:
        for tr in tracks:
            self.segments.append(CueSegment("ocr", round(tr.start, 3), round(max(end, tr.start), 3), tr.best.text,
                                            round(float(np.mean(tr.confidences)), 4), box=tr.best.box))


def _text_key(text: str) -> str:
    return " ".join(re.sub(r"[^\w%]+", " ", text.lower()).split())


class TextReader:
    """Reads on-screen text of files as OCR :class:`CueSegment` s; the OCR models load on first use.

    threads: ONNX Runtime threads. interval: seconds between sampled frames. short_side: frames are decoded (and
    text detection runs) with this shorter side in px. select: skip frames whose picture did not change (see the
    module docstring); ``change_threshold`` / ``change_delta`` tune that test. min_confidence: drop lines read
    with a lower recognition score. max_frames: cap on frames sampled per file (spread uniformly).
    """

    cue = "ocr"

    def __init__(self, *, threads: int = 1, interval: float = 1.0, short_side: int = 480, select: bool = True,
                 change_threshold: float = CHANGE_THRESHOLD, change_delta: int = CHANGE_DELTA,
                 min_confidence: float = 0.6, max_frames: int | None = None):
        if threads < 1 or not interval > 0 or short_side < 32:
            raise ReelsearchError(f"bad OCR settings: threads={threads}, interval={interval}, short_side={short_side}")
        self.threads, self.interval, self.short_side, self.select = threads, float(interval), short_side, select
        self.change_threshold, self.change_delta, self.min_confidence = change_threshold, change_delta, min_confidence
        self.max_frames = max_frames
        self._engine = None
        self._lock = threading.Lock()

    @property
    def recipe(self) -> str:
        """Identity of the models and the settings that change what is read."""
        sel = f"select{self.change_threshold:g}@{self.change_delta}" if self.select else "all"
        return (f"ocr:rapidocr-ppocrv4:{self.short_side}px:every{self.interval:g}s:{sel}"
                f":conf{self.min_confidence:g}:max{self.max_frames or 0}")

    @property
    def engine(self):
        """The RapidOCR engine (PP-OCRv4 detection + recognition, PP-OCR direction classifier), loaded once."""
        with self._lock:
            if self._engine is None:
                module = require("rapidocr_onnxruntime", "ocr", "on-screen text recognition (OCR)")
                n = min(self.threads, os.cpu_count() or 1)
                self._engine = module.RapidOCR(intra_op_num_threads=n, inter_op_num_threads=1,
                                               det_limit_side_len=self.short_side, det_limit_type="min")
            return self._engine

    def read_image(self, image: np.ndarray) -> list[TextBox]:
        """The text lines of one RGB uint8 frame, top to bottom."""
        import cv2  # noqa: PLC0415 - optional package (media extra)

        h, w = image.shape[:2]
        engine = self.engine
        with self._lock:
            result, _ = engine(cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR))
        boxes = []
        for quad, text, score in result or []:
            text = " ".join(str(text).split())
            if float(score) < self.min_confidence or len(_WORD.findall(text)) < 2:
                continue
            q = np.asarray(quad, dtype=np.float64)
            box = (q[:, 0].min() / w, q[:, 1].min() / h, q[:, 0].max() / w, q[:, 1].max() / h)
            boxes.append(TextBox(text, float(score), tuple(round(float(min(max(v, 0.0), 1.0)), 4) for v in box)))
        return boxes

    def extract(self, path: str | os.PathLike) -> tuple[list[CueSegment], dict]:
        """(segments, stats) of a video or image file; stats counts ``frames`` sampled and ``read`` by OCR.

        The frames come from one decode pass (``FrameStream``: the frame displayed every ``interval`` s, spread
        over the file within ``max_frames``); a file that stops decoding part way is read as far as it decodes.
        Raises MediaError naming the file when no frame can be decoded."""
        video = None if is_image_path(path) else probe(path).get("video")
        if video is None and not is_image_path(path):  # no video stream (an audio file): nothing on screen
            return [], {"frames": 0, "read": 0}
        with self.session(path, (video or {}).get("duration")) as session:
            with FrameStream(path, session.rate, self.short_side) as stream:
                for t, image in stream:
                    if not session.feed(t, image):
                        break
            return session.finish(stream.report)

    def session(self, path: str | os.PathLike, duration: float | None) -> TextSession:
        """A :class:`TextSession` of ``path``, whose video stream declares ``duration`` seconds (None: unknown)."""
        return TextSession(self, path, duration)

    def read(self, path: str | os.PathLike) -> list[CueSegment]:
        """OCR segments of the file (none when no text is on screen)."""
        return self.extract(path)[0]

    def _read(self, image: np.ndarray, path) -> list[TextBox]:
        try:
            return self.read_image(image)
        except ReelsearchError:
            raise
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime / OpenCV errors
            raise MediaError(escaped_path(path), f"OCR failed on a frame ({type(exc).__name__}: {exc})") from None


class TextSession:
    """One video's OCR, fed its frames in order: ``feed(t, rgb)`` each frame sampled at ``rate`` and ``short_side``,
    then ``finish(report)`` -> (segments, stats) as :meth:`TextReader.extract` gives them. The change test runs in
    the feeding thread; the frames it selects are read by a thread of the session's own, at most ``READ_AHEAD``
    behind (the feeder waits beyond that: bounded memory). Leaving its ``with`` block without ``finish`` stops the
    reader without reading what is left."""

    def __init__(self, reader: TextReader, path: str | os.PathLike, duration: float | None):
        self.reader, self.path, self.short_side = reader, path, reader.short_side
        self.rate = 1.0 / reader.interval
        if reader.max_frames is not None and (duration or 0.0) * self.rate > reader.max_frames:
            self.rate = reader.max_frames / duration  # evenly spread within the cap
        self.stats = {"frames": 0, "read": 0}
        self.began = time.perf_counter()
        self._tracks = TextTracks()
        self._selector = FrameSelector(reader.change_threshold, reader.change_delta)
        self._error: BaseException | None = None
        self._stop = False
        self._frames: queue.Queue = queue.Queue(READ_AHEAD)
        self._thread = threading.Thread(target=self._read_frames, name="ocr", daemon=True)
        self._thread.start()

    def __enter__(self) -> TextSession:
        return self

    def __exit__(self, *exc) -> None:
        self._stop = True
        self._end()

    def feed(self, t: float, image: np.ndarray) -> bool:
        """Take the frame displayed at ``t`` s; False once ``max_frames`` are taken (or reading failed)."""
        if self._error is not None or (self.reader.max_frames is not None
                                       and self.stats["frames"] >= self.reader.max_frames):
            return False
        self.stats["frames"] += 1
        if not self.reader.select or self._selector(image):
            self.stats["read"] += 1
            self._frames.put((float(t), image))
        return True

    def finish(self, report: StreamReport) -> tuple[list[CueSegment], dict]:
        """(segments, stats) once every frame fed is read; ``report``: the stream's (where its frames end).
        Raises what reading raised, or MediaError naming the file when no frame was fed."""
        self._end()
        if self._error is not None:
            raise self._error
        if not self.stats["frames"]:
            raise MediaError(report.path, f"no frame decoded ({report.problem or 'empty video stream'})")
        return self._tracks.finish(0.0 if report.is_image else report.end), self.stats

    def _end(self) -> None:
        if self._thread.is_alive():
            self._frames.put(None)
            self._thread.join()

    def _read_frames(self) -> None:
        while (item := self._frames.get()) is not None:
            if self._error is None and not self._stop:
                try:
                    self._tracks.observe(item[0], self.reader._read(item[1], self.path))
                except BaseException as exc:  # noqa: BLE001 - raised again by finish, in the caller's thread
                    self._error = exc


def shared_reader(**options) -> TextReader:
    """One TextReader per set of options for the whole process (its model loads once, on first use)."""
    return shared_instance(TextReader, **options)
