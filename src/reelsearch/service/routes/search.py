"""``GET /search``: videos matching a sentence and/or like an indexed video, best first; ``POST /search/like``: videos
like an uploaded file."""

from __future__ import annotations

import os
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from reelsearch.display import NO_GOOD_MATCH_MESSAGE
from reelsearch.errors import QueryError, ReelsearchError
from reelsearch.search.filters import Filter, FilterError, filter_pairs
from reelsearch.search.request import Answer
from reelsearch.search.searcher import Searcher
from reelsearch.service import contract
from reelsearch.service.contract import MAX_JSON_BYTES
from reelsearch.service.http import JSON, error_text
from reelsearch.service.routes.common import SearcherDep, save_upload, upload_label, upload_problem, video_record

router = APIRouter()


@router.get("/search", summary="Videos matching a sentence and/or like an indexed video, best first, with their "
                               "best moment",
            description="Ranks by what the videos show (the model) and, when the index holds them, by what is said "
                        "(speech) and written (on-screen text) in them, fused into one score; each result says "
                        "what each expert scored and which words matched. With `like` (a video's id, and `t` for "
                        "one moment of it), by how much they look like that video too (the video itself and "
                        "copies of its file are left out). Filters, in `q` (`beach after:2023-07 folder:holiday "
                        "-people \"exact phrase\"`) or as parameters, restrict the ranking to the videos that pass "
                        "them; filters alone list those, newest first; a malformed filter is 422.",
            responses=contract.ok(contract.SearchResponse, 400, 404, 422, reasons={
                400: "neither `q`, `like` nor a filter given; `t` without `like`; `t` beyond the end of video "
                     "`like`; an expert the index lacks",
                404: "no video `like`",
                422: "invalid parameters; a malformed filter (in `q` or a filter parameter: the filter is named), "
                     "a date that does not exist or that is in the future"}),
            openapi_extra={"parameters": contract.query_parameters(contract.SearchQuery)})
async def search(request: Request) -> Response:
    """In the event loop: the searcher's encoder and index stage answer it there (``Searcher.answer_async``), no
    thread of the pool waits for them; an example (``like``), read from the index, is read in one. The app's Searcher
    read from its state, not by a dependency (FastAPI's solving of it cost the route about a tenth of its time)."""
    searcher: Searcher = request.app.state.searcher
    params = contract.read_query(contract.SearchQuery, request.query_params)
    q, k, like, t = params.q, params.k, params.like, params.t
    if t is not None and like is None:
        raise HTTPException(400, "t needs like (a video's id)")
    options = Filter.of(filter_pairs(params.filter_options()))
    if q is None and like is None and not options:
        raise HTTPException(400, "give q, like or both, or filters")
    example = None
    if like is not None:
        example = await run_in_threadpool(lambda: searcher.example_video(video_record(searcher, like).id, t))
    answer = await searcher.answer_async(q, k, frames=True, experts=params.experts, like=example, filters=options,
                                         moments=params.moments, sort=params.sort)
    return _answer(answer, q, k, example)


@router.post("/search/like", summary="Videos like an uploaded video or image, best first",
             description="The upload is decoded and embedded (not added to the index); indexed copies of it "
                         "(same content) are left out.",
             responses=contract.ok(contract.SearchResponse, 400, 415, 422, reasons={
                 400: "the upload is not a decodable video or image, or `t` is beyond its end; a malformed "
                      "multipart body",
                 422: "no file; a field given twice or unknown; a field given in the query string and the form "
                      "with different values; an invalid `q`, `k`, `t` or `sort`; a malformed filter in `q`"}),
             openapi_extra={"requestBody": contract.like_body()})
async def search_like(request: Request, searcher: SearcherDep,
                      query: Annotated[contract.LikeQuery, Query()]) -> Response:
    form = await request.form(max_files=1, max_fields=5, max_part_size=MAX_JSON_BYTES)
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise HTTPException(422, "multipart body needs a file field")
    given = [(key, value) for key, value in form.multi_items() if key != "file"]
    if len(given) != len(dict(given)):
        raise HTTPException(422, "give each field (q, k, t, sort) at most once")
    try:
        fields = _either_way(query, contract.LikeFields.model_validate(dict(given)))
    except ValidationError as exc:
        raise HTTPException(422, error_text(exc.errors())) from None
    path = await save_upload(upload)
    try:
        example = await run_in_threadpool(searcher.example_file, path, fields.t, upload_label(upload))
        answer = await run_in_threadpool(searcher.answer, fields.q, fields.k, frames=True, like=example,
                                         sort=fields.sort)
    except (QueryError, FilterError):
        raise  # the query's own problem: 422, as for GET /search
    except ReelsearchError as exc:
        raise upload_problem(exc, path, upload) from None
    finally:
        os.unlink(path)
    return _answer(answer, fields.q, fields.k, example)


def _either_way(query: contract.LikeQuery, form: contract.LikeFields) -> contract.LikeFields:
    """The fields of ``POST /search/like`` given in its query string or its form; one given both ways must have the
    same value (else 422 naming it)."""
    for name in sorted(query.model_fields_set & form.model_fields_set):
        if getattr(query, name) != getattr(form, name):
            raise HTTPException(422, f"{name} given in the query string ({getattr(query, name)}) and the form "
                                     f"({getattr(form, name)}) with different values: give it once")
    return form.model_copy(update={name: getattr(query, name) for name in query.model_fields_set})


def _answer(answer: Answer, q: str | None, k: int, example) -> Response:
    """The JSON of a search's ``answer`` for the box ``q``."""
    rows = [r.to_json() for r in answer.results]
    for r, row in zip(answer.results, rows, strict=True):
        row["thumbnail"], row["media"] = f"/videos/{r.id}/thumbnail?frame={r.frame}", f"/videos/{r.id}/media"
    weak, filt = answer.no_good_match, answer.filters
    out = {"query": q, "k": k, "no_good_match": weak, **({"message": NO_GOOD_MATCH_MESSAGE} if weak else {}),
           "results": rows}
    if example is not None:
        out["like"] = example.label
    if filt:
        out["filters"], out["filtered"] = filt.to_json(), filt.describe()
    return JSON(out)
