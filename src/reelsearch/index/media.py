"""What the catalog needs from media files: finding them, hashing them, small thumbnails and how much each
frame shows."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reelsearch.media.decode import AUDIO_EXTENSIONS, MEDIA_EXTENSIONS

#: What a library takes from folders: images, videos, and audio files (indexed for what is said in them).
LIBRARY_EXTENSIONS = MEDIA_EXTENSIONS | AUDIO_EXTENSIONS
#: Why a file in a folder that is not of ``LIBRARY_EXTENSIONS`` is skipped (``Walk.skipped``).
NOT_MEDIA = "not a photo, video or audio format reelsearch reads"
#: Long side of a stored thumbnail, pixels.
THUMBNAIL_SIZE = 96
#: Side of a thumbnail's coarse picture (``thumbnail_picture``), pixels.
PICTURE_SIDE = 16
#: Luma weights (ITU-R BT.601) of a frame's detail.
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)
_HASH_BLOCK = 1 << 20


@dataclass
class EmbeddedMedia:
    """What an ``embed_fn(path)`` returns for one file (an image is a one-frame video).

    A file without a picture (sound alone: ``reelsearch.search.embed.sound_only``) has ``video_vector`` and
    ``frame_vectors`` None, no timestamps, frames or segments: it is stored as a video record (path, duration) with no
    row in any vector index, and found by what is said in it (its speech cue).

    ``video_vector`` [D] goes into the vector index; ``frame_vectors`` [T, D] with ``timestamps`` [T] (seconds)
    locate the best moment of a hit; ``thumbnails`` (T encoded JPEG/PNG images, or None) are shown with it.
    ``bias`` is added to every query's score of the video (a querybank's offset, negated; 0 without one).
    ``detail`` [T]: how much each frame shows (:func:`frame_detail`; None: not measured).

    Segments (the unit of retrieval, S >= 1): ``segment_vectors`` [S, D] (what ranking reads: a video scores by its
    best segment), ``segment_frames`` [S, 2] (each one's frames ``[first, stop)``), ``segment_times`` [S, 2] (start
    and end, seconds), ``segment_biases`` [S]; None: one segment of every frame, the video's row and bias (what an
    ``embed_fn`` without segments gives). ``warning``: one line for the sync report (a truncated file's).
    """

    video_vector: np.ndarray | None
    frame_vectors: np.ndarray | None
    timestamps: np.ndarray
    duration: float | None = None
    thumbnails: list[bytes] | None = None
    bias: float = 0.0
    detail: np.ndarray | None = None
    segment_vectors: np.ndarray | None = None
    segment_frames: np.ndarray | None = None
    segment_times: np.ndarray | None = None
    segment_biases: np.ndarray | None = None
    warning: str | None = None

    @property
    def pictured(self) -> bool:
        """Whether the file has a picture (rows to store); False for sound alone."""
        return self.video_vector is not None

    def checked(self, dim: int | None) -> EmbeddedMedia:
        """Self with arrays of the right dtypes, or ValueError naming what is inconsistent."""
        if not self.pictured:
            return self._sound_checked()
        v = np.asarray(self.video_vector, np.float32).reshape(-1)
        f = np.asarray(self.frame_vectors, np.float32)
        t = np.asarray(self.timestamps, np.float64).reshape(-1)
        if f.ndim == 1:
            f = f[None, :]
        if dim is not None and v.shape[0] != dim:
            raise ValueError(f"video vector has {v.shape[0]} dimensions, the index has {dim}")
        if f.ndim != 2 or f.shape[1] != v.shape[0] or f.shape[0] < 1:
            raise ValueError(f"frame vectors must be [T>=1, {v.shape[0]}], got {tuple(np.shape(self.frame_vectors))}")
        if t.shape[0] != f.shape[0]:
            raise ValueError(f"{f.shape[0]} frame vectors but {t.shape[0]} timestamps")
        bias = float(self.bias)
        if not (np.isfinite(v).all() and np.isfinite(f).all() and np.isfinite(t).all() and np.isfinite(bias)):
            raise ValueError("embedding, bias or timestamps contain NaN or infinite values")
        if self.thumbnails is not None and len(self.thumbnails) != f.shape[0]:
            raise ValueError(f"{len(self.thumbnails)} thumbnails for {f.shape[0]} frames")
        detail = None if self.detail is None else np.asarray(self.detail, np.float32).reshape(-1)
        if detail is not None and (detail.shape[0] != f.shape[0] or not np.isfinite(detail).all()):
            raise ValueError(f"frame detail must be {f.shape[0]} finite values, got {tuple(np.shape(self.detail))}")
        duration = None if self.duration is None else float(self.duration)
        thumbs = None if self.thumbnails is None else [bytes(b) for b in self.thumbnails]
        return EmbeddedMedia(v, f, t, duration, thumbs, bias, detail, *self._segments_checked(v, t, bias, duration),
                             warning=self.warning)

    def _sound_checked(self) -> EmbeddedMedia:
        """Self without a picture, checked: no frame vectors, timestamps, thumbnails, detail or segments, bias 0."""
        parts = (self.frame_vectors, self.thumbnails, self.detail, self.segment_vectors, self.segment_frames,
                 self.segment_times, self.segment_biases)
        if any(p is not None for p in parts) or len(np.asarray(self.timestamps).reshape(-1)) or self.bias:
            raise ValueError("a file without a video vector has no frames, segments or bias")
        duration = None if self.duration is None else float(self.duration)
        if duration is not None and not (np.isfinite(duration) and duration >= 0):
            raise ValueError(f"duration must be a finite number of seconds, got {self.duration}")
        return EmbeddedMedia(None, None, np.zeros(0, np.float64), duration, warning=self.warning)

    def _segments_checked(self, v: np.ndarray, t: np.ndarray, bias: float, duration: float | None):
        """(vectors [S, D] float32, frames [S, 2] int64, times [S, 2] float64, biases [S] float64), the defaults
        filled in (one segment: every frame, the video's row and bias), or ValueError."""
        if self.segment_vectors is None:
            end = max(float(t[-1]), duration or 0.0)
            return (v[None, :].copy(), np.array([[0, len(t)]], np.int64), np.array([[float(t[0]), end]]),
                    np.array([bias]))
        sv = np.asarray(self.segment_vectors, np.float32)
        sf = np.asarray(self.segment_frames, np.int64).reshape(-1, 2)
        st = np.asarray(self.segment_times, np.float64).reshape(-1, 2)
        sb = (np.zeros(len(sv)) if self.segment_biases is None
              else np.asarray(self.segment_biases, np.float64).reshape(-1))
        if sv.ndim != 2 or sv.shape[1] != v.shape[0] or not len(sv) == len(sf) == len(st) == len(sb) or not len(sv):
            raise ValueError(f"segments must be [S>=1, {v.shape[0]}] vectors with S frame ranges, times and biases")
        if sf[0, 0] != 0 or sf[-1, 1] != len(t) or np.any(sf[1:, 0] != sf[:-1, 1]) or np.any(sf[:, 1] <= sf[:, 0]):
            raise ValueError(f"segments' frames must cover the {len(t)} frames in order, each at least one")
        if not (np.isfinite(sv).all() and np.isfinite(st).all() and np.isfinite(sb).all()):
            raise ValueError("segment vectors, times or biases contain NaN or infinite values")
        return sv, sf, st, sb


@dataclass
class Walk:
    """Media files found under some paths, the paths that could not be read, and the files in folders that are
    not media (each as (path, why))."""

    files: list[str] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def walk_media(paths: Iterable[str | os.PathLike]) -> Walk:
    """Every media file under ``paths`` (absolute, sorted, each once); folders recursively, hidden ones skipped.

    A file named directly is taken whatever its extension (it may be an unusual container); inside folders only
    image, video and audio extensions count (``LIBRARY_EXTENSIONS``): any other file there is listed in ``skipped``
    (hidden files and folders are left out unlisted). Unreadable or absent paths are listed in ``missing``.
    """
    out = Walk()
    seen: set[str] = set()

    def keep(p: str) -> None:
        if p not in seen:
            seen.add(p)
            out.files.append(p)

    for root in paths:
        root = absolute(root)
        if os.path.isfile(root):
            keep(root)
            continue
        if not os.path.isdir(root):
            out.missing.append((root, "no such file or folder"))
            continue
        errors: list[OSError] = []
        for dirpath, dirnames, filenames in os.walk(root, onerror=errors.append):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                if os.path.splitext(name)[1].lower() in LIBRARY_EXTENSIONS:
                    keep(os.path.join(dirpath, name))
                elif (path := os.path.join(dirpath, name)) not in seen:
                    seen.add(path)
                    out.skipped.append((path, NOT_MEDIA))
        out.missing.extend((e.filename or root, f"cannot list folder: {e.strerror}") for e in errors)
    out.files.sort()
    return out


def absolute(path: str | os.PathLike) -> str:
    """``path`` with ``~`` expanded, made absolute (symbolic links are kept as named)."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of the file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def shrink(rgb: np.ndarray, size: int = THUMBNAIL_SIZE) -> np.ndarray:
    """An RGB uint8 frame [H, W, 3] scaled (area filter) so its long side is at most ``size`` pixels."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    frame = np.asarray(rgb)
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"expected an RGB frame [H, W, 3], got shape {frame.shape}")
    h, w = frame.shape[:2]
    scale = size / max(h, w)
    if scale < 1:
        frame = cv2.resize(frame, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
    return frame


def frame_detail(rgb: np.ndarray) -> float:
    """How much a frame shows: the standard deviation of its luma (0-1) at thumbnail size. A black or flat frame, a
    frame deep in a fade, is near 0; a picture is well above (``reelsearch.search.frames.DETAIL_FLOOR``)."""
    small = shrink(rgb).astype(np.float32) / 255.0
    return float((small @ _LUMA).std())


def thumbnail_detail(jpeg: bytes) -> float:
    """:func:`frame_detail` of a stored thumbnail (what an index written before frames had their detail falls
    back to)."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("the thumbnail cannot be decoded")
    return frame_detail(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


def thumbnail_picture(jpeg: bytes | None) -> np.ndarray:
    """[PICTURE_SIDE ** 2] float32: a stored thumbnail's luma at PICTURE_SIDE x PICTURE_SIDE pixels (area filter),
    less its mean, of unit length: the picture's coarse layout, which a low bitrate, another resolution or a small crop
    hardly changes. Zeros for a flat frame, a missing or undecodable thumbnail."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    gray = None if jpeg is None else cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_GRAYSCALE)
    if gray is None:
        return np.zeros(PICTURE_SIDE ** 2, np.float32)
    small = cv2.resize(gray.astype(np.float32), (PICTURE_SIDE, PICTURE_SIDE), interpolation=cv2.INTER_AREA).ravel()
    small -= small.mean()
    norm = float(np.linalg.norm(small))
    return small / norm if norm > 1e-3 else np.zeros_like(small)


def make_thumbnail(rgb: np.ndarray, size: int = THUMBNAIL_SIZE, quality: int = 80) -> bytes:
    """JPEG bytes of an RGB uint8 frame [H, W, 3] scaled so its long side is ``size`` pixels."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    frame = shrink(rgb, size)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(np.ascontiguousarray(frame, np.uint8), cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()
