"""``GET /duplicates``: the groups of indexed files that are the same footage."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from reelsearch.search.duplicates import DEFAULT_THRESHOLD
from reelsearch.service import contract
from reelsearch.service.http import JSON
from reelsearch.service.routes.common import SearcherDep

router = APIRouter()


@router.get("/duplicates", summary="Groups of indexed files that are the same footage, largest first",
            description="Re-encodes, other resolutions, crops, trims, copies with a caption burnt in and stills "
                        "taken from a clip are grouped: their frames match in order at one time offset (black, "
                        "flat or faded frames are no evidence, so clips that share only an opening are not).",
            responses=contract.ok(contract.DuplicatesResponse, 422))
async def duplicates(searcher: SearcherDep,
                     threshold: float = Query(DEFAULT_THRESHOLD, ge=0.01, le=1.0,
                                              description="Cosine from which two frames show the same picture.")
                     ) -> Response:
    groups = await run_in_threadpool(searcher.duplicates, threshold)
    return JSON({"threshold": threshold, "groups": [g.to_json() for g in groups]})
