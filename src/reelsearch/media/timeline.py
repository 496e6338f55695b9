"""A video's frames sampled by time and streamed: one decode pass, bounded memory, whatever the length.

:class:`FrameStream` decodes a file front to back once (no seek), reads each frame's time from its own timestamp
(``pts`` x ``time_base``, so a variable frame rate samples right) and converts to RGB only the frames it keeps: at
``rate`` frames a second, the frame *displayed* at 0, 1/rate, 2/rate, ... s (the last one whose time is <= the
target; a frame on screen across several targets is kept once, at its own time). It holds at most two decoded
frames, so a 10-hour file streams in the memory of a short one. An image is a one-frame video.

A file that stops decoding part way (truncated, corrupt data) yields what decoded, then says where it stopped in
:attr:`FrameStream.report` (:meth:`StreamReport.line` is the one line to show); so does a container whose declared
duration is not what its frames cover. A file with no video stream raises :class:`~reelsearch.errors.NoVideoStream`
when opened (its sound may still be indexed); an unreadable one, a :class:`~reelsearch.errors.MediaError`.

``skip="nonref"`` asks the decoder to skip frames no other frame refers to (most B-frames): faster, and a kept frame
is then the latest *decoded* frame at its target, at most a few frame intervals early (docs/extraction.md, measured).

Another consumer of the same frames at its own rate and size takes them from the same pass (:meth:`FrameStream.tap`:
the index's on-screen-text reader beside its picture stage), so a file is decoded once for both.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from reelsearch.errors import MediaError, ReelsearchError
from reelsearch.media.container import (
    escaped_path,
    ffmpeg_message,
    import_av,
    is_image_path,
    open_media,
    reformatter,
    stream_info,
    target_size,
    to_rgb,
    video_stream,
)
from reelsearch.media.sampling import TIME_EPS

SKIP_MODES = ("none", "nonref")
#: Frames ending this much (seconds, or this share of the declared duration if larger) before the container's
#: declared duration are reported as stopping early.
SHORT_SECONDS, SHORT_SHARE = 2.0, 0.02


@dataclass
class StreamReport:
    """What a :class:`FrameStream` found: the declared facts, how far frames went, and why they stopped.

    ``declared``: the container's duration of the video stream (s; None when it declares none); ``end``: where the
    decoded frames end (the last one's time + its duration); ``problem``: the decoder's error that stopped it early
    (None when the data simply ended).
    """

    path: str
    declared: float | None
    fps: float
    width: int = 0
    height: int = 0
    rotation: int = 0
    is_image: bool = False
    sampled: int = 0
    decoded: int = 0
    end: float = 0.0
    finished: bool = False
    problem: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def short(self) -> bool:
        """Whether the frames end well before the declared duration (a truncated file, or a wrong duration)."""
        if self.declared is None or self.is_image or not self.finished:
            return False
        return self.end < self.declared - max(SHORT_SECONDS, SHORT_SHARE * self.declared)

    @property
    def complete(self) -> bool:
        """The stream was read to its end, without errors, and covers what the container declares."""
        return self.finished and self.problem is None and not self.short

    def line(self) -> str | None:
        """One line saying what went wrong, naming the file and where frames stop (or that they run past the
        declared duration); None when nothing did."""
        if not self.finished:
            return f"{self.path}: not read to its end (frames up to {self.end:.1f} s)"
        of = f" of {self.declared:.1f} s declared" if self.declared is not None else ""
        if self.problem is not None:
            return f"{self.path}: frames stop at {self.end:.1f} s{of}: {self.problem}; indexed what decoded"
        if self.short:
            return (f"{self.path}: frames stop at {self.end:.1f} s{of} (truncated, or the container's duration is "
                    "wrong); indexed what decoded")
        if self.notes:
            return f"{self.path}: {'; '.join(self.notes)}; times are the frames' own"
        return None


class _Sampler:
    """Which decoded frames one ``rate`` keeps (see the module): fed every frame in order, it gives back each kept
    (time, frame) once the next frame shows it is the one displayed at its target."""

    def __init__(self, rate: float):
        self.rate, self.step = rate, 1.0 / rate
        self.k = 0  # the next target is k * step
        self.pending = None  # (t, frame): the newest frame at or before the target, not yet kept
        self.kept = 0

    def push(self, t: float, frame) -> tuple | None:
        out = None
        if self.pending is not None and t > self.k * self.step + TIME_EPS:
            out, self.pending = self.pending, None  # pending is displayed at target k (and up to t)
        elif self.pending is None and self.kept == 0 and t > TIME_EPS:
            self.k = math.floor(t * self.rate + TIME_EPS) + 1
            self.kept += 1
            return t, frame  # the first frame is displayed before it starts
        if self.pending is None:
            self.k = max(self.k, math.ceil((t - TIME_EPS) * self.rate))
        self.pending = (t, frame)
        self.kept += out is not None
        return out

    def last(self, duration: Callable) -> tuple | None:
        """The pending frame when it is still on screen at its target once the frames end."""
        if self.pending is not None and self.pending[0] + duration(self.pending[1]) > self.k * self.step + TIME_EPS:
            self.kept += 1
            return self.pending
        return None


@dataclass
class _Tap:
    sampler: _Sampler
    short_side: int | None
    take: Callable[[float, np.ndarray], bool]
    converter: object  # media.container.reformatter()
    size: tuple[int, int] | None = None
    open: bool = True


class FrameStream:
    """``for t, rgb in FrameStream(path, rate=1.0, short_side=256)``: the sampled frames, one decode pass.

    ``t``: seconds from the start of the video stream; ``rgb``: uint8 [H, W, 3] as displayed (rotation applied),
    the shorter side at most ``short_side`` (area filter; every frame at the first one's size). ``threads``:
    decoder threads (0: FFmpeg's choice; frame and slice threads). ``skip``: ``"none"`` or ``"nonref"`` (see the
    module). Opening raises MediaError (unreadable, not media, huge frames) or NoVideoStream (audio only);
    iterating never raises for bad data: it stops, and :attr:`report` says where and why.
    """

    def __init__(self, path: str | os.PathLike, rate: float = 1.0, short_side: int | None = None, *,
                 threads: int = 0, skip: str = "none"):
        if not rate > 0:
            raise ReelsearchError(f"sampling rate must be > 0 frames a second, got {rate}")
        if skip not in SKIP_MODES:
            raise ReelsearchError(f"unknown skip mode {skip!r}; use one of {', '.join(SKIP_MODES)}")
        self.path, self.rate, self.short_side = path, float(rate), short_side
        self.shown = escaped_path(path)
        self.container = open_media(path)
        try:
            self.stream = video_stream(self.container, self.shown)
            self.stream.thread_type = "AUTO"
            if threads:
                self.stream.codec_context.thread_count = threads
            if skip != "none":
                self.stream.codec_context.skip_frame = skip.upper()
            self.s0, duration, fps = stream_info(self.container, self.stream)
        except BaseException:
            self.container.close()
            raise
        declared = None if math.isnan(duration) else duration
        image = is_image_path(path) or (self.stream.frames == 1 and (declared is None or declared <= 0.1))
        self.report = StreamReport(self.shown, None if image else declared, 0.0 if image else fps, is_image=image)
        self._size: tuple[int, int] | None = None
        self._taps: list[_Tap] = []
        self._started = False
        tb = self.stream.time_base  # a decoded frame's own time base: a frame's time in integers, not Fractions
        self._tb = (tb.numerator, tb.denominator) if tb else None
        self._rotation = 0  # degrees, as the last frame converted was turned
        self._converter = reformatter()  # the sampled frames' (a tap has its own: another size)

    def __enter__(self) -> FrameStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.container.close()

    def tap(self, rate: float, short_side: int | None, take: Callable[[float, np.ndarray], bool]) -> None:
        """Also give ``take(t, rgb)`` the frames this pass samples at ``rate`` and ``short_side`` (chosen as a stream
        of their own would choose them: with ``skip="none"``, the same frames), in order, in the thread that
        iterates, each before the stream's own frames that follow it; ``take`` returns False to get no more.
        Call it before iterating."""
        if not rate > 0:
            raise ReelsearchError(f"sampling rate must be > 0 frames a second, got {rate}")
        if self._started:
            raise ReelsearchError(f"{self.shown}: tap a FrameStream before reading it")
        self._taps.append(_Tap(_Sampler(float(rate)), short_side, take, reformatter()))

    def __iter__(self) -> Iterator[tuple[float, np.ndarray]]:
        if self._started:
            raise ReelsearchError(f"{self.shown}: a FrameStream is read once")
        self._started = True
        sampler = _Sampler(self.rate)
        last_t = -math.inf
        for frame in self._frames():
            t = self._time(frame, last_t)
            last_t = t
            self.report.end = max(self.report.end, t + self._duration(frame))
            if self.report.is_image:
                for tap in self._taps:
                    self._give(tap, (0.0, frame))
                yield self._keep(0.0, frame)
                break
            for tap in self._taps:
                self._give(tap, tap.sampler.push(t, frame))
            if (kept := sampler.push(t, frame)) is not None:
                yield self._keep(*kept)
        for tap in self._taps:
            self._give(tap, tap.sampler.last(self._duration))
        if (kept := sampler.last(self._duration)) is not None:
            yield self._keep(*kept)
        self.report.finished = True
        if self.report.declared is not None and self.report.end > self.report.declared + max(
                SHORT_SECONDS, SHORT_SHARE * self.report.declared):
            self.report.notes.append(f"frames run to {self.report.end:.1f} s, past the {self.report.declared:.1f} s "
                                     "the container declares")

    # ------------------------------------------------------------------------------------------ internals
    def _frames(self):
        av = import_av()
        frames = self.container.decode(self.stream)
        while True:
            try:
                frame = next(frames)
            except (StopIteration, av.error.EOFError):
                return
            except av.error.FFmpegError as exc:
                self.report.problem = f"corrupt video data ({ffmpeg_message(exc)})"
                return
            self.report.decoded += 1
            yield frame

    def _time(self, frame, last_t: float) -> float:
        """The frame's time (s from the stream's start): its pts, else the previous frame's + one frame; never
        before the previous frame (a broken timestamp does not reorder the stream)."""
        pts = frame.pts
        if pts is not None and self._tb is not None:
            t = pts * self._tb[0] / self._tb[1] - self.s0  # = float(pts * time_base): one correctly rounded division
        else:
            t = last_t + 1.0 / (self.report.fps or 25.0) if last_t > -math.inf else 0.0
        return max(t, last_t)

    def _duration(self, frame) -> float:
        duration = frame.duration
        if duration and self._tb is not None:
            return duration * self._tb[0] / self._tb[1]
        return 1.0 / self.report.fps if self.report.fps else 0.0

    def _keep(self, t: float, frame) -> tuple[float, np.ndarray]:
        if self._size is None:
            self._size = target_size(frame.width, frame.height, self.short_side)
        img = self._rgb(frame, self._size, self._converter)
        if self.report.sampled == 0:
            self.report.rotation = self._rotation
            w, h = frame.width, frame.height
            self.report.width, self.report.height = (h, w) if self._rotation in (90, 270) else (w, h)
        self.report.sampled += 1
        return float(t), img

    def _give(self, tap: _Tap, kept: tuple | None) -> None:
        if kept is None or not tap.open:
            return
        t, frame = kept
        if tap.size is None:
            tap.size = target_size(frame.width, frame.height, tap.short_side)
        tap.open = tap.take(float(t), self._rgb(frame, tap.size, tap.converter)) is not False

    def _rgb(self, frame, size: tuple[int, int], converter) -> np.ndarray:
        try:
            img, self._rotation = to_rgb(frame, self.stream, None, size, converter)
        except MediaError as exc:
            raise MediaError(self.shown, exc.problem) from None
        return img
