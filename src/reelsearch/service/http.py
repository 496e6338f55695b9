"""HTTP plumbing of the service: JSON rendering, errors as JSON, the access log, the body-size limit, media files
with ranges."""

from __future__ import annotations

import json
import logging
import re
import time

import orjson
from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from reelsearch.errors import ReelsearchError
from reelsearch.index.catalog import CatalogUnavailable
from reelsearch.index.paths import display_path
from reelsearch.search.filters import FilterError
from reelsearch.search.searcher import QueryError

access_logger = logging.getLogger("reelsearch.access")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class JSON(JSONResponse):
    """Compact UTF-8 JSON by orjson (a search's answer in about a 15th of the standard library's time; NaN and
    infinities, never meant to occur, as null); what orjson refuses (a lone surrogate that slipped into a string, a
    key that is not a string) by the standard library, a lone surrogate as U+FFFD instead of a 500."""

    def render(self, content) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:  # orjson.JSONEncodeError included
            pass
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


def error_text(errors: list[dict]) -> str:
    """One line from pydantic / FastAPI validation errors: ``query k: Input should be ...; body captions: ...``."""
    parts = []
    for e in errors:
        where = " ".join(str(x) for x in e.get("loc", ()) if x != "body" or len(e.get("loc", ())) == 1)
        parts.append(f"{where}: {e.get('msg', 'invalid')}" if where else str(e.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


async def _invalid(request: Request, exc: RequestValidationError) -> JSON:
    return JSON({"detail": error_text(exc.errors())}, status_code=422)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSON:
    return JSON({"detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


async def _query_error(request: Request, exc: QueryError | FilterError) -> JSON:
    return JSON({"detail": str(exc)}, status_code=422)


async def _user_error(request: Request, exc: ReelsearchError) -> JSON:
    return JSON({"detail": str(exc)}, status_code=400)


async def _unavailable(request: Request, exc: CatalogUnavailable) -> JSON:
    return JSON({"detail": str(exc)}, status_code=503, headers={"Retry-After": "1"})


#: Every error answers ``{"detail": "..."}``: invalid parameters 422, a bad query or filter 422, bad input 400, the
#: catalog's database unreachable 503 (the next request reconnects).
EXCEPTION_HANDLERS = {RequestValidationError: _invalid, StarletteHTTPException: _http_error, QueryError: _query_error,
                      FilterError: _query_error, CatalogUnavailable: _unavailable, ReelsearchError: _user_error}


class MediaResponse(FileResponse):
    """starlette's FileResponse (ranges, multipart ranges, 416, If-Range, ETag, Last-Modified, HEAD), except that a
    ``Range`` in a unit other than bytes is ignored (RFC 9110 §14.2: an origin server MUST ignore a range unit it
    does not understand) where starlette answers 400."""

    async def __call__(self, scope, receive, send) -> None:
        headers = scope.get("headers") or []
        for name, value in headers:
            if name == b"range" and value.split(b"=", 1)[0].strip().lower() != b"bytes":
                scope = dict(scope, headers=[h for h in headers if h[0] != b"range"])
                break
        await super().__call__(scope, receive, send)


class AccessLog:
    """ASGI middleware: one line per request on the ``reelsearch.access`` logger: client, method, path (no query
    string: queries are the users' own words), status and milliseconds."""

    def __init__(self, app, logger: logging.Logger = access_logger):
        self.app = app
        self.logger = logger

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # what the client gets if the app raises before answering

        async def send_and_note(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            client = scope.get("client") or ("-", 0)
            path = display_path(scope.get("path", ""), one_line=True)
            self.logger.info('%s "%s %s" %d %.1f ms', client[0], scope.get("method", "-"), path, status,
                             (time.perf_counter() - start) * 1000)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 (by its Content-Length before anything is read,
    or as soon as a streamed body passes the limit)."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers") or []:
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await self._too_large(send)
                return
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413, f"request body larger than {self.limit} bytes")
            return message

        await self.app(scope, limited_receive, send)

    async def _too_large(self, send) -> None:
        body = json.dumps({"detail": f"request body larger than {self.limit} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
