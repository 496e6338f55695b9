"""Frame and audio decoding with PyAV (FFmpeg): exact timestamp sampling, rotation, resize, images.

Sampling semantics (all times in seconds from the start of the video stream, so the first frame is at ~0):

* ``every:N`` keeps frame indices 0, N, 2N, ... (decode order = presentation order); every frame is decoded.
* ``interval:S`` keeps the frame *displayed* at 0, S, 2S, ... (the last frame whose timestamp is <= the target).
* ``uniform:K`` keeps the frames displayed at the centres of K equal segments of the duration.
* ``all`` keeps every frame.

``max_frames`` caps the count: when more would be sampled, that many are kept, spread uniformly over them.
A frame picked for two targets is kept once, so a video shorter than the plan gives fewer frames.
Time targets are decoded by seeking to the keyframe before a target whenever that keyframe lies beyond what
has already been decoded (exact: frames are decoded forward from the keyframe up to the target), else by
decoding forward; ``strategy="sequential"`` decodes everything and keeps the targets (the reference).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from reelsearch.errors import MediaError, ReelsearchError
from reelsearch.extras import extra_error

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".jp2"})
VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ts", ".m2ts", ".mts", ".flv", ".wmv",
     ".3gp", ".ogv", ".gif", ".vob", ".asf", ".divx"}
)
MEDIA_EXTENSIONS = IMAGE_EXTENSIONS | VIDEO_EXTENSIONS
#: Audio-only files are not searched for in folders, but a file given by name may be one (it has audio only).
AUDIO_EXTENSIONS = frozenset({".wav", ".mp3", ".flac", ".m4a", ".aac", ".ogg", ".opus", ".wma"})

#: Frames larger than this (width * height) are refused: 2**26 px = 8192 x 8192.
MAX_PIXELS = 1 << 26
#: Refuse to hold more than this many bytes of decoded RGB frames for one video (use short_side / max_frames).
MAX_DECODED_BYTES = 4 << 30
_EPS = 1e-6
_SEEK_MARGIN = 0.25  # seconds; covers the decode-vs-display delay of B-frame reordering


@dataclass(frozen=True)
class SamplingPolicy:
    """Which frames to keep: kind "every" (value = N), "interval" (seconds), "uniform" (K) or "all"."""

    kind: str = "interval"
    value: float = 0.5
    max_frames: int | None = None

    def __post_init__(self):
        if self.kind not in ("every", "interval", "uniform", "all"):
            raise ReelsearchError(f"unknown sampling kind {self.kind!r}; use every:N, interval:SECONDS, uniform:K, all")
        if self.kind != "all" and not self.value > 0:
            raise ReelsearchError(f"sampling {self.kind} needs a positive value, got {self.value}")
        if self.kind in ("every", "uniform") and self.value != int(self.value):
            raise ReelsearchError(f"sampling {self.kind} needs an integer, got {self.value}")
        if self.max_frames is not None and self.max_frames < 1:
            raise ReelsearchError(f"max_frames must be >= 1, got {self.max_frames}")

    def __str__(self) -> str:
        return "all" if self.kind == "all" else f"{self.kind}:{self.value:g}"


def parse_policy(spec: str, max_frames: int | None = None) -> SamplingPolicy:
    """Parse ``"every:10" | "interval:0.5" | "uniform:16" | "all"`` into a SamplingPolicy."""
    spec = spec.strip()
    if spec == "all":
        return SamplingPolicy("all", 0, max_frames)
    kind, sep, value = spec.partition(":")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not sep or number is None:
        raise ReelsearchError(f"bad sampling {spec!r}; use every:N, interval:SECONDS, uniform:K or all")
    return SamplingPolicy(kind, number, max_frames)


@dataclass
class Frames:
    """Decoded frames: ``images`` uint8 [T, H, W, 3] RGB as displayed (rotation applied), ``timestamps`` [T] s.

    ``width``/``height`` are the source's displayed size before any resize; ``fps`` the stream's average rate
    (0 for an image); ``duration`` in seconds (0 for an image).
    """

    images: np.ndarray
    timestamps: np.ndarray
    duration: float
    fps: float
    width: int
    height: int
    rotation: int = 0
    is_image: bool = False
    decoded: int = 0  # frames the decoder produced to get these (work done; seeking lowers it)
    next_images: np.ndarray | None = None  # with_next: the frame after each sampled one, [T, H, W, 3]

    def __len__(self) -> int:
        return len(self.images)


def is_image_path(path: str | os.PathLike) -> bool:
    """Whether ``path``'s extension is an image's (``os.path.splitext``: a search asks it of every hit)."""
    return os.path.splitext(os.fsdecode(path))[1].lower() in IMAGE_EXTENSIONS


def display_path(path: str | os.PathLike) -> str:
    """A printable form of ``path`` (undecodable bytes shown as \\xNN escapes)."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def _import_av():
    """PyAV, or a MissingExtraError naming the [media] extra."""
    try:
        import av  # noqa: PLC0415 - optional package (media extra)
    except ImportError as exc:
        raise extra_error(exc) or exc from exc
    return av


def _open(path: str | os.PathLike):
    """av.open that works for any file name: an undecodable name goes through a Python file object."""
    av = _import_av()

    raw = os.fsencode(path)
    shown = display_path(path)
    try:
        size = os.stat(raw).st_size
    except OSError as exc:
        raise MediaError(shown, f"cannot read file: {exc.strerror or exc}") from None
    if size == 0:
        raise MediaError(shown, "file is empty (0 bytes)")
    try:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            return av.open(open(raw, "rb"), "r")  # noqa: SIM115 - the container closes it
        return av.open(name, "r")
    except av.error.FFmpegError as exc:
        raise MediaError(shown, f"not a readable media file or corrupt ({_ffmpeg_message(exc)})") from None


def _ffmpeg_message(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def _video_stream(container, shown: str):
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise MediaError(shown, f"no video stream (streams: {', '.join(kinds)})")
    vs = container.streams.video[0]
    cc = vs.codec_context
    if cc is None or not cc.name:
        raise MediaError(shown, f"unsupported video codec{_codec_tag(vs)} (no decoder in this FFmpeg build)")
    w, h = cc.width, cc.height
    if not (w and h) and is_image_path(shown):
        w, h = _image_header_size(container.name if isinstance(container.name, str) else shown)
    if w and h and w * h > MAX_PIXELS:
        raise MediaError(shown, f"resolution {w}x{h} is too large (limit {MAX_PIXELS} pixels)")
    return vs


def _image_header_size(path: str) -> tuple[int, int]:
    """(width, height) from an image file's header without decoding (PNG directly, others via PIL if present)."""
    with contextlib.suppress(OSError, ValueError):
        with open(os.fsencode(path), "rb") as fh:
            head = fh.read(24)
        if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
            return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    with contextlib.suppress(Exception):
        from PIL import Image  # noqa: PLC0415 - optional package (Pillow)

        with Image.open(os.fsencode(path).decode("utf-8", "surrogateescape")) as im:
            return im.size
    return 0, 0


def _codec_tag(stream) -> str:
    try:
        tag = stream.codec_tag
    except Exception:  # noqa: BLE001 - older PyAV
        return ""
    return f" {tag!r}" if tag else ""


def _rotation(frame, vs) -> int:
    """Counter-clockwise display rotation in degrees (multiple of 90): display matrix, else the `rotate` tag."""
    rot = 0
    try:
        rot = int(round(frame.rotation or 0))
    except Exception:  # noqa: BLE001 - side data unreadable: fall back to the tag
        rot = 0
    if rot == 0:
        tag = vs.metadata.get("rotate")
        if tag:
            try:
                rot = -int(float(tag))  # the tag is clockwise
            except ValueError:
                rot = 0
    return int(round(rot / 90.0)) * 90 % 360


def _target_size(w: int, h: int, short_side: int | None) -> tuple[int, int]:
    if not short_side or min(w, h) <= short_side:
        return w, h
    scale = short_side / min(w, h)
    return max(1, round(w * scale)), max(1, round(h * scale))


def _to_rgb(frame, vs, short_side: int | None) -> tuple[np.ndarray, int]:
    w, h = _target_size(frame.width, frame.height, short_side)
    if frame.width * frame.height > MAX_PIXELS:
        raise MediaError("", f"frame {frame.width}x{frame.height} is too large (limit {MAX_PIXELS} pixels)")
    img = frame.to_ndarray(width=w, height=h, format="rgb24", interpolation="AREA" if (w, h) != (
        frame.width, frame.height) else None)
    rot = _rotation(frame, vs)
    if rot:
        img = np.ascontiguousarray(np.rot90(img, k=rot // 90))
    return img, rot


def _frame_time(frame, vs, start: float, index: int, fps: float) -> float:
    if frame.pts is not None and frame.time_base is not None:
        return float(frame.pts * frame.time_base) - start
    if frame.time is not None:
        return float(frame.time) - start
    return index / fps if fps else float(index)


def _stream_info(container, vs) -> tuple[float, float, float]:
    """(start seconds, duration seconds or nan, fps or 0) of the video stream."""
    tb = vs.time_base
    start = float(vs.start_time * tb) if vs.start_time is not None and tb else 0.0
    if vs.duration is not None and tb:
        duration = float(vs.duration * tb)
    elif container.duration is not None:
        duration = container.duration / 1_000_000 - max(0.0, start - (container.start_time or 0) / 1_000_000)
    else:
        duration = float("nan")
    rate = vs.average_rate or vs.guessed_rate or vs.base_rate
    fps = float(rate) if rate else 0.0
    return start, duration, fps


def spread(n: int, k: int) -> np.ndarray:
    """``k`` indices spread uniformly over ``range(n)`` (all of them when k >= n), first and last included."""
    if k >= n:
        return np.arange(n)
    if k == 1:
        return np.array([(n - 1) // 2])
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(int))


def plan_times(policy: SamplingPolicy, duration: float, fps: float, window: tuple[float, float]) -> np.ndarray:
    """Target times (s) of an interval/uniform policy over ``window`` = (begin, end) of the stream."""
    begin, end = window
    length = max(0.0, end - begin)
    if policy.kind == "interval":
        n = max(1, math.floor(length / policy.value - _EPS) + 1) if length > 0 else 1
        times = begin + policy.value * np.arange(n)
    elif policy.kind == "uniform":
        k = int(policy.value)
        times = begin + (np.arange(k) + 0.5) * length / k
    else:
        raise ValueError(policy.kind)
    if policy.max_frames is not None:
        times = times[spread(len(times), policy.max_frames)]
    return times


def probe(path: str | os.PathLike) -> dict:
    """Container facts without decoding: duration, streams, video size/fps/codec/rotation, audio rate/channels, and
    the ``creation_time`` tag (the container's, else the first stream's with one; None without)."""
    shown = display_path(path)
    with _open(path) as container:
        info: dict = {"path": shown, "format": container.format.name, "streams": [s.type for s in container.streams]}
        tags = [container.metadata, *(s.metadata for s in container.streams)]
        info["creation_time"] = next((t["creation_time"] for t in tags if t.get("creation_time")), None)
        info["duration"] = container.duration / 1_000_000 if container.duration is not None else None
        if container.streams.video:
            vs = container.streams.video[0]
            start, duration, fps = _stream_info(container, vs)
            cc = vs.codec_context
            tag = vs.metadata.get("rotate")
            info["video"] = {"codec": cc.name if cc else None, "width": cc.width if cc else None,
                             "height": cc.height if cc else None, "pix_fmt": cc.pix_fmt if cc else None, "fps": fps,
                             "frames": vs.frames or None,
                             "duration": None if math.isnan(duration) else duration, "start": start,
                             "rotate_tag": tag}
        if container.streams.audio:
            a = container.streams.audio[0].codec_context
            if a is not None:
                info["audio"] = {"codec": a.name, "sample_rate": a.sample_rate, "channels": a.channels}
    return info


class _Decoder:
    """Forward frame iterator over one video stream with seek support; tracks errors as MediaError."""

    def __init__(self, container, vs, shown: str, s0: float = 0.0):
        self.container, self.vs, self.shown, self.s0 = container, vs, shown, s0
        self._gen: Iterator | None = None
        self.decoded = 0
        self.eof = False
        self.last_time = -math.inf

    def restart_at(self, seconds_abs: float | None) -> None:
        if seconds_abs is not None:
            offset = int(math.floor(seconds_abs / self.vs.time_base))
            try:
                self.container.seek(offset, stream=self.vs, backward=True, any_frame=False)
            except Exception as exc:  # noqa: BLE001 - PyAV raises several types
                raise MediaError(self.shown, f"seek failed ({_ffmpeg_message(exc)})") from None
        self._gen = self.container.decode(self.vs)

    def next(self):
        av = _import_av()
        if self._gen is None:
            self._gen = self.container.decode(self.vs)
        try:
            frame = next(self._gen)
        except (StopIteration, av.error.EOFError):
            self.eof = True
            return None
        except av.error.FFmpegError as exc:
            raise MediaError(self.shown, f"corrupt video data after {self.decoded} frames "
                                         f"({_ffmpeg_message(exc)})") from None
        self.decoded += 1
        if frame.pts is not None and frame.time_base is not None:
            self.last_time = max(self.last_time, float(frame.pts * frame.time_base) - self.s0)
        return frame


def _keyframe_times(vs, start: float) -> np.ndarray | None:
    """Keyframe times (s, from stream start) from the container index, or None when it has none."""
    try:
        entries = vs.index_entries
        ts = [e.timestamp for e in entries if e.is_keyframe]
    except Exception:  # noqa: BLE001 - formats without an index
        return None
    if not ts:
        return None
    return np.asarray(ts, dtype=np.float64) * float(vs.time_base) - start


def decode_frames(
    path: str | os.PathLike,
    policy: SamplingPolicy | str = "interval:0.5",
    short_side: int | None = None,
    start: float | None = None,
    end: float | None = None,
    strategy: str = "auto",
    threads: int = 0,
    with_next: bool = False,
) -> Frames:
    """Decode the frames ``policy`` selects from ``path`` (an image is a one-frame video).

    short_side: resize (area filter) so the shorter displayed side is at most this many pixels.
    start/end: a clip window inside the file, seconds from the stream start.
    strategy: "auto" (seek past gaps that contain a keyframe, for interval/uniform), "seek" (seek whenever the
        target is beyond the next keyframe or 1 s away when the index is unknown), "sequential" (decode all).
    threads: decoder threads (0 = FFmpeg's choice); frame + slice threading ("AUTO").
    with_next: also return, in ``next_images``, the frame that follows each sampled frame (for optical flow;
        the frame itself when none follows, e.g. an image or the last frame).
    Raises MediaError for unreadable, empty, corrupt or truncated files, no video stream, or huge frames.
    """
    if isinstance(policy, str):
        policy = parse_policy(policy)
    if strategy not in ("auto", "seek", "sequential"):
        raise ReelsearchError(f"unknown decode strategy {strategy!r}")
    shown = display_path(path)
    with _open(path) as container:
        vs = _video_stream(container, shown)
        vs.thread_type = "AUTO"
        if threads:
            vs.codec_context.thread_count = threads
        s0, duration, fps = _stream_info(container, vs)
        dec = _Decoder(container, vs, shown, s0)
        image = is_image_path(path) or (vs.frames == 1 and (math.isnan(duration) or duration <= 0.1))
        if image:
            return _one_frame(dec, vs, shown, short_side, with_next)
        if policy.kind in ("every", "all"):
            picked = _decode_by_index(dec, vs, policy, s0, duration, fps, start, end, with_next)
        else:
            if math.isnan(duration):
                raise MediaError(shown, f"duration unknown, cannot sample {policy}; use every:N")
            begin = max(0.0, start or 0.0)
            stop = duration if end is None else min(end, duration)
            if stop <= begin:
                raise MediaError(shown, f"clip window [{begin}, {stop}] is empty (duration {duration:.3f} s)")
            targets = plan_times(policy, duration, fps, (begin, stop))
            keys = _keyframe_times(vs, s0) if strategy != "sequential" else None
            picked = _decode_at_times(dec, vs, targets, s0, fps, strategy, keys)
            if with_next and picked[-1][2] is None and not dec.eof:
                picked[-1][2] = dec.next()
        if not picked:
            raise MediaError(shown, "no frame could be decoded (truncated or corrupt?)")
        if dec.eof and not math.isnan(duration):
            # the data ended: it must reach near the declared end (the last 25 % / 2 s may be missing)
            want = duration if end is None else min(end, duration)
            last_t = max(dec.last_time, picked[-1][0])
            if last_t < want - max(2.0, 0.25 * want):
                raise MediaError(shown, f"truncated or corrupt: frames stop at {last_t:.2f} s of {want:.2f} s")
        frames = _assemble(picked, vs, shown, short_side, duration, fps, with_next=with_next)
        frames.decoded = dec.decoded
        return frames


def _one_frame(dec: _Decoder, vs, shown: str, short_side: int | None, with_next: bool) -> Frames:
    frame = dec.next()
    if frame is None:
        raise MediaError(shown, "image could not be decoded (truncated or corrupt?)")
    return _assemble([[0.0, frame, None]], vs, shown, short_side, 0.0, 0.0, is_image=True, with_next=with_next)


def _assemble(picked, vs, shown, short_side, duration, fps, is_image=False, with_next=False) -> Frames:
    first = picked[0][1]
    tw, th = _target_size(first.width, first.height, short_side)
    if len(picked) * tw * th * 3 * (2 if with_next else 1) > MAX_DECODED_BYTES:
        raise MediaError(shown, f"{len(picked)} frames of {tw}x{th} exceed {MAX_DECODED_BYTES >> 30} GiB; "
                                "lower max_frames or set short_side")
    images, nexts, rot = [], [], 0

    def convert(frame):
        try:
            img, r = _to_rgb(frame, vs, short_side)
        except MediaError as exc:
            raise MediaError(shown, exc.problem) from None
        if images and img.shape != images[0].shape:  # mid-stream size change: match the first frame
            f = _import_av().VideoFrame.from_ndarray(img, format="rgb24").reformat(
                width=images[0].shape[1], height=images[0].shape[0])
            img = f.to_ndarray(format="rgb24")
        return img, r

    for _, frame, nxt in picked:
        img, rot = convert(frame)
        images.append(img)
        if with_next:
            nexts.append(convert(nxt)[0] if nxt is not None else img)
    w, h = (first.height, first.width) if rot in (90, 270) else (first.width, first.height)
    return Frames(
        images=np.stack(images),
        timestamps=np.asarray([p[0] for p in picked], dtype=np.float64),
        duration=0.0 if math.isnan(duration) else float(duration),
        fps=fps,
        width=int(w),
        height=int(h),
        rotation=rot,
        is_image=is_image,
        next_images=np.stack(nexts) if with_next else None,
    )


def _decode_by_index(dec, vs, policy, s0, duration, fps, start, end, with_next=False):
    """every:N / all: frame indices counted from the first frame in the window."""
    step = 1 if policy.kind == "all" else int(policy.value)
    keep: set[int] | None = None
    if policy.max_frames is not None:
        total = vs.frames or 0
        if (start is not None or end is not None or not total) and fps and not math.isnan(duration):
            b = max(0.0, start or 0.0)
            e = duration if end is None else min(end, duration)
            total = max(1, round((e - b) * fps))
        if total:
            candidates = np.arange(0, total, step)
            keep = set(candidates[spread(len(candidates), policy.max_frames)].tolist())
    picked, index = [], 0
    if start:
        dec.restart_at(s0 + start)
    full = False
    while True:
        frame = dec.next()
        if frame is None:
            break
        if with_next and picked and picked[-1][2] is None:
            picked[-1][2] = frame
        if full:
            break
        t = _frame_time(frame, vs, s0, dec.decoded - 1, fps)
        if start is not None and t < start - _EPS:
            continue
        if end is not None and t >= end - _EPS:
            break
        if index % step == 0 and (keep is None or index in keep):
            picked.append([t, frame, None])
            if policy.max_frames is not None and len(picked) >= policy.max_frames:
                full = True
                if not with_next:
                    break
        index += 1
    return picked


def _decode_at_times(dec, vs, targets, s0, fps, strategy, keys):
    """The frame displayed at each target time (last frame with timestamp <= target), deduplicated."""
    picked: list = []
    prev = None  # (t, frame): the last frame decoded with t <= next target
    look = None  # (t, frame): a decoded frame beyond the current target
    pos = -math.inf  # time of the newest decoded frame
    exhausted = False

    def take(item, nxt=None):
        if not picked or abs(picked[-1][0] - item[0]) > _EPS:
            picked.append([item[0], item[1], nxt])

    for target in targets:
        if exhausted:
            break
        if prev is not None and look is not None and prev[0] <= target + _EPS < look[0]:
            take(prev)
            continue
        if strategy != "sequential" and _should_seek(target - _SEEK_MARGIN, pos, keys, strategy):
            # aim a little early: the index holds decode timestamps, which may precede the keyframe's display time
            dec.restart_at(s0 + max(0.0, target - _SEEK_MARGIN))
            prev = look = None
            back = 0
            first = dec.next()
            # a seek that lands after the target (imprecise index): back off further
            while first is not None and _frame_time(first, vs, s0, 0, fps) > target + _EPS and back < 4:
                back += 1
                dec.restart_at(s0 + max(0.0, target - 2.0 ** back))
                first = dec.next()
            if first is None:
                exhausted = True
                break
            look = (_frame_time(first, vs, s0, 0, fps), first)
            pos = look[0]
        while True:
            if look is not None:
                if look[0] > target + _EPS:
                    break
                prev, look = look, None
            frame = dec.next()
            if frame is None:
                exhausted = True
                break
            if picked and picked[-1][2] is None and prev is not None and prev[1] is picked[-1][1]:
                picked[-1][2] = frame
            look = (_frame_time(frame, vs, s0, dec.decoded - 1, fps), frame)
            pos = look[0]
        if prev is not None:
            take(prev, look[1] if look is not None else None)  # look: the frame decoded right after prev
        elif look is not None:  # target before the first frame: the first frame is displayed
            take(look)
    return picked


def _should_seek(target: float, pos: float, keys: np.ndarray | None, strategy: str) -> bool:
    if pos == -math.inf:
        return target > 0.0 and (keys is None or _key_before(keys, target) > 0.0)
    if keys is not None:
        return _key_before(keys, target) > pos + _EPS
    return strategy == "seek" and target - pos > 1.0


def _key_before(keys: np.ndarray, t: float) -> float:
    i = int(np.searchsorted(keys, t + _EPS, side="right")) - 1
    return float(keys[i]) if i >= 0 else -math.inf


def decode_audio(
    path: str | os.PathLike,
    sample_rate: int,
    start: float | None = None,
    end: float | None = None,
) -> np.ndarray | None:
    """The first audio track as mono float32 in [-1, 1] at ``sample_rate``; None when the file has no audio."""
    av = _import_av()

    shown = display_path(path)
    with _open(path) as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        if stream.codec_context is None or not stream.codec_context.name:
            raise MediaError(shown, f"unsupported audio codec{_codec_tag(stream)} (no decoder in this FFmpeg build)")
        resampler = av.AudioResampler(format="flt", layout="mono", rate=int(sample_rate))
        s0 = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        chunks: list[np.ndarray] = []
        first_t = None

        def add(frames):
            for f in frames:
                chunks.append(f.to_ndarray().reshape(-1))

        try:
            for frame in container.decode(stream):
                t = float(frame.time) - s0 if frame.time is not None else None
                if t is not None and end is not None and t >= end:
                    break
                if t is not None and start and t + frame.samples / frame.sample_rate <= start:
                    continue
                if first_t is None:
                    first_t = t if t is not None else 0.0
                add(resampler.resample(frame))
            add(resampler.resample(None))
        except av.error.EOFError:
            pass
        except av.error.FFmpegError as exc:
            raise MediaError(shown, f"corrupt audio data ({_ffmpeg_message(exc)})") from None
        if not chunks:
            return None
        wave = np.concatenate(chunks).astype(np.float32, copy=False)
        begin = first_t or 0.0
        if start and start > begin:
            wave = wave[int(round((start - begin) * sample_rate)):]
            begin = start
        if end is not None:
            wave = wave[: max(0, int(round((end - begin) * sample_rate)))]
        return np.clip(wave, -1.0, 1.0)


def thumbnail(path: str | os.PathLike, size: int = 256, at: float | None = None) -> np.ndarray:
    """One RGB frame (uint8 [H, W, 3], short side <= ``size``): the frame at ``at`` s, else the middle one."""
    if at is None:
        frames = decode_frames(path, SamplingPolicy("uniform", 1), short_side=size)
    else:
        frames = decode_frames(path, SamplingPolicy("interval", 1e9), short_side=size, start=at)
    return frames.images[0]
