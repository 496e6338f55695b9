"""Opening media files with PyAV (FFmpeg): file kinds by extension, printable names, the video stream and its facts,
one decoded frame to RGB as displayed (rotation applied, resized), and ``probe``.

What :mod:`reelsearch.media.decode` (a video's sampled frames at once) and :mod:`reelsearch.media.timeline` (frames
streamed by time) share.
"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from reelsearch.errors import MediaError, NoVideoStream
from reelsearch.extras import extra_error

#: Photos, phones' HEIC / HEIF and AVIF among them (FFmpeg decodes them: HEVC and AV1 stills, tiled grids too).
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".jp2",
                              ".heic", ".heif", ".avif"})
VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ts", ".m2ts", ".mts", ".flv", ".wmv",
     ".3gp", ".ogv", ".gif", ".vob", ".asf", ".divx"}
)
MEDIA_EXTENSIONS = IMAGE_EXTENSIONS | VIDEO_EXTENSIONS
#: Files of sound alone (a library indexes them for what is said: ``reelsearch.index.media.LIBRARY_EXTENSIONS``).
AUDIO_EXTENSIONS = frozenset({".wav", ".mp3", ".flac", ".m4a", ".aac", ".ogg", ".opus", ".wma"})

#: Frames larger than this (width * height) are refused: 2**26 px = 8192 x 8192.
MAX_PIXELS = 1 << 26


def is_image_path(path: str | os.PathLike) -> bool:
    """Whether ``path``'s extension is an image's (``os.path.splitext``: a search asks it of every hit)."""
    return os.path.splitext(os.fsdecode(path))[1].lower() in IMAGE_EXTENSIONS


def escaped_path(path: str | os.PathLike) -> str:
    """``path`` as text that keeps every byte: undecodable bytes as \\xNN escapes, so that two names never read the
    same (feature-store keys, media errors). What people read is ``reelsearch.display.display_path``."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def import_av():
    """PyAV, or a MissingExtraError naming the [media] extra."""
    try:
        import av  # noqa: PLC0415 - optional package (media extra)
    except ImportError as exc:
        raise extra_error(exc) or exc from exc
    return av


def open_media(path: str | os.PathLike):
    """av.open that works for any file name: an undecodable name goes through a Python file object."""
    av = import_av()

    raw = os.fsencode(path)
    shown = escaped_path(path)
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
        raise MediaError(shown, f"not a readable media file or corrupt ({ffmpeg_message(exc)})") from None


def ffmpeg_message(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def video_stream(container, shown: str):
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise NoVideoStream(shown, f"no video stream (streams: {', '.join(kinds)})")
    vs = container.streams.video[0]
    cc = vs.codec_context
    if cc is None or not cc.name:
        raise MediaError(shown, f"unsupported video codec{codec_tag(vs)} (no decoder in this FFmpeg build)")
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


def codec_tag(stream) -> str:
    try:
        tag = stream.codec_tag
    except Exception:  # noqa: BLE001 - older PyAV
        return ""
    return f" {tag!r}" if tag else ""


def rotation(frame, vs) -> int:
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


def target_size(w: int, h: int, short_side: int | None) -> tuple[int, int]:
    if not short_side or min(w, h) <= short_side:
        return w, h
    scale = short_side / min(w, h)
    return max(1, round(w * scale)), max(1, round(h * scale))


def reformatter():
    """A converter of frames (``to_rgb``'s): it keeps FFmpeg's scaler between frames of one size and format, which a
    frame's own ``to_ndarray`` makes anew each time (most of the cost of converting a small frame: 0.3 ms of CPU)."""
    return import_av().video.reformatter.VideoReformatter()


def to_rgb(frame, vs, short_side: int | None, size: tuple[int, int] | None = None,
           converter=None) -> tuple[np.ndarray, int]:
    """``frame`` as RGB uint8 [H, W, 3] as displayed (rotated), its shorter side at most ``short_side`` (area filter),
    or resized to ``size`` = (width, height) before rotation; and the rotation applied (degrees). ``converter``: a
    ``reformatter()`` to reuse for a stream's frames (one per output size)."""
    w, h = size or target_size(frame.width, frame.height, short_side)
    if frame.width * frame.height > MAX_PIXELS:
        raise MediaError("", f"frame {frame.width}x{frame.height} is too large (limit {MAX_PIXELS} pixels)")
    interpolation = "AREA" if (w, h) != (frame.width, frame.height) else None
    if converter is None:
        img = frame.to_ndarray(width=w, height=h, format="rgb24", interpolation=interpolation)
    else:
        img = converter.reformat(frame, width=w, height=h, format="rgb24", interpolation=interpolation).to_ndarray()
    rot = rotation(frame, vs)
    if rot:
        img = np.ascontiguousarray(np.rot90(img, k=rot // 90))
    return img, rot


def frame_time(frame, vs, start: float, index: int, fps: float) -> float:
    if frame.pts is not None and frame.time_base is not None:
        return float(frame.pts * frame.time_base) - start
    if frame.time is not None:
        return float(frame.time) - start
    return index / fps if fps else float(index)


def stream_info(container, vs) -> tuple[float, float, float]:
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


def probe(path: str | os.PathLike) -> dict:
    """Container facts without decoding: duration, streams, video size/fps/codec/rotation, audio rate/channels, and
    the ``creation_time`` tag (the container's, else the first stream's with one; None without)."""
    shown = escaped_path(path)
    with open_media(path) as container:
        info: dict = {"path": shown, "format": container.format.name, "streams": [s.type for s in container.streams]}
        tags = [container.metadata, *(s.metadata for s in container.streams)]
        info["creation_time"] = next((t["creation_time"] for t in tags if t.get("creation_time")), None)
        info["duration"] = container.duration / 1_000_000 if container.duration is not None else None
        if container.streams.video:
            vs = container.streams.video[0]
            start, duration, fps = stream_info(container, vs)
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
