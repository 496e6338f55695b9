"""``POST /annotate``: rank captions for a video — an indexed one (JSON: its id, path or path_b64) or an uploaded
file (multipart)."""

from __future__ import annotations

import os

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from reelsearch.errors import ReelsearchError
from reelsearch.index.paths import path_from_b64
from reelsearch.search.searcher import Searcher
from reelsearch.service import contract
from reelsearch.service.contract import MAX_CAPTIONS, MAX_JSON_BYTES, MAX_QUERY_CHARS
from reelsearch.service.http import JSON, error_text
from reelsearch.service.routes.common import SearcherDep, save_upload, upload_problem, video_record

router = APIRouter()
_NOT_INDEXED = "that path is not in the index (only indexed files can be named)"


@router.post("/annotate", summary="Rank captions for a video (indexed id or path, or an uploaded file)",
             responses=contract.ok(contract.AnnotateResponse, 400, 404, 415, 422, reasons={
                 400: "the upload is not a decodable video or image; a malformed multipart body",
                 404: "no video with that id, or that path is not in the index",
                 422: "invalid body: no video named, unknown fields, no captions, too many or too long ones"}),
             openapi_extra={"requestBody": contract.annotate_body()})
async def annotate(request: Request, searcher: SearcherDep) -> Response:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        return JSON({"captions": await _annotate_indexed(request, searcher)})
    if kind == "multipart/form-data":
        return JSON({"captions": await _annotate_upload(request, searcher)})
    raise HTTPException(415, "send application/json or multipart/form-data")


async def _annotate_indexed(request: Request, searcher: Searcher) -> list[dict]:
    """The JSON form: an indexed video by id, path or path_b64."""
    body = await request.body()
    if len(body) > MAX_JSON_BYTES:
        raise HTTPException(413, f"a JSON body may have at most {MAX_JSON_BYTES >> 20} MiB")
    try:
        req = contract.AnnotateRequest.model_validate_json(body)
    except ValidationError as exc:
        raise HTTPException(422, error_text(exc.errors())) from None
    captions = _captions(req.captions)
    if req.id is not None:
        vid = video_record(searcher, req.id).id
    else:
        vid = _find(searcher, req.path if req.path is not None else _decode_b64(req.path_b64))
    return await run_in_threadpool(searcher.annotate_id, vid, captions)


async def _annotate_upload(request: Request, searcher: Searcher) -> list[dict]:
    """The multipart form: an uploaded file and one captions field (one caption per line)."""
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
    path = await save_upload(upload)
    try:
        return await run_in_threadpool(searcher.annotate, path, captions)
    except ReelsearchError as exc:
        raise upload_problem(exc, path, upload) from None
    finally:
        os.unlink(path)


def _find(searcher: Searcher, path: str) -> str:
    """Id of the indexed file at ``path`` (404 when it is not indexed)."""
    if "\0" not in path:
        with searcher.lock:
            vid = searcher.catalog.find(path)
        if vid is not None:
            return vid
    raise HTTPException(404, _NOT_INDEXED)


def _decode_b64(value: str) -> str:
    try:
        return path_from_b64(value)
    except ValueError:
        raise HTTPException(404, _NOT_INDEXED) from None


def _captions(value: list[str]) -> list[str]:
    captions = [c.strip() for c in value if c.strip()]
    if not captions:
        raise HTTPException(422, "no captions given")
    if len(captions) > MAX_CAPTIONS:
        raise HTTPException(422, f"at most {MAX_CAPTIONS} captions")
    if any(len(c) > MAX_QUERY_CHARS for c in captions):
        raise HTTPException(422, f"a caption is longer than {MAX_QUERY_CHARS} characters")
    return captions
