"""Copies of real footage as a library collects them, and distinct footage that only shares an opening: the generated
truth near-duplicate detection (``reelsearch duplicates``) is tested and measured on.

From a real clip (or a clip of real photos: :func:`photo_clip`), :func:`make_variant` writes one copy of the same
footage altered as copies are (:data:`VARIANTS`): re-encoded at another bitrate, scaled to another resolution,
cropped by 5-10 %, trimmed by a few seconds, an excerpt cut out of its middle, with a caption burnt in, or a still
taken from it. :func:`with_opening` puts a black opening, a fade from black or a title card before a clip: two
*distinct* clips with the same opening must not be grouped. :func:`footage_set` writes a whole set and returns its
truth (which files are the same footage).

Video is H.264 (yuv420p, even sizes) read and written with PyAV; x264 runs on one thread, so the same inputs give
the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from reelsearch.datasets.cue_clips import CueClip, OnScreenText, draw_text, make_clip
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path

#: What a variant changes: its ``value`` is the CRF (reencode), the scale (rescale), the share of width and height
#: cut (crop), the seconds cut from the start (trim) or the end (trim-end), the share of the duration kept from the
#: middle (excerpt: 0.2 keeps 40-60 %, re-encoded at CRF 30), the text (caption), the second (still).
KINDS = ("reencode", "rescale", "crop", "trim", "trim-end", "excerpt", "caption", "still")
#: Openings :func:`with_opening` puts before a clip.
OPENINGS = ("black", "fade", "title")


@dataclass(frozen=True)
class Variant:
    """One way a copy differs from its source (``kind`` of :data:`KINDS`, with its ``value``)."""

    kind: str
    value: float | str

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ReelsearchError(f"unknown variant {self.kind!r}; kinds: {', '.join(KINDS)}")

    @property
    def name(self) -> str:
        """A file-name part: ``crop-0.1``, ``caption``."""
        return self.kind if self.kind == "caption" else f"{self.kind}-{self.value:g}"


#: The copies a library typically holds of one clip (the issue's list): another bitrate, another resolution, crops
#: of 5 and 10 %, trims of 1-3 s at the start and 1.5 s at the end, a caption burnt in, a still from the middle.
VARIANTS: tuple[Variant, ...] = (
    Variant("reencode", 36), Variant("rescale", 0.5), Variant("crop", 0.05), Variant("crop", 0.1),
    Variant("trim", 1.0), Variant("trim", 3.0), Variant("trim-end", 1.5),
    Variant("caption", "Summer 2023 - best moments"), Variant("still", 0.5),
)


@dataclass
class _Video:
    """An opened clip: its frame rate, size, duration and an iterator of (seconds, RGB frame)."""

    fps: Fraction
    width: int
    height: int
    duration: float
    frames: Iterator[tuple[float, np.ndarray]]


def _open(path: Path) -> _Video:
    import av  # noqa: PLC0415 - optional package (media extra)

    try:
        container = av.open(str(path))
        vs = container.streams.video[0]
    except (av.FFmpegError, IndexError) as exc:
        raise DataFormatError(path, f"not a readable video ({exc})") from None
    fps = Fraction(vs.average_rate or 25).limit_denominator(1001)
    duration = float(container.duration) / 1e6 if container.duration else float(vs.frames / fps)

    def frames():
        with container:
            for i, frame in enumerate(container.decode(vs)):
                yield (float(frame.time) if frame.time is not None else i / float(fps)), frame.to_ndarray(
                    format="rgb24")

    return _Video(fps, vs.width, vs.height, duration, frames())


def _write(path: Path, frames, fps: Fraction, crf: int = 23) -> Path:
    """An H.264 MP4 of RGB ``frames`` (cut to even sizes), written atomically."""
    import av  # noqa: PLC0415 - optional package (media extra)

    with atomic_path(path, suffix=".mp4") as tmp, av.open(str(tmp), "w", format="mp4") as out:
        vs = None
        for img in frames:
            if vs is None:
                vs = out.add_stream("libx264", rate=fps, options={"crf": str(crf), "preset": "veryfast",
                                                                  "threads": "1"})
                vs.height, vs.width = img.shape[0] // 2 * 2, img.shape[1] // 2 * 2
                vs.pix_fmt = "yuv420p"
            img = np.ascontiguousarray(img[:vs.height, :vs.width])
            for packet in vs.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        if vs is None:
            raise ReelsearchError(f"{path}: no frames to write")
        for packet in vs.encode():
            out.mux(packet)
    return path


def _resize(img: np.ndarray, width: int, height: int) -> np.ndarray:
    import cv2  # noqa: PLC0415 - optional package (media extra)

    return cv2.resize(img, (width, height), interpolation=cv2.INTER_AREA)


def make_variant(source: str | os.PathLike, out: str | os.PathLike, variant: Variant) -> Path:
    """Write the ``variant`` of clip ``source`` to ``out`` (an .mp4; a .jpg for a still) and return its path."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    source, out = Path(source), Path(out)
    video = _open(source)
    kind, value = variant.kind, variant.value
    if kind == "still":
        t = float(value) * video.duration if float(value) <= 1 else float(value)
        best = min(video.frames, key=lambda f: abs(f[0] - t))[1]
        with atomic_path(out, suffix=out.suffix) as tmp:
            if not cv2.imwrite(str(tmp), cv2.cvtColor(best, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90]):
                raise ReelsearchError(f"{out}: cannot write the still")
        return out
    frames = (img for _, img in video.frames)
    crf = 23
    if kind == "reencode":
        crf = int(value)
    elif kind == "rescale":
        w, h = max(2, round(video.width * float(value))), max(2, round(video.height * float(value)))
        frames = (_resize(img, w, h) for img in frames)
    elif kind == "crop":  # a third of the cut on the left and top, two thirds on the right and bottom
        dx, dy = round(video.width * float(value)), round(video.height * float(value))
        x0, y0 = dx // 3, dy // 3
        frames = (img[y0:y0 + video.height - dy, x0:x0 + video.width - dx] for img in frames)
    elif kind in ("trim", "trim-end", "excerpt"):
        start, end = excerpt_span(video.duration, variant)
        frames = (img for t, img in video.frames if start - 1e-6 <= t < end)
        crf = 30 if kind == "excerpt" else crf
    elif kind == "caption":
        text = OnScreenText((str(value),), 0.0, 1e9, "bottom")
        frames = (draw_text(img, text) for img in frames)
    return _write(out, frames, video.fps, crf)


def excerpt_span(duration: float, variant: Variant) -> tuple[float, float]:
    """[start, end) seconds of a clip ``duration`` long that a trim, trim-end or excerpt ``variant`` keeps (its
    ``start`` is where the copy begins in the source)."""
    value = float(variant.value)
    if variant.kind == "trim":
        return value, np.inf
    if variant.kind == "trim-end":
        return 0.0, duration - value
    if variant.kind == "excerpt":
        return duration * (1 - value) / 2, duration * (1 + value) / 2
    raise ReelsearchError(f"a {variant.kind} variant keeps no span of the clip")


def opening_frames(kind: str, width: int, height: int, seconds: float, fps: Fraction,
                   title: str = "A FILM BY THE FAMILY") -> list[np.ndarray]:
    """The frames of an opening: ``black``, a ``title`` card (dark text on white) or, for ``fade``, black frames that
    :func:`with_opening` then fades into the clip."""
    if kind not in OPENINGS:
        raise ReelsearchError(f"unknown opening {kind!r}; openings: {', '.join(OPENINGS)}")
    n = max(1, round(seconds * float(fps)))
    black = np.zeros((height, width, 3), np.uint8)
    if kind == "title":
        card = draw_text(black, OnScreenText((title, "2023"), 0.0, 1.0, "slide"))
        return [card] * n
    return [black] * (n if kind == "black" else max(1, n // 3))


def with_opening(source: str | os.PathLike, out: str | os.PathLike, kind: str, seconds: float = 2.0,
                 title: str = "A FILM BY THE FAMILY") -> Path:
    """Clip ``source`` with an opening before it: ``seconds`` of black, a title card, or (``fade``) a little black
    then the clip's first ``seconds`` faded in from black."""
    video = _open(Path(source))
    head = opening_frames(kind, video.width, video.height, seconds, video.fps, title)
    ramp = max(1, round(seconds * float(video.fps)))

    def frames():
        yield from head
        for i, (_, img) in enumerate(video.frames):
            if kind == "fade" and i < ramp:
                img = (img.astype(np.float32) * (i / ramp)).astype(np.uint8)
            yield img

    return _write(Path(out), frames(), video.fps)


def photo_clip(photos: Sequence[str], out_dir: str | os.PathLike, images_dir: str | os.PathLike, name: str,
               seconds: float = 6.0, seed: int = 0) -> Path:
    """``out_dir/name.mp4``: real photos (ids in ``images_dir``, e.g. Flickr8k) as consecutive shots with a slow
    zoom, ``seconds`` long, no sound (``reelsearch.datasets.cue_clips``); kept when it exists."""
    path = Path(out_dir) / f"{name}.mp4"
    if path.exists():
        return path
    return make_clip(CueClip(name, tuple(photos), audio=False, duration=seconds, zoom=0.08, seed=seed), out_dir,
                     images_dir)


def footage_set(out_dir: str | os.PathLike, sources: Sequence[str | os.PathLike],
                variants: Sequence[Variant] = VARIANTS,
                opened: Sequence[tuple[str | os.PathLike, str]] = ()) -> list[list[Path]]:
    """Write each of ``sources`` (copied) with its ``variants`` into ``out_dir``, and each (clip, opening) of
    ``opened`` as that clip with that opening; return the truth: the groups of files that are the same footage (a
    source and its variants; an opened clip alone, unless its clip is also a source, whose group it then joins).
    Existing files are kept (same inputs, same bytes)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[Path, list[Path]] = {}
    for src in map(Path, sources):
        copy = out / src.name
        if not copy.exists():
            with atomic_path(copy, suffix=copy.suffix) as tmp:
                tmp.write_bytes(src.read_bytes())
        group = groups.setdefault(src.resolve(), [copy])
        for v in variants:
            target = out / f"{src.stem}.{v.name}{'.jpg' if v.kind == 'still' else '.mp4'}"
            group.append(target if target.exists() else make_variant(src, target, v))
    for clip, opening in opened:
        clip = Path(clip)
        target = out / f"{clip.stem}.{opening}-opening.mp4"
        made = target if target.exists() else with_opening(clip, target, opening)
        groups.setdefault(clip.resolve(), []).append(made)
    return list(groups.values())
