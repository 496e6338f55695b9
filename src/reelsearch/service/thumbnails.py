"""Thumbnails at the size a page shows them: the index stores each frame's at THUMBNAIL_SIZE (96 px, the frame
strip's); a larger one is made from the file itself, one frame decoded after a seek (an image: the image scaled),
and kept in a small cache of encoded JPEGs, so that a grid of cards costs one decode per card once."""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict

from reelsearch.errors import ReelsearchError
from reelsearch.index.media import THUMBNAIL_SIZE, make_thumbnail
from reelsearch.index.paths import unreachable
from reelsearch.media.decode import is_image_path, thumbnail

logger = logging.getLogger(__name__)

#: The long sides served, pixels: a request gets the smallest that is at least its ``size`` (the largest beyond).
SIZES = (THUMBNAIL_SIZE, 160, 240, 320, 480, 640, 960, 1280)
#: Thumbnails kept (about 20-120 KB each).
CACHE_ENTRIES = 512


def served_size(size: int | None) -> int:
    """The long side a request for ``size`` pixels gets (:data:`SIZES`; None: the stored one)."""
    if size is None:
        return THUMBNAIL_SIZE
    return next((s for s in SIZES if s >= size), SIZES[-1])


class SharpThumbnails:
    """Thumbnails of frames larger than the stored ones, made from the files and cached (thread-safe)."""

    def __init__(self, entries: int = CACHE_ENTRIES):
        self.entries = entries
        self._cache: OrderedDict[tuple, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str, mtime_ns: int, t: float, size: int) -> bytes | None:
        """JPEG of the frame at ``t`` s of the file at ``path`` (as it was at ``mtime_ns``), long side at most
        ``size`` px; None when the file cannot be read here (the caller serves the stored thumbnail instead)."""
        key = (path, mtime_ns, round(t, 3), size)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        if unreachable(path) is not None:
            return None
        try:
            rgb = thumbnail(path, size, at=None if is_image_path(path) else t)
            data = make_thumbnail(rgb, size, quality=85)
        except (ReelsearchError, OSError, ValueError) as exc:
            logger.warning("%s: no thumbnail at %.2f s: %s", os.fsdecode(path), t, exc)
            return None
        with self._lock:
            self._cache[key] = data
            while len(self._cache) > self.entries:
                self._cache.popitem(last=False)
        return data
