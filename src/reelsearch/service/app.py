"""The HTTP service: JSON API (search, annotate, video metadata, thumbnails, media with range requests) and the page.

One ``Searcher`` (model + index) per process, shared by every request: its query encoder batches the texts of
concurrent requests through the model, and its lock serialises the index's SQLite connection, so the app is safe
under uvicorn's thread pool. Files are served by video id only: the path comes from the index, never from the request.
Every status code and limit is declared in the OpenAPI schema (``/openapi.json``), which the tests check with
schemathesis.
"""

from __future__ import annotations

import hmac
import mimetypes
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.security import APIKeyCookie, APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reelsearch.errors import ReelsearchError
from reelsearch.features.cues import CUES
from reelsearch.index.paths import display_path, path_fields, path_from_b64
from reelsearch.media.decode import MEDIA_EXTENSIONS, is_image_path
from reelsearch.search.searcher import QueryError, Searcher
from reelsearch.service import schema
from reelsearch.service.http import JSON, AccessLog, BodyLimit, MediaResponse, error_text
from reelsearch.service.schema import MAX_CAPTIONS, MAX_JSON_BYTES, MAX_K, MAX_QUERY_CHARS, MAX_UPLOAD_BYTES

STATIC_DIR = Path(__file__).resolve().parent / "static"
#: Cookie the page sets so that <img> and <video> requests carry the API key (GET and HEAD only).
KEY_COOKIE = "reelsearch_key"
#: Environment variable read by ``reelsearch serve`` when ``--api-key`` is not given.
API_KEY_ENV = "REELSEARCH_API_KEY"
MIN_KEY_CHARS = 16
_ID = re.compile(schema.ID_PATTERN)
_KEY_CHARS = re.compile(r"[A-Za-z0-9._~+/=-]+")


def check_api_key(key: str) -> str:
    """``key`` when usable as an API key, else ConfigError: at least MIN_KEY_CHARS letters, digits or ``-._~+/=``
    (the characters of base64 and URL-safe tokens, which a header and a cookie carry as they are)."""
    from reelsearch.errors import ConfigError

    if len(key) < MIN_KEY_CHARS or not _KEY_CHARS.fullmatch(key):
        raise ConfigError(f"the API key must be at least {MIN_KEY_CHARS} characters among letters, digits and "
                          "-._~+/= (make one with: python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    return key


def create_app(searcher: Searcher, *, api_key: str | None = None, access_log: bool = False,
               max_body_bytes: int = MAX_UPLOAD_BYTES + (1 << 20)) -> FastAPI:
    """The FastAPI app serving ``searcher`` (OpenAPI docs at /docs, the search page at /).

    ``api_key``: every API route then needs it (``X-API-Key`` header, ``Authorization: Bearer``, or for GET/HEAD the
    page's cookie); the page, its static files and the API docs stay public. ``access_log``: one line per request
    on the ``reelsearch.access`` logger. ``max_body_bytes``: larger request bodies get 413.
    """
    swagger = _local_swagger_ui()
    app = FastAPI(title="reelsearch", version="0.1.0", docs_url=None if swagger else "/docs", redoc_url=None,
                  default_response_class=JSON, description=schema.DESCRIPTION,
                  responses={413: schema.error("request body too large")})
    app.state.searcher = searcher
    if swagger:  # the API docs page from local files, not a CDN
        from fastapi.openapi.docs import get_swagger_ui_html

        app.mount("/docs-assets", StaticFiles(directory=swagger), name="docs-assets")

        @app.get("/docs", include_in_schema=False)
        def docs():
            return get_swagger_ui_html(openapi_url=app.openapi_url, title="reelsearch API",
                                       swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                       swagger_css_url="/docs-assets/swagger-ui.css",
                                       swagger_favicon_url="/docs-assets/favicon-32x32.png")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return JSON({"detail": error_text(exc.errors())}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return JSON({"detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(QueryError)
    async def _query_error(request: Request, exc: QueryError):
        return JSON({"detail": str(exc)}, status_code=422)

    @app.exception_handler(ReelsearchError)
    async def _user_error(request: Request, exc: ReelsearchError):
        return JSON({"detail": str(exc)}, status_code=400)

    auth = [Depends(_key_checker(check_api_key(api_key)))] if api_key else []
    api = APIRouter(dependencies=auth, responses={401: schema.error("missing or wrong API key")} if api_key else {})

    def record(video_id: str):
        if not _ID.match(video_id):
            raise HTTPException(404, f"no video {display_path(video_id, one_line=True)!r}")
        with searcher.lock:
            try:
                return searcher.library.video(video_id)
            except KeyError:
                raise HTTPException(404, f"no video {video_id}") from None

    @api.get("/health", summary="Liveness and what is served", responses=schema.ok(schema.Health))
    def health() -> Response:
        with searcher.lock:
            cues = searcher.cues
            return JSON({"status": "ok", "videos": len(searcher.library), "model": searcher.model_id,
                         "mode": searcher.mode, "stale": searcher.stale(),
                         "experts": ["visual", *(cues.stored_cues() if cues is not None else [])]})

    @api.get("/search", summary="Videos matching a sentence, best first, with their best moment",
             description="Ranks by what the videos show (the model) and, when the index holds them, by what is said "
                         "(speech) and written (on-screen text) in them, fused into one score; each result says "
                         "what each expert scored and which words matched.",
             responses=schema.ok(schema.SearchResponse, 400, 422))
    def search(q: str = Query(..., min_length=1, max_length=MAX_QUERY_CHARS, pattern=schema.NON_BLANK,
                              description="What to look for (not blank).", examples=["a dog catches a frisbee"]),
               k: int = Query(10, ge=1, le=MAX_K, description="Number of results."),
               experts: str | None = Query(None, pattern=schema.EXPERTS_PATTERN, max_length=64,
                                           description="Experts to fuse, comma-separated (default: all the index "
                                                       "holds; a cue the index lacks is 400).",
                                           examples=["visual,speech,ocr"])) -> Response:
        results = [{**r.to_json(), "thumbnail": f"/videos/{r.id}/thumbnail?frame={r.frame}",
                    "media": f"/videos/{r.id}/media"} for r in searcher.search(q, k, frames=True, experts=experts)]
        return JSON({"query": q, "k": k, "results": results})

    @api.post("/annotate", summary="Rank captions for a video (indexed id or path, or an uploaded file)",
              responses=schema.ok(schema.AnnotateResponse, 400, 404, 415, 422),
              openapi_extra={"requestBody": schema.annotate_body()})
    async def annotate(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "application/json":
            body = await request.body()
            if len(body) > MAX_JSON_BYTES:
                raise HTTPException(413, f"a JSON body may have at most {MAX_JSON_BYTES >> 20} MiB")
            try:
                req = schema.AnnotateRequest.model_validate_json(body)
            except ValidationError as exc:
                raise HTTPException(422, error_text(exc.errors())) from None
            captions = _captions(req.captions)
            if req.id is not None:
                vid = record(req.id).id
            else:
                vid = _find(searcher, req.path if req.path is not None else _decode_b64(req.path_b64))
            return JSON({"captions": await run_in_threadpool(searcher.annotate_id, vid, captions)})
        if kind == "multipart/form-data":
            form = await request.form(max_files=1, max_fields=4, max_part_size=MAX_JSON_BYTES)
            upload, fields = form.get("file"), form.getlist("captions")
            if upload is None or isinstance(upload, str):
                raise HTTPException(422, "multipart body needs a file field")
            if len(fields) != 1 or not isinstance(fields[0], str):
                raise HTTPException(422, "multipart body needs one captions field (one caption per line)")
            if set(form.keys()) - {"file", "captions"}:
                raise HTTPException(422, f"unexpected fields {sorted(set(form.keys()) - {'file', 'captions'})}")
            if len(fields[0]) > MAX_QUERY_CHARS:
                raise HTTPException(422, f"the captions field may have at most {MAX_QUERY_CHARS} characters "
                                         "(for more captions, index the file and send JSON)")
            captions = _captions(fields[0].splitlines())
            path = await _save_upload(upload)
            try:
                ranked = await run_in_threadpool(searcher.annotate, path, captions)
            except ReelsearchError as exc:  # name the upload, not our temporary file
                problem = getattr(exc, "problem", None) or str(exc)
                raise HTTPException(400, f"{display_path(upload.filename or 'upload', one_line=True)}: {problem}") \
                    from None
            finally:
                os.unlink(path)
            return JSON({"captions": ranked})
        raise HTTPException(415, "send application/json or multipart/form-data")

    @api.get("/videos/{video_id}", summary="Metadata of one indexed video",
             responses=schema.ok(schema.VideoInfo, 404, 422))
    def video(video_id: str = schema.VIDEO_ID) -> Response:
        rec = record(video_id)
        with searcher.lock:
            media = searcher.library.media(rec.id)
        return JSON({"id": rec.id, **path_fields(rec.path), "kind": "image" if is_image_path(rec.path) else "video",
                     "size": rec.size, "duration": rec.duration, "n_frames": rec.n_frames, "sha256": rec.sha256,
                     "model_id": rec.model_id,
                     "frames": [{"index": i, "t": float(t)} for i, t in enumerate(media.timestamps)],
                     "thumbnail": f"/videos/{rec.id}/thumbnail", "media": f"/videos/{rec.id}/media"})

    @api.get("/videos/{video_id}/transcript", summary="What is said and written in one video: timed segments",
             responses=schema.ok(schema.Transcript, 404, 422))
    def transcript(video_id: str = schema.VIDEO_ID,
                   cue: Literal["speech", "ocr"] | None = Query(None, description="Only this cue's segments.")
                   ) -> Response:
        rec = record(video_id)
        with searcher.lock:
            cues = searcher.cues
            runs = cues.runs(rec.id) if cues is not None else {}
            segments = cues.segments(rec.id, [cue] if cue else CUES) if cues is not None else []
        status = {c: {"status": "not extracted", "segments": 0, "recipe": None, "error": None} for c in CUES}
        for c, run in runs.items():
            status[c] = {"status": "failed" if run.error else "done", "segments": run.n_segments,
                         "recipe": run.recipe, "error": run.error}
        return JSON({"id": rec.id, **path_fields(rec.path), "cues": status,
                     "segments": [_segment_json(seg) for seg in segments]})

    @api.get("/videos/{video_id}/thumbnail", summary="JPEG thumbnail of one sampled frame (default: the middle)",
             response_class=Response, responses={**schema.image_ok(), 404: schema.error("no such video or frame"),
                        422: schema.error("invalid parameters")})
    def thumbnail(video_id: str = schema.VIDEO_ID,
                  frame: int | None = Query(None, ge=0, le=1_000_000, description="Frame index.")) -> Response:
        rec = record(video_id)
        index = rec.n_frames // 2 if frame is None else frame
        with searcher.lock:
            try:
                data = searcher.library.thumbnail(rec.id, index)
            except KeyError:
                raise HTTPException(404, f"video {rec.id} has no frame {index}") from None
        if data is None:
            raise HTTPException(404, "no thumbnail stored for this frame")
        kind = "image/png" if data[:8] == b"\x89PNG\r\n\x1a\n" else "image/jpeg"
        return Response(data, media_type=kind, headers={"Cache-Control": "max-age=3600"})

    def media(video_id: str = schema.VIDEO_ID, range_: str | None = schema.RANGE,
              if_range: str | None = schema.IF_RANGE) -> Response:
        # the headers are declared for the schema; MediaResponse reads them from the request (starlette's FileResponse)
        rec = record(video_id)
        try:
            st = os.stat(rec.path)
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            raise HTTPException(404, "the file of this video is gone (re-run `reelsearch index`)")
        return MediaResponse(rec.path, stat_result=st, filename=path_fields(rec.path)["name"],
                             content_disposition_type="inline", headers={"Cache-Control": "no-cache"})

    media_doc = "The video file itself (by id only); honours Range and If-Range (206 Partial Content)"
    for method in ("get", "head"):
        getattr(api, method)("/videos/{video_id}/media", response_class=Response, summary=media_doc,
                             operation_id=f"media_{method}", responses=schema.media_responses())(media)
    app.include_router(api)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    if access_log:
        app.add_middleware(AccessLog)
    return app


def _segment_json(seg) -> dict:
    out = {"cue": seg.cue, "start": seg.start, "end": seg.end, "text": seg.text, "confidence": seg.confidence}
    if seg.box is not None:
        out["box"] = list(seg.box)
    if seg.words:
        out["words"] = [{"start": a, "end": b, "word": w} for a, b, w in seg.words]
    return out


def _key_checker(key: str):
    """A dependency that accepts ``key`` from the X-API-Key header, a Bearer token or (GET/HEAD) the page's cookie."""
    header = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="apiKey",
                          description="The key given to `reelsearch serve --api-key` (or REELSEARCH_API_KEY).")
    bearer = HTTPBearer(auto_error=False, scheme_name="bearer", description="The same key as a Bearer token.")
    cookie = APIKeyCookie(name=KEY_COOKIE, auto_error=False, scheme_name="cookie",
                          description="The same key in the page's cookie; accepted for GET and HEAD only.")
    expected = key.encode()

    def check(request: Request, from_header: str | None = Security(header),
              from_bearer: HTTPAuthorizationCredentials | None = Security(bearer),
              from_cookie: str | None = Security(cookie)) -> None:
        given = from_header or (from_bearer.credentials if from_bearer else None)
        if given is None and request.method in ("GET", "HEAD"):
            given = from_cookie
        # constant-time comparison; header values arrive as latin-1 text, so any byte round-trips
        if given is None or not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected):
            raise HTTPException(401, "missing or wrong API key (send it as X-API-Key or Authorization: Bearer)",
                                headers={"WWW-Authenticate": "Bearer"})

    return check


def _find(searcher: Searcher, path: str) -> str:
    """Id of the indexed file at ``path`` (404 when it is not indexed)."""
    if "\0" not in path:
        with searcher.lock:
            vid = searcher.library.find(path)
        if vid is not None:
            return vid
    raise HTTPException(404, "that path is not in the index (only indexed files can be named)")


def _decode_b64(value: str) -> str:
    try:
        return path_from_b64(value)
    except ValueError:
        raise HTTPException(404, "that path is not in the index (only indexed files can be named)") from None


def _local_swagger_ui() -> str | None:
    """Folder of Swagger UI's files from the swagger-ui-bundle-v2 package, when installed (else FastAPI's CDN page)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    return str(swagger_ui_path) if (Path(swagger_ui_path) / "swagger-ui-bundle.js").is_file() else None


def _captions(value: list[str]) -> list[str]:
    captions = [c.strip() for c in value if c.strip()]
    if not captions:
        raise HTTPException(422, "no captions given")
    if len(captions) > MAX_CAPTIONS:
        raise HTTPException(422, f"at most {MAX_CAPTIONS} captions")
    if any(len(c) > MAX_QUERY_CHARS for c in captions):
        raise HTTPException(422, f"a caption is longer than {MAX_QUERY_CHARS} characters")
    return captions


async def _save_upload(upload) -> str:
    """Write an uploaded file to a private temporary file (keeping a known media extension); return its path.

    The extension comes from the file name when it is a media extension, else from the part's content type
    (image/... or video/...): it tells the decoder an image from a video; the content decides the rest."""
    suffix = Path(upload.filename or "").suffix.lower()
    if suffix not in MEDIA_EXTENSIONS:
        kind = (upload.content_type or "").split("/")[0].strip().lower()
        guess = mimetypes.guess_extension((upload.content_type or "").split(";")[0].strip().lower()) or ""
        suffix = guess if guess in MEDIA_EXTENSIONS else {"image": ".png", "video": ".mp4"}.get(kind, "")
    if suffix not in MEDIA_EXTENSIONS:
        raise HTTPException(415, "upload a video or image file (an image/* or video/* part, or a file name with "
                                 f"one of the extensions {sorted(MEDIA_EXTENSIONS)})")
    fd, path = tempfile.mkstemp(prefix="reelsearch-upload-", suffix=suffix)
    written = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            while block := await upload.read(1 << 20):
                written += len(block)
                if written > MAX_UPLOAD_BYTES:
                    raise HTTPException(413, f"upload larger than {MAX_UPLOAD_BYTES >> 20} MiB")
                fh.write(block)
    except BaseException:
        os.unlink(path)
        raise
    return path
