"""Long generated videos with a known timeline: slideshows of real photos, with real clips spliced in.

A :class:`LongVideo` is a sequence of :class:`Shot`\\ s, each a Flickr8k photo (shown as the cue clips show one:
sharp in the middle of the frame over a blurred copy of itself, :func:`reelsearch.datasets.cue_clips.shot_frame`)
or a stretch of a real clip (letterboxed), for a given number of seconds. A shot begins with a hard cut or a
cross-fade from the shot before (the fade centred on the change), and a photo may zoom slowly in or out
("Ken Burns") over its whole time on screen. The video is H.264 (yuv420p, x264 ``veryfast``, CRF 23, its default
GOP and B-frames, as a typical film) encoded with PyAV; beside it a ground-truth JSON lists each shot's source
and its [start, end) in seconds, where a change's time is the middle of its fade.

:func:`random_video` draws a timeline (durations log-uniform between bounds, a share of fades and zooms, clips
spliced in); tests render short small ones, ``benchmarks/bench_long_videos.py`` 10-minute and 1-hour 720p ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.datasets.cue_clips import backdrop, load_photo, shot_frame
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path, atomic_write_text

TRANSITIONS = ("cut", "fade")
KINDS = ("photo", "clip")


@dataclass(frozen=True)
class Shot:
    """``source`` (a photo id of ``images_dir``, or a clip's path) on screen for ``duration`` seconds.

    ``transition``: how the shot begins — a hard ``cut`` or a ``fade`` of ``fade`` seconds centred on its start
    (the first shot of a video starts with a cut). ``zoom``: how much a photo zooms over its time on screen (0.2:
    in by 20 %, -0.2: out by 20 %, 0: still); ``pan`` moves it sideways (-1..1 of the slack the zoom leaves).
    ``offset``: where in a clip the shot starts (seconds; the clip loops when it is shorter than the shot).
    """

    kind: str
    source: str
    duration: float
    transition: str = "cut"
    fade: float = 0.0
    zoom: float = 0.0
    pan: float = 0.0
    offset: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS or self.transition not in TRANSITIONS:
            raise ReelsearchError(f"shot kind must be one of {KINDS} and transition one of {TRANSITIONS}, got "
                                  f"{self.kind!r}, {self.transition!r}")
        if not self.duration > 0 or self.fade < 0 or (self.transition == "fade" and not self.fade > 0):
            raise ReelsearchError(f"shot {self.source!r}: needs duration > 0 and, for a fade, fade > 0")


@dataclass(frozen=True)
class LongVideo:
    """A video ``id`` of ``shots`` one after another, ``size`` = (width, height) pixels at ``fps``."""

    id: str
    shots: tuple[Shot, ...]
    size: tuple[int, int] = (1280, 720)
    fps: int = 25

    @property
    def starts(self) -> np.ndarray:
        """Each shot's start (s): the time of the change into it (the middle of its fade)."""
        return np.concatenate([[0.0], np.cumsum([s.duration for s in self.shots])[:-1]])

    @property
    def duration(self) -> float:
        return float(sum(s.duration for s in self.shots))

    @property
    def changes(self) -> np.ndarray:
        """The times (s) where one shot changes into the next (every start but the first)."""
        return self.starts[1:]

    def truth(self) -> dict:
        """The ground truth: the video's facts and each shot's source, kind, [start, end) and how it begins."""
        shots = []
        for shot, start in zip(self.shots, self.starts, strict=True):
            shots.append({**asdict(shot), "start": round(float(start), 6),
                          "end": round(float(start + shot.duration), 6)})
        return {"id": self.id, "duration": self.duration, "fps": self.fps, "size": list(self.size), "shots": shots}

    @classmethod
    def from_truth(cls, obj: dict) -> LongVideo:
        keys = Shot.__dataclass_fields__
        shots = tuple(Shot(**{k: v for k, v in s.items() if k in keys}) for s in obj["shots"])
        return cls(obj["id"], shots, tuple(obj["size"]), int(obj["fps"]))


def read_truth(path: str | Path) -> LongVideo:
    """The :class:`LongVideo` of a ground-truth JSON written by :func:`write_video`."""
    try:
        return LongVideo.from_truth(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataFormatError(path, f"not a long-video ground truth ({exc})") from None


def random_video(video_id: str, photos: Sequence[str], seconds: float, *, seed: int = 0,
                 shot_seconds: tuple[float, float] = (2.0, 40.0), fade_share: float = 0.4,
                 fade_seconds: tuple[float, float] = (0.5, 2.0), zoom_share: float = 0.5, max_zoom: float = 0.3,
                 clips: Sequence[str | Path] = (), clip_share: float = 0.05, clip_seconds: float = 10.0,
                 size: tuple[int, int] = (1280, 720), fps: int = 25) -> LongVideo:
    """A random timeline of about ``seconds``: photos in the given order (cycling when more are needed), each on
    screen for a log-uniform time in ``shot_seconds``; a ``fade_share`` of the changes are cross-fades, a
    ``zoom_share`` of the photos zoom (up to ``max_zoom``); a ``clip_share`` of the shots are ``clip_seconds`` of
    a clip of ``clips`` (from its start). The last shot is shortened to end at ``seconds``."""
    if not photos:
        raise ReelsearchError("random_video needs at least one photo")
    rng = np.random.default_rng(seed)
    lo, hi = shot_seconds
    shots: list[Shot] = []
    total, p = 0.0, 0
    while total < seconds - 1e-6:
        fade = float(rng.uniform(*fade_seconds)) if shots and rng.random() < fade_share else 0.0
        transition = "fade" if fade else "cut"
        if clips and shots and rng.random() < clip_share:
            shot = Shot("clip", str(clips[int(rng.integers(len(clips)))]), clip_seconds, transition, fade)
        else:
            duration = float(np.exp(rng.uniform(math.log(lo), math.log(hi))))
            zoom = float(rng.uniform(0.05, max_zoom) * rng.choice([-1, 1])) if rng.random() < zoom_share else 0.0
            shot = Shot("photo", photos[p % len(photos)], round(duration, 3), transition, round(fade, 3),
                        round(zoom, 3), round(float(rng.uniform(-1, 1)), 3))
            p += 1
        left = seconds - total
        if left < shot.fade + 0.5:  # too little left for a shot of its own: stretch the one before
            shots[-1] = Shot(**{**asdict(shots[-1]), "duration": round(shots[-1].duration + left, 3)})
            break
        duration = min(shot.duration, left)
        shots.append(Shot(**{**asdict(shot), "duration": round(duration, 3)}))
        total += duration
    return LongVideo(video_id, tuple(shots), tuple(size), fps)


# ------------------------------------------------------------------------------------------------- rendering
class _ClipReader:
    """The frames of a clip by time, read forward (looping), letterboxed into ``size``."""

    def __init__(self, path: str, size: tuple[int, int]):
        import av  # noqa: PLC0415 - optional package (media extra)

        self.av, self.path, self.size = av, path, size
        self._open()
        self.length = None  # seconds, known after the first loop

    def _open(self):
        self.container = self.av.open(self.path)
        self.stream = self.container.streams.video[0]
        self.frames = self.container.decode(self.stream)
        self.t0 = None
        self.current, self.upcoming = None, None

    def _next(self):
        frame = next(self.frames, None)
        if frame is None:
            return None
        t = float(frame.pts * frame.time_base)
        self.t0 = t if self.t0 is None else self.t0
        return t - self.t0, frame

    def at(self, t: float) -> np.ndarray:
        """The frame displayed at ``t`` s of the clip (looping past its end), letterboxed."""
        if self.length:
            t %= self.length
            if self.current is not None and t < self.current[0]:
                self.container.close()
                self._open()
        if self.current is None:
            self.current = self._next()
            self.upcoming = self._next()
        while self.upcoming is not None and self.upcoming[0] <= t:
            self.current, self.upcoming = self.upcoming, self._next()
        if self.upcoming is None and self.length is None:
            self.length = self.current[0] + 1.0 / float(self.stream.average_rate or 25)
        return self._fit(self.current[1].to_ndarray(format="rgb24"))

    def _fit(self, img: np.ndarray) -> np.ndarray:
        import cv2  # noqa: PLC0415 - optional package (media extra)

        w, h = self.size
        scale = min(w / img.shape[1], h / img.shape[0])
        nw, nh = round(img.shape[1] * scale), round(img.shape[0] * scale)
        out = np.zeros((h, w, 3), np.uint8)
        y0, x0 = (h - nh) // 2, (w - nw) // 2
        out[y0:y0 + nh, x0:x0 + nw] = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
        return out

    def close(self):
        self.container.close()


class _ShotRenderer:
    """Frames of one shot by time within its extended window (its fades included)."""

    def __init__(self, shot: Shot, images_dir: Path, size: tuple[int, int], begin: float, end: float):
        self.shot, self.begin, self.end = shot, begin, end
        self.clip = _ClipReader(shot.source, size) if shot.kind == "clip" else None
        if self.clip is None:
            self.photo = load_photo(images_dir, shot.source)
            w, h = size
            self.back = backdrop(self.photo, size)
            z0, z1 = (1.0, 1.0 + shot.zoom) if shot.zoom >= 0 else (1.0 - shot.zoom, 1.0)
            self.zoom = (z0, z1, shot.pan)
            self.still = shot_frame(self.photo, self.back, 0.0, self.zoom) if shot.zoom == 0 else None

    def at(self, t: float) -> np.ndarray:
        if self.clip is not None:
            return self.clip.at(self.shot.offset + t - self.begin)
        if self.still is not None:
            return self.still
        progress = min(1.0, max(0.0, (t - self.begin) / max(self.end - self.begin, 1e-9)))
        return shot_frame(self.photo, self.back, progress, self.zoom)

    def close(self):
        if self.clip is not None:
            self.clip.close()


def render(video: LongVideo, images_dir: str | Path) -> Iterator[np.ndarray]:
    """Every frame of ``video`` (uint8 RGB [height, width, 3]), in order; one or two shots are open at a time."""
    starts = video.starts
    fades = [s.fade if s.transition == "fade" else 0.0 for s in video.shots] + [0.0]
    windows = [(starts[i] - fades[i] / 2, starts[i] + s.duration + fades[i + 1] / 2) for i, s in enumerate(video.shots)]
    open_shots: dict[int, _ShotRenderer] = {}
    n = int(round(video.duration * video.fps))
    try:
        for k in range(n):
            t = k / video.fps
            i = int(np.searchsorted(starts, t, side="right")) - 1
            live = [j for j in (i - 1, i, i + 1) if 0 <= j < len(video.shots) and windows[j][0] <= t < windows[j][1]]
            for j in list(open_shots):
                if j not in live:
                    open_shots.pop(j).close()
            for j in live:
                if j not in open_shots:
                    open_shots[j] = _ShotRenderer(video.shots[j], Path(images_dir), video.size, *windows[j])
            if len(live) == 1:
                yield open_shots[live[0]].at(t)
                continue
            a, b = live  # a fade: b's share grows from 0 to 1 over the fade
            fade = fades[b]
            alpha = np.float32((t - (starts[b] - fade / 2)) / fade)
            mix = open_shots[a].at(t).astype(np.float32) * (1 - alpha) + open_shots[b].at(t) * alpha
            yield np.clip(np.rint(mix), 0, 255).astype(np.uint8)
    finally:
        for r in open_shots.values():
            r.close()


def write_video(video: LongVideo, out_dir: str | Path, images_dir: str | Path, *, crf: int = 23,
                preset: str = "veryfast", threads: int = 0, progress: bool = False) -> Path:
    """Write ``out_dir/<id>.mp4`` and its ground truth ``out_dir/<id>.json`` (both atomically); returns the mp4.

    ``threads``: x264 threads (0: its choice; 1 gives byte-identical files for the same spec).
    """
    import av  # noqa: PLC0415 - optional package (media extra)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{video.id}.mp4"
    total = int(round(video.duration * video.fps))
    with atomic_path(path, suffix=".mp4") as tmp, av.open(str(tmp), "w", format="mp4") as container:
        vs = container.add_stream("libx264", rate=video.fps,
                                  options={"crf": str(crf), "preset": preset, "threads": str(threads)})
        vs.width, vs.height, vs.pix_fmt = video.size[0], video.size[1], "yuv420p"
        for img in tqdm(render(video, images_dir), total=total, desc=video.id, unit="frame", disable=not progress):
            for packet in vs.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in vs.encode():
            container.mux(packet)
    atomic_write_text(out / f"{video.id}.json", json.dumps(video.truth(), indent=1) + "\n")
    return path
