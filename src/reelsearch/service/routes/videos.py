"""``/videos/{id}``: an indexed video's metadata, transcript, thumbnails and file (by id only: the path comes from the
index, never from the request)."""

from __future__ import annotations

import os
from typing import Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from reelsearch.features.cues import CUES
from reelsearch.index.paths import path_fields, unreachable
from reelsearch.media.decode import is_image_path
from reelsearch.service import contract
from reelsearch.service.http import JSON, MediaResponse
from reelsearch.service.routes.common import SearcherDep, video_record

router = APIRouter()


@router.get("/videos/{video_id}", summary="Metadata of one indexed video",
            responses=contract.ok(contract.VideoInfo, 404, 422))
def video(searcher: SearcherDep, video_id: str = contract.VIDEO_ID) -> Response:
    rec = video_record(searcher, video_id)
    with searcher.lock:
        media = searcher.catalog.media(rec.id)
    kind = "audio" if not media.pictured else "image" if is_image_path(rec.path) else "video"
    return JSON({"id": rec.id, **path_fields(rec.path), "kind": kind,
                 "size": rec.size, "duration": rec.duration, "n_frames": rec.n_frames, "sha256": rec.sha256,
                 "model_id": rec.model_id,
                 "frames": [{"index": i, "t": float(t)} for i, t in enumerate(media.timestamps)],
                 "thumbnail": f"/videos/{rec.id}/thumbnail", "media": f"/videos/{rec.id}/media"})


@router.get("/videos/{video_id}/transcript", summary="What is said and written in one video: timed segments",
            responses=contract.ok(contract.Transcript, 404, 422))
def transcript(searcher: SearcherDep, video_id: str = contract.VIDEO_ID,
               cue: Literal["speech", "ocr"] | None = Query(None, description="Only this cue's segments.")
               ) -> Response:
    rec = video_record(searcher, video_id)
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


@router.get("/videos/{video_id}/thumbnail", summary="JPEG thumbnail of one sampled frame (default: the middle)",
            response_class=Response, responses={**contract.image_ok(), 404: contract.error("no such video or frame"),
                                                422: contract.error("invalid parameters")})
def thumbnail(searcher: SearcherDep, video_id: str = contract.VIDEO_ID,
              frame: int | None = Query(None, ge=0, le=1_000_000, description="Frame index.")) -> Response:
    rec = video_record(searcher, video_id)
    index = rec.n_frames // 2 if frame is None else frame
    with searcher.lock:
        try:
            data = searcher.catalog.thumbnail(rec.id, index)
        except KeyError:
            raise HTTPException(404, f"video {rec.id} has no frame {index}") from None
    if data is None:
        raise HTTPException(404, "no thumbnail stored for this frame")
    kind = "image/png" if data[:8] == b"\x89PNG\r\n\x1a\n" else "image/jpeg"
    return Response(data, media_type=kind, headers={"Cache-Control": "max-age=3600"})


_MEDIA = {"response_class": Response, "responses": contract.media_responses(),
          "summary": "The video file itself (by id only); honours Range and If-Range (206 Partial Content)"}


@router.head("/videos/{video_id}/media", operation_id="media_head", **_MEDIA)
@router.get("/videos/{video_id}/media", operation_id="media_get", **_MEDIA)
def media(searcher: SearcherDep, video_id: str = contract.VIDEO_ID, range_: str | None = contract.RANGE,
          if_range: str | None = contract.IF_RANGE) -> Response:
    # the headers are declared for the schema; MediaResponse reads them from the request (starlette's FileResponse)
    rec = video_record(searcher, video_id)
    why = unreachable(rec.path)
    if why is not None:  # gone, or not mounted on this host (--media-root), or not readable by this process
        raise HTTPException(404, f"the file of this video cannot be served here: {why} (re-run `reelsearch index` if "
                            "it was deleted, or give `serve --media-root OLD=NEW` where this host mounts it elsewhere)")
    st = os.stat(rec.path)
    return MediaResponse(rec.path, stat_result=st, filename=path_fields(rec.path)["name"],
                         content_disposition_type="inline", headers={"Cache-Control": "no-cache"})


def _segment_json(seg) -> dict:
    out = {"cue": seg.cue, "start": seg.start, "end": seg.end, "text": seg.text, "confidence": seg.confidence}
    if seg.box is not None:
        out["box"] = list(seg.box)
    if seg.words:
        out["words"] = [{"start": a, "end": b, "word": w} for a, b, w in seg.words]
    return out
