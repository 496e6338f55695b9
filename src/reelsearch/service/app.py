"""The HTTP service: JSON API (search, annotate, video metadata, thumbnails, media with range requests) and the page.

One ``Searcher`` (model + index) per process, shared by every request; its lock serialises the model and the
index's SQLite connection, so the app is safe under uvicorn's thread pool. Files are served by video id only:
the path comes from the index, never from the request.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from reelsearch.errors import ReelsearchError
from reelsearch.media.decode import is_image_path
from reelsearch.search.searcher import MAX_QUERY_CHARS, QueryError, Searcher
from reelsearch.service.ranges import file_response

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_K = 100
MAX_CAPTIONS = 1000
MAX_UPLOAD_BYTES = 512 << 20
_ID = re.compile(r"^[0-9]{1,18}$")


def create_app(searcher: Searcher) -> FastAPI:
    """The FastAPI app serving ``searcher`` (OpenAPI docs at /docs, the search page at /)."""
    swagger = _local_swagger_ui()
    app = FastAPI(title="reelsearch", version="0.1.0", docs_url=None if swagger else "/docs", redoc_url=None,
                  description="Search videos with sentences; rank sentences for a video.")
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

    @app.exception_handler(QueryError)
    async def _query_error(request: Request, exc: QueryError):
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(ReelsearchError)
    async def _user_error(request: Request, exc: ReelsearchError):
        return JSONResponse({"detail": str(exc)}, status_code=400)

    def record(video_id: str):
        if not _ID.match(video_id):
            raise HTTPException(404, f"no video {video_id!r}")
        with searcher.lock:
            try:
                return searcher.library.video(video_id)
            except KeyError:
                raise HTTPException(404, f"no video {video_id!r}") from None

    @app.get("/health", summary="Liveness and what is served")
    def health() -> dict:
        with searcher.lock:
            return {"status": "ok", "videos": len(searcher.library), "model": searcher.model_id,
                    "mode": searcher.mode, "stale": searcher.stale()}

    @app.get("/search", summary="Videos matching a sentence, best first, with their best moment")
    def search(q: str = Query(..., min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for."),
               k: int = Query(10, ge=1, le=MAX_K, description="Number of results.")) -> dict:
        results = searcher.search(q, k, frames=True)
        for r in results:
            r["kind"] = "image" if is_image_path(r["path"]) else "video"
            r["thumbnail"] = f"/videos/{r['id']}/thumbnail?frame={r['frame']}"
            r["media"] = f"/videos/{r['id']}/media"
            r["name"] = os.path.basename(r["path"])
        return {"query": q, "k": k, "results": results}

    @app.post("/annotate", summary="Rank captions for a video (indexed id or path, or an uploaded file)",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"type": "object", "required": ["captions"], "properties": {
                      "id": {"type": "string"}, "path": {"type": "string", "description": "an indexed file"},
                      "captions": {"type": "array", "items": {"type": "string"}}}}},
                  "multipart/form-data": {"schema": {"type": "object", "required": ["file", "captions"],
                                                     "properties": {
                      "file": {"type": "string", "format": "binary"},
                      "captions": {"type": "string", "description": "one caption per line"}}}}}}})
    async def annotate(request: Request) -> dict:
        from starlette.concurrency import run_in_threadpool

        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "application/json":
            try:
                body = await request.json()
            except ValueError:
                raise HTTPException(422, "the body is not valid JSON") from None
            if not isinstance(body, dict):
                raise HTTPException(422, "expected a JSON object with captions and id or path")
            captions = _captions(body.get("captions"))
            if body.get("id") is not None:
                rec = record(str(body["id"]))
                ranked = await run_in_threadpool(searcher.annotate_id, rec.id, captions)
            elif isinstance(body.get("path"), str):
                with searcher.lock:
                    vid = searcher.library.find(body["path"])
                if vid is None:
                    raise HTTPException(404, "that path is not in the index (only indexed files can be named)")
                ranked = await run_in_threadpool(searcher.annotate_id, vid, captions)
            else:
                raise HTTPException(422, "give the video's id or its indexed path, or upload the file")
            return {"captions": ranked}
        if kind == "multipart/form-data":
            form = await request.form(max_files=1, max_fields=4)
            upload = form.get("file")
            text = form.get("captions")
            if upload is None or isinstance(upload, str):
                raise HTTPException(422, "multipart body needs a file field")
            if not isinstance(text, str):
                raise HTTPException(422, "multipart body needs a captions field (one caption per line)")
            captions = _captions(text.splitlines())
            path = await _save_upload(upload)
            try:
                ranked = await run_in_threadpool(searcher.annotate, path, captions)
            finally:
                os.unlink(path)
            return {"captions": ranked}
        raise HTTPException(415, "send application/json or multipart/form-data")

    @app.get("/videos/{video_id}", summary="Metadata of one indexed video")
    def video(video_id: str) -> dict:
        rec = record(video_id)
        with searcher.lock:
            media = searcher.library.media(rec.id)
        return {"id": rec.id, "path": rec.path, "name": os.path.basename(rec.path),
                "kind": "image" if is_image_path(rec.path) else "video", "size": rec.size,
                "duration": rec.duration, "n_frames": rec.n_frames, "sha256": rec.sha256, "model_id": rec.model_id,
                "frames": [{"index": i, "t": float(t)} for i, t in enumerate(media.timestamps)],
                "thumbnail": f"/videos/{rec.id}/thumbnail", "media": f"/videos/{rec.id}/media"}

    @app.get("/videos/{video_id}/thumbnail", summary="JPEG thumbnail of one sampled frame (default: the middle)",
             response_class=Response, responses={200: {"content": {"image/jpeg": {}}}})
    def thumbnail(video_id: str, frame: int | None = Query(None, ge=0, le=1_000_000)) -> Response:
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

    def media(video_id: str, request: Request) -> Response:
        rec = record(video_id)
        if not os.path.isfile(rec.path):
            raise HTTPException(404, "the file of this video is gone (re-run `reelsearch index`)")
        return file_response(rec.path, request.headers.get("range"), request.method)

    media_doc = "The video file itself (by id only); honours Range requests (206 Partial Content)"
    app.get("/videos/{video_id}/media", response_class=Response, summary=media_doc, operation_id="media")(media)
    app.head("/videos/{video_id}/media", response_class=Response, summary=media_doc, operation_id="media_head")(media)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _local_swagger_ui() -> str | None:
    """Folder of Swagger UI's files from the swagger-ui-bundle-v2 package, when installed (else FastAPI's CDN page)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    return str(swagger_ui_path) if (Path(swagger_ui_path) / "swagger-ui-bundle.js").is_file() else None


def _captions(value) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise HTTPException(422, "captions must be a list of strings")
    captions = [c.strip() for c in value if c.strip()]
    if not captions:
        raise HTTPException(422, "no captions given")
    if len(captions) > MAX_CAPTIONS:
        raise HTTPException(422, f"at most {MAX_CAPTIONS} captions")
    if any(len(c) > MAX_QUERY_CHARS for c in captions):
        raise HTTPException(422, f"a caption is longer than {MAX_QUERY_CHARS} characters")
    return captions


async def _save_upload(upload) -> str:
    """Write an uploaded file to a private temporary file (keeping a known media extension); return its path."""
    from reelsearch.media.decode import MEDIA_EXTENSIONS

    suffix = Path(upload.filename or "").suffix.lower()
    if suffix not in MEDIA_EXTENSIONS:
        raise HTTPException(415, f"upload a video or image file (extension one of {sorted(MEDIA_EXTENSIONS)})")
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
