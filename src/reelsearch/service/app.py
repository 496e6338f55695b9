"""The HTTP service: JSON API (search, annotate, video metadata, thumbnails, media with range requests) and the page.

One ``Searcher`` (model + index) per process, shared by every request: its query encoder batches the texts of
concurrent requests through the model, and its lock serialises the index's SQLite connection, so the app is safe
under uvicorn's thread pool. The routes are in ``reelsearch.service.routes``; this module assembles them with the
error handlers, the middleware (body limit, access log), the API key and the page. Every status code and limit is
declared in the OpenAPI schema (``/openapi.json``), which the tests check with schemathesis.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from reelsearch.indexing.watch import FolderWatcher
from reelsearch.search.searcher import Searcher
from reelsearch.service import contract
from reelsearch.service.auth import key_checker
from reelsearch.service.contract import MAX_UPLOAD_BYTES
from reelsearch.service.http import EXCEPTION_HANDLERS, JSON, AccessLog, BodyLimit
from reelsearch.service.routes import ROUTERS

STATIC_DIR = Path(__file__).resolve().parent / "static"
#: Where the local Swagger UI's files are served (``_local_swagger_ui``).
DOCS_ASSETS = "/docs-assets"


def create_app(searcher: Searcher, *, api_key: str | None = None, access_log: bool = False,
               max_body_bytes: int = MAX_UPLOAD_BYTES + (1 << 20), watcher: FolderWatcher | None = None) -> FastAPI:
    """The FastAPI app serving ``searcher`` (OpenAPI docs at /docs, the search page at /).

    ``api_key``: every API route then needs it (``X-API-Key`` header, ``Authorization: Bearer``, or for GET/HEAD the
    page's cookie); the page, its static files and the API docs stay public. ``access_log``: one line per request
    on the ``reelsearch.access`` logger. ``max_body_bytes``: larger request bodies get 413. ``watcher``: the
    FolderWatcher keeping the index current (``serve --watch``), whose status ``GET /health`` gives.
    """
    swagger = _local_swagger_ui()
    app = FastAPI(title="reelsearch", version="0.1.0", docs_url=None if swagger else "/docs", redoc_url=None,
                  default_response_class=JSON, description=contract.DESCRIPTION,
                  responses={413: contract.error("request body too large")}, exception_handlers=EXCEPTION_HANDLERS)
    app.state.searcher = searcher
    app.state.watcher = watcher
    if swagger:  # the API docs page from local files, not a CDN
        app.mount(DOCS_ASSETS, StaticFiles(directory=swagger), name="docs-assets")
        app.add_api_route("/docs", docs, include_in_schema=False)
    api = APIRouter(dependencies=[Depends(key_checker(api_key))] if api_key else [],
                    responses={401: contract.error("missing or wrong API key")} if api_key else {})
    for router in ROUTERS:
        api.include_router(router)
    app.include_router(api)
    app.add_api_route("/", page, include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    if access_log:
        app.add_middleware(AccessLog)
    return app


def docs(request: Request):
    """The API docs page (Swagger UI) from local files."""
    return get_swagger_ui_html(openapi_url=request.app.openapi_url, title="reelsearch API",
                               swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                               swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                               swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png")


def page() -> FileResponse:
    """The search page."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


def _local_swagger_ui() -> str | None:
    """Folder of Swagger UI's files from the swagger-ui-bundle-v2 package, when installed (else FastAPI's CDN page)."""
    try:
        from swagger_ui_bundle import swagger_ui_path  # noqa: PLC0415 - optional package (the serve extra)
    except ImportError:
        return None
    return str(swagger_ui_path) if (Path(swagger_ui_path) / "swagger-ui-bundle.js").is_file() else None
