"""File names as users see them, as the file system holds them, and as another host mounts them: one helper for JSON,
the page, logs and the CLI, and the ``--media-root`` mapping (``MediaRoots``).

A POSIX file name is bytes; Python gives undecodable bytes back as surrogate escapes (``os.fsdecode``), which no
UTF-8 encoder (JSON, HTTP headers, a terminal) accepts. Every place that shows or sends a path uses these:

* the **display form** (``display_path``): valid Unicode, undecodable bytes shown as U+FFFD (optionally with
  control characters such as a newline escaped, for one-line output);
* the **lossless form** (``path_b64``): standard base64 of the exact bytes; ``path_from_b64`` turns it back into
  the path (the same ``str`` that ``os.fsdecode`` gives), so a client can name the file again (``/annotate``).
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from collections.abc import Sequence

from reelsearch.display import display_path
from reelsearch.errors import ConfigError


def path_b64(path: str | bytes | os.PathLike) -> str:
    """The exact bytes of ``path``, base64-encoded (standard alphabet, padded)."""
    return base64.b64encode(os.fsencode(path)).decode("ascii")


def path_from_b64(value: str) -> str:
    """The path (``os.fsdecode`` form) whose bytes ``value`` encodes; ValueError when it is not base64."""
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError(f"not base64: {exc}") from None
    if not raw or b"\0" in raw:
        raise ValueError("not a file name (empty or contains a NUL byte)")
    return os.fsdecode(raw)


def path_fields(path: str | bytes | os.PathLike) -> dict[str, str]:
    """``{"path", "name", "path_b64"}``: display path, display base name, lossless path (JSON-safe)."""
    return {"path": display_path(path), "name": display_path(os.path.basename(os.fsencode(path))),
            "path_b64": path_b64(path)}


class MediaRoots:
    """Where this host finds the files a catalog names: ``OLD=NEW`` pairs (``--media-root``, repeatable) that map a
    stored path under OLD (as the indexing host saw it) to the same file under NEW here, and back. The longest
    matching prefix wins; a path under none is the same on every host."""

    def __init__(self, pairs: Sequence[str] | None = ()):
        self.pairs: list[tuple[str, str]] = []
        for pair in pairs or ():
            old, sep, new = str(pair).partition("=")
            if not sep or not os.path.isabs(old) or not os.path.isabs(new):
                raise ConfigError(f"--media-root {pair!r}: expected OLD=NEW, two absolute folders")
            self.pairs.append((_folder(old), _folder(new)))

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def local(self, stored: str) -> str:
        """The path on this host of a file stored as ``stored``."""
        return _swap(stored, [(old, new) for old, new in self.pairs])

    def stored(self, local: str) -> str:
        """The path stored for a file this host reaches at ``local``."""
        return _swap(local, [(new, old) for old, new in self.pairs])


def _folder(path: str) -> str:
    return os.path.normpath(path)


def _swap(path: str, pairs: list[tuple[str, str]]) -> str:
    best = None
    for src, dst in pairs:
        if (path == src or path.startswith(src.rstrip(os.sep) + os.sep)) and (best is None or len(src) > len(best[0])):
            best = (src, dst)
    if best is None:
        return path
    src, dst = best
    return dst + path[len(src):] if src != os.sep else dst.rstrip(os.sep) + path


def unreachable(path: str) -> str | None:
    """Why this host cannot read the file at ``path`` (None when it can)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{display_path(path, one_line=True)}: not reachable from this host ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"{display_path(path, one_line=True)}: not a regular file"
    if not os.access(path, os.R_OK):
        return f"{display_path(path, one_line=True)}: not readable by this process"
    return None
