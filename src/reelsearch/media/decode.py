"""Decoding a file's sampled frames at once, and its audio, with PyAV (FFmpeg): exact timestamp sampling, rotation,
resize, images. The public face of :mod:`reelsearch.media` for a whole clip (its policies, paths and ``probe`` are
importable from here); :mod:`reelsearch.media.timeline` streams a long video's frames by time instead.

A frame picked for two targets is kept once, so a video shorter than the plan gives fewer frames (the policies:
:mod:`reelsearch.media.sampling`). Time targets are decoded by seeking to the keyframe before a target whenever that
keyframe lies beyond what has already been decoded (exact: frames are decoded forward from the keyframe up to the
target), else by decoding forward; ``strategy="sequential"`` decodes everything and keeps the targets (the reference).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from reelsearch.errors import MediaError, ReelsearchError
from reelsearch.media.container import (
    AUDIO_EXTENSIONS,
    IMAGE_EXTENSIONS,
    MAX_PIXELS,
    MEDIA_EXTENSIONS,
    VIDEO_EXTENSIONS,
    codec_tag,
    escaped_path,
    ffmpeg_message,
    frame_time,
    import_av,
    is_image_path,
    open_media,
    probe,
    reformatter,
    stream_info,
    target_size,
    to_rgb,
    video_stream,
)
from reelsearch.media.sampling import TIME_EPS, SamplingPolicy, parse_policy, plan_times, spread

__all__ = [
    "AUDIO_EXTENSIONS", "IMAGE_EXTENSIONS", "MAX_DECODED_BYTES", "MAX_PIXELS", "MEDIA_EXTENSIONS", "VIDEO_EXTENSIONS",
    "Frames", "SamplingPolicy", "decode_audio", "decode_frames", "escaped_path", "is_image_path", "parse_policy",
    "plan_times", "probe", "spread", "thumbnail",
]

#: Refuse to hold more than this many bytes of decoded RGB frames for one video (use short_side / max_frames).
MAX_DECODED_BYTES = 4 << 30
_SEEK_MARGIN = 0.25  # seconds; covers the decode-vs-display delay of B-frame reordering


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
                raise MediaError(self.shown, f"seek failed ({ffmpeg_message(exc)})") from None
        self._gen = self.container.decode(self.vs)

    def next(self):
        av = import_av()
        if self._gen is None:
            self._gen = self.container.decode(self.vs)
        try:
            frame = next(self._gen)
        except (StopIteration, av.error.EOFError):
            self.eof = True
            return None
        except av.error.FFmpegError as exc:
            raise MediaError(self.shown, f"corrupt video data after {self.decoded} frames "
                                         f"({ffmpeg_message(exc)})") from None
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
    shown = escaped_path(path)
    with open_media(path) as container:
        vs = video_stream(container, shown)
        vs.thread_type = "AUTO"
        if threads:
            vs.codec_context.thread_count = threads
        s0, duration, fps = stream_info(container, vs)
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
    tw, th = target_size(first.width, first.height, short_side)
    if len(picked) * tw * th * 3 * (2 if with_next else 1) > MAX_DECODED_BYTES:
        raise MediaError(shown, f"{len(picked)} frames of {tw}x{th} exceed {MAX_DECODED_BYTES >> 30} GiB; "
                                "lower max_frames or set short_side")
    images, nexts, rot = [], [], 0
    converter = reformatter()

    def convert(frame):
        try:
            img, r = to_rgb(frame, vs, short_side, converter=converter)
        except MediaError as exc:
            raise MediaError(shown, exc.problem) from None
        if images and img.shape != images[0].shape:  # mid-stream size change: match the first frame
            f = import_av().VideoFrame.from_ndarray(img, format="rgb24").reformat(
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
        t = frame_time(frame, vs, s0, dec.decoded - 1, fps)
        if start is not None and t < start - TIME_EPS:
            continue
        if end is not None and t >= end - TIME_EPS:
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
        if not picked or abs(picked[-1][0] - item[0]) > TIME_EPS:
            picked.append([item[0], item[1], nxt])

    for target in targets:
        if exhausted:
            break
        if prev is not None and look is not None and prev[0] <= target + TIME_EPS < look[0]:
            take(prev)
            continue
        if strategy != "sequential" and _should_seek(target - _SEEK_MARGIN, pos, keys, strategy):
            # aim a little early: the index holds decode timestamps, which may precede the keyframe's display time
            dec.restart_at(s0 + max(0.0, target - _SEEK_MARGIN))
            prev = look = None
            back = 0
            first = dec.next()
            # a seek that lands after the target (imprecise index): back off further
            while first is not None and frame_time(first, vs, s0, 0, fps) > target + TIME_EPS and back < 4:
                back += 1
                dec.restart_at(s0 + max(0.0, target - 2.0 ** back))
                first = dec.next()
            if first is None:
                exhausted = True
                break
            look = (frame_time(first, vs, s0, 0, fps), first)
            pos = look[0]
        while True:
            if look is not None:
                if look[0] > target + TIME_EPS:
                    break
                prev, look = look, None
            frame = dec.next()
            if frame is None:
                exhausted = True
                break
            if picked and picked[-1][2] is None and prev is not None and prev[1] is picked[-1][1]:
                picked[-1][2] = frame
            look = (frame_time(frame, vs, s0, dec.decoded - 1, fps), frame)
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
        return _key_before(keys, target) > pos + TIME_EPS
    return strategy == "seek" and target - pos > 1.0


def _key_before(keys: np.ndarray, t: float) -> float:
    i = int(np.searchsorted(keys, t + TIME_EPS, side="right")) - 1
    return float(keys[i]) if i >= 0 else -math.inf


def decode_audio(
    path: str | os.PathLike,
    sample_rate: int,
    start: float | None = None,
    end: float | None = None,
    partial: bool = False,
) -> np.ndarray | None:
    """The first audio track as mono float32 in [-1, 1] at ``sample_rate``; None when the file has no audio.
    Corrupt audio data is a MediaError, or with ``partial`` (a truncated file) the end of what is kept once some
    audio decoded."""
    av = import_av()

    shown = escaped_path(path)
    with open_media(path) as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        if stream.codec_context is None or not stream.codec_context.name:
            raise MediaError(shown, f"unsupported audio codec{codec_tag(stream)} (no decoder in this FFmpeg build)")
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
            if not (partial and chunks):
                raise MediaError(shown, f"corrupt audio data ({ffmpeg_message(exc)})") from None
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
