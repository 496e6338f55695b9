"""Serving a file with HTTP range requests (RFC 9110 §14): what a browser's <video> element needs to seek."""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Iterator

from fastapi import HTTPException
from fastapi.responses import Response, StreamingResponse

BLOCK = 1 << 16


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The one byte range [start, end] (inclusive) of a ``Range: bytes=...`` header, or None to send it all.

    ``bytes=a-b``, ``bytes=a-`` and ``bytes=-n`` (the last n bytes) are understood; several ranges are answered
    with the first one only (allowed: a server may ignore or coalesce ranges). An unsatisfiable range raises 416.
    A header that is not a byte range is ignored (the whole file), as the RFC asks.
    """
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        return None
    first = spec.split(",")[0].strip()
    a, dash, b = first.partition("-")
    a, b = a.strip(), b.strip()
    if not dash or (a and not a.isdigit()) or (b and not b.isdigit()) or (not a and not b):
        return None
    if not a:  # suffix: the last n bytes
        n = int(b)
        if n == 0 or size == 0:
            raise HTTPException(416, "range not satisfiable", headers={"Content-Range": f"bytes */{size}"})
        return max(0, size - n), size - 1
    start = int(a)
    end = size - 1 if not b else min(int(b), size - 1)
    if start >= size or (b and int(b) < start):
        raise HTTPException(416, "range not satisfiable", headers={"Content-Range": f"bytes */{size}"})
    return start, end


def _chunks(path: str, start: int, length: int) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        fh.seek(start)
        left = length
        while left > 0:
            block = fh.read(min(BLOCK, left))
            if not block:
                break
            left -= len(block)
            yield block


def file_response(path: str, range_header: str | None, method: str = "GET") -> Response:
    """200 with the whole file, or 206 with the requested bytes and Content-Range; Accept-Ranges either way."""
    try:
        size = os.stat(path).st_size
    except OSError:
        raise HTTPException(404, "the file of this video is gone (re-run `reelsearch index`)") from None
    media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    headers = {"Accept-Ranges": "bytes", "Cache-Control": "no-cache"}
    span = parse_range(range_header, size) if range_header else None
    if span is None:
        start, length, status = 0, size, 200
    else:
        start, length, status = span[0], span[1] - span[0] + 1, 206
        headers["Content-Range"] = f"bytes {span[0]}-{span[1]}/{size}"
    headers["Content-Length"] = str(length)
    if method == "HEAD":
        return Response(status_code=status, headers=headers, media_type=media_type)
    return StreamingResponse(_chunks(path, start, length), status_code=status, headers=headers,
                             media_type=media_type)
