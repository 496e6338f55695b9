"""``GET /health``: liveness and what is served."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from reelsearch.service import contract
from reelsearch.service.http import JSON
from reelsearch.service.routes.common import SearcherDep

router = APIRouter()


@router.get("/health", summary="Liveness and what is served", responses=contract.ok(contract.Health))
def health(searcher: SearcherDep, request: Request) -> Response:
    watcher = request.app.state.watcher
    watch = {"watch": watcher.status()} if watcher is not None else {}
    with searcher.lock:
        cues = searcher.cues
        return JSON({"status": "ok", "videos": len(searcher.catalog), "model": searcher.model_id,
                     "mode": searcher.mode, "stale": searcher.stale(),
                     "experts": ["visual", *(cues.stored_cues() if cues is not None else [])], **watch})
