"""Atomic file writes (a reader never sees a half-written file, a crash never leaves one behind) and the identity
of a file's bytes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from reelsearch.errors import DataFormatError

_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates 0600, and some writers (safetensors) make the file anew: the finished file gets the usual
        # permissions
        os.chmod(tmp_path, 0o666 & ~_UMASK)
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj, indent: int | None = 2) -> None:
    """Write ``obj`` as JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def replace_dir(new: str | Path, dest: str | Path) -> None:
    """Put the finished directory ``new`` at ``dest``, replacing any old one; see :func:`recover_dir`.

    Two renames (old aside, new in); a crash between them leaves ``.<name>.old``, which ``recover_dir`` restores.
    """
    new, dest = Path(new), Path(dest)
    old = dest.with_name(f".{dest.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        os.replace(dest, old)
    os.replace(new, dest)
    shutil.rmtree(old, ignore_errors=True)


def recover_dir(dest: str | Path) -> Path:
    """Undo a :func:`replace_dir` interrupted between its two renames; returns ``dest``."""
    dest = Path(dest)
    old = dest.with_name(f".{dest.name}.old")
    if not dest.exists() and old.exists():
        os.replace(old, dest)
    return dest


def read_text(path: str | Path) -> str:
    """A text file's content (UTF-8, BOM tolerated), or a DataFormatError naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise DataFormatError(path, f"cannot read: {exc.strerror or exc}") from exc


def numbered_lines(text: str):
    """(1-based line number, line without its end) for every non-blank line."""
    for no, line in enumerate(text.split("\n"), 1):  # not splitlines(): it also splits on \x85, \u2028, ...
        line = line.rstrip("\r")
        if line.strip():
            yield no, line


@lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return "sha256:" + h.hexdigest()[:16]


def file_identity(path: str | os.PathLike) -> str:
    """``sha256:<16 hex>`` of a file's bytes (a weights file's identity; cached by path, size and modification
    time)."""
    st = os.stat(path)
    return _file_digest(os.fspath(Path(path).resolve()), st.st_size, st.st_mtime_ns)
