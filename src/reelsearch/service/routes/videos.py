"""``/videos``: the catalog, a page at a time; ``/videos/{id}``: an indexed video's metadata, transcript, thumbnails
and file (by id only: the path comes from the index, never from the request)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Literal

import numpy as np
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from reelsearch.features.cues import CUES
from reelsearch.index.catalog import file_kind
from reelsearch.index.media import THUMBNAIL_SIZE
from reelsearch.index.paths import display_path, path_fields, unreachable
from reelsearch.search.filters import Filter, in_folders
from reelsearch.service import contract
from reelsearch.service.http import JSON, MediaResponse
from reelsearch.service.routes.common import SearcherDep, video_record
from reelsearch.service.thumbnails import SIZES, SharpThumbnails, served_size

router = APIRouter()
#: The larger thumbnails made from the files (shared by every app of the process: keyed by path and time).
SHARP = SharpThumbnails()


@router.get("/videos", summary="The indexed videos and photos, a page at a time, and the catalog's folders",
            description="Browse the catalog: every file (or those under `folder`, as the search filter `folder:` "
                        "reads it), newest first or by name, `limit` from `offset`.",
            responses=contract.ok(contract.VideoList, 422, reasons={422: "invalid parameters; a blank `folder`"}))
def videos(searcher: SearcherDep, folder: str | None = contract.filter_query("folder"),
           sort: Literal[contract.VIDEO_SORTS] = Query("date", description="date: newest first (by when it was "
                                                       "taken); name: by file name, A to Z (then by path)."),
           offset: int = Query(0, ge=0, le=1_000_000_000, description="How many to skip."),
           limit: int = Query(50, ge=1, le=contract.MAX_PAGE, description="How many to give.")) -> Response:
    with searcher.lock:
        searcher.catalog.refresh()
        facts = searcher.catalog.facts()
    folders = Filter.of([("folder", folder)] if folder is not None else []).folders  # as a search reads it
    keep = in_folders(facts, folders[0]) if folders else np.ones(len(facts.ids), bool)
    if sort == "date":
        order = facts.newest[keep[facts.newest]]
    else:
        names = [os.path.basename(p).lower() for p in facts.paths]
        order = np.array(sorted(np.flatnonzero(keep).tolist(), key=lambda j: (names[j], facts.paths[j])), np.int64)
    page = order[offset:offset + limit].tolist()
    counts = Counter(os.path.dirname(p) for p in facts.paths)
    return JSON({"total": int(keep.sum()), "offset": offset, "limit": limit, "sort": sort,
                 "videos": [_summary(facts.ids[j], facts.paths[j], facts.duration[j], facts.taken_at[j],
                                     facts.taken_from[j], str(facts.kinds[j])) for j in page],
                 "folders": [{"path": display_path(d), "videos": n} for d, n in sorted(counts.items())]})


@router.get("/videos/{video_id}", summary="Metadata of one indexed video",
            responses=contract.ok(contract.VideoInfo, 404, 422))
def video(searcher: SearcherDep, video_id: str = contract.VIDEO_ID) -> Response:
    rec = video_record(searcher, video_id)
    with searcher.lock:
        media = searcher.catalog.media(rec.id)
    taken_at = rec.mtime_ns / 1e9 if rec.taken_at is None else rec.taken_at  # as Catalog.facts reads it
    return JSON({**_summary(rec.id, rec.path, rec.duration, taken_at, rec.taken_from or "file",
                                 file_kind(rec.path, media.pictured)),
                 "size": rec.size, "n_frames": rec.n_frames, "sha256": rec.sha256, "model_id": rec.model_id,
                 "frames": [{"index": i, "t": float(t)} for i, t in enumerate(media.timestamps)]})


def _summary(id_: str, path: str, duration: float | None, taken_at: float, taken_from: str, kind: str) -> dict:
    """What ``GET /videos`` gives of one video (``contract.VideoSummary``)."""
    duration = None if duration is None or np.isnan(duration) else float(duration)
    return {"id": id_, **path_fields(path), "kind": kind,
            "duration": duration, "taken_at": float(taken_at), "taken_from": taken_from,
            "thumbnail": f"/videos/{id_}/thumbnail", "media": f"/videos/{id_}/media"}


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
            description="Without `size`, the one the index stores (96 px on its long side). With `size`, the frame "
                        f"made from the file at the smallest of {', '.join(map(str, SIZES))} px that is at least "
                        "`size` (the largest beyond), cached; the stored one when the file cannot be read here.",
            response_class=Response, responses={**contract.image_ok(), 404: contract.error("no such video or frame"),
                                                422: contract.error("invalid parameters")})
def thumbnail(searcher: SearcherDep, video_id: str = contract.VIDEO_ID,
              frame: int | None = Query(None, ge=0, le=1_000_000, description="Frame index."),
              size: int | None = Query(None, ge=1, le=SIZES[-1], description="Pixels on the long side wanted (the "
                                       "size shown times the screen's pixel ratio).")) -> Response:
    rec = video_record(searcher, video_id)
    index = rec.n_frames // 2 if frame is None else frame
    with searcher.lock:
        try:
            data = searcher.catalog.thumbnail(rec.id, index)
        except KeyError:
            raise HTTPException(404, f"video {rec.id} has no frame {index}") from None
        times = searcher.catalog.stored([rec.id])[rec.id].times if served_size(size) > THUMBNAIL_SIZE else None
    if times is not None and index < len(times):
        data = SHARP.get(rec.path, rec.mtime_ns, float(times[index]), served_size(size)) or data
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
