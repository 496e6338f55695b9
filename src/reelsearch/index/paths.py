"""File names as users see them and as the file system holds them: one helper for JSON, the page, logs and the CLI.

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

_CONTROLS = {c: f"\\x{c:02x}" for c in range(32)} | {0x7F: "\\x7f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def display_path(path: str | bytes | os.PathLike, *, one_line: bool = False) -> str:
    """``path`` as valid Unicode (undecodable bytes become U+FFFD); ``one_line`` escapes control characters."""
    text = os.fsencode(path).decode("utf-8", "replace")
    return text.translate(_CONTROLS) if one_line else text


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
