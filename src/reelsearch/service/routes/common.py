"""What the routes share: the app's Searcher (a dependency) and an indexed video looked up by id."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from reelsearch.index.paths import display_path
from reelsearch.search.searcher import Searcher
from reelsearch.service import schema

_ID = re.compile(schema.ID_PATTERN)


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
            return searcher.library.video(video_id)
        except KeyError:
            raise HTTPException(404, f"no video {video_id}") from None
