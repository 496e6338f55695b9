"""What the routes share: the app's Searcher (a dependency), an indexed video looked up by id, an upload saved and
its problems told."""

from __future__ import annotations

import mimetypes
import os
import re
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from reelsearch.errors import ReelsearchError
from reelsearch.index.paths import display_path
from reelsearch.media.decode import MEDIA_EXTENSIONS
from reelsearch.search.searcher import Searcher
from reelsearch.service import contract
from reelsearch.service.contract import MAX_UPLOAD_BYTES

_ID = re.compile(contract.ID_PATTERN)


async def app_searcher(request: Request) -> Searcher:
    """The Searcher the app serves (``app.state.searcher``, set by ``create_app``)."""
    return request.app.state.searcher


#: A route parameter that receives the app's Searcher.
SearcherDep = Annotated[Searcher, Depends(app_searcher)]


def video_record(searcher: Searcher, video_id: str):
    """The index's record of video ``video_id`` (404 when there is none)."""
    if not _ID.match(video_id):
        raise HTTPException(404, f"no video {display_path(video_id, one_line=True)!r}")
    with searcher.lock:
        try:
            return searcher.catalog.video(video_id)
        except KeyError:
            raise HTTPException(404, f"no video {video_id}") from None


async def save_upload(upload) -> str:
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


def upload_problem(exc: ReelsearchError, path: str, upload) -> HTTPException:
    """The 400 of an upload the searcher cannot use (undecodable, a moment beyond its end), naming the upload, never
    the temporary file ``path`` it was saved to."""
    label = upload_label(upload)
    problem = str(exc).replace(f"{path}: ", "").replace(path, label)
    return HTTPException(400, problem if problem.startswith(label) else f"{label}: {problem}")


def upload_label(upload) -> str:
    """How an upload is named in answers: its file name on one line."""
    return display_path(upload.filename or "upload", one_line=True)
