"""When a photo or clip was taken, as the index stores it (search filters ``after:`` / ``before:``).

In order: an image's (HEIC and AVIF photos' too) EXIF DateTimeOriginal (tag 36867 in the Exif IFD), else its EXIF
DateTime (306); a video's container ``creation_time`` tag, else its first stream's with one; else the file's
modification time. The date is
seconds since the epoch (UTC; an EXIF date, which has no zone, is read as UTC) with where it came from:
``"exif"``, ``"container"`` or ``"file"``.
"""

from __future__ import annotations

import contextlib
import functools
import os
from datetime import UTC, datetime

from reelsearch.media.decode import is_image_path, probe

_EXIF_IFD = 0x8769
_DATE_TIME_ORIGINAL = 36867
_DATE_TIME = 306


def taken_at(path: str | os.PathLike, mtime: float) -> tuple[float, str]:
    """(seconds since the epoch, source) of ``path`` (module docstring); ``mtime`` when the file says nothing (or
    cannot be read: the date never fails an index)."""
    with contextlib.suppress(Exception):
        found = _exif_date(path) if is_image_path(path) else _container_date(path)
        if found is not None:
            return found
    return float(mtime), "file"


def _exif_date(path: str | os.PathLike) -> tuple[float, str] | None:
    from PIL import Image  # noqa: PLC0415 - optional package (Pillow)

    _read_heif()
    with Image.open(os.fsdecode(path)) as img:
        exif = img.getexif()
        value = exif.get_ifd(_EXIF_IFD).get(_DATE_TIME_ORIGINAL) or exif.get(_DATE_TIME)
    if not value:
        return None
    when = datetime.strptime(str(value).strip("\x00 ")[:19], "%Y:%m:%d %H:%M:%S").replace(tzinfo=UTC)
    return when.timestamp(), "exif"


@functools.cache
def _read_heif() -> None:
    """Let Pillow open HEIC / HEIF photos (pillow-heif, the media extra; AVIF Pillow reads itself)."""
    with contextlib.suppress(ImportError):
        import pillow_heif  # noqa: PLC0415 - optional package (media extra)

        pillow_heif.register_heif_opener()


def _container_date(path: str | os.PathLike) -> tuple[float, str] | None:
    value = probe(path)["creation_time"]
    when = parse_iso(value).timestamp() if value else 0.0
    # muxers write the epoch (1970, or the MP4 epoch 1904) when no time was set: that says nothing
    return None if when <= 0 else (when, "container")


def parse_iso(value: str) -> datetime:
    """An ISO 8601 time as FFmpeg writes it (``2023-07-14T10:30:00.000000Z``); UTC when it names no zone."""
    when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
