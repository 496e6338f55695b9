"""``GET /search``: videos matching a sentence, best first."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response

from reelsearch.service import schema
from reelsearch.service.http import JSON
from reelsearch.service.routes.common import SearcherDep
from reelsearch.service.schema import MAX_K, MAX_QUERY_CHARS

router = APIRouter()


@router.get("/search", summary="Videos matching a sentence, best first, with their best moment",
            description="Ranks by what the videos show (the model) and, when the index holds them, by what is said "
                        "(speech) and written (on-screen text) in them, fused into one score; each result says "
                        "what each expert scored and which words matched.",
            responses=schema.ok(schema.SearchResponse, 400, 422))
def search(searcher: SearcherDep,
           q: str = Query(..., min_length=1, max_length=MAX_QUERY_CHARS, pattern=schema.NON_BLANK,
                          description="What to look for (not blank).", examples=["a dog catches a frisbee"]),
           k: int = Query(10, ge=1, le=MAX_K, description="Number of results."),
           experts: str | None = Query(None, pattern=schema.EXPERTS_PATTERN, max_length=64,
                                       description="Experts to fuse, comma-separated (default: all the index "
                                                   "holds; a cue the index lacks is 400).",
                                       examples=["visual,speech,ocr"])) -> Response:
    results = [{**r.to_json(), "thumbnail": f"/videos/{r.id}/thumbnail?frame={r.frame}",
                "media": f"/videos/{r.id}/media"} for r in searcher.search(q, k, frames=True, experts=experts)]
    return JSON({"query": q, "k": k, "results": results})
