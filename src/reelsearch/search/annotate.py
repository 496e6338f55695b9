"""Video -> text: captions checked (each a query: ``request.check_query``), read from a file, and ranked for an
embedded video by the model's own similarity (``Searcher.annotate``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError, DataFormatError, QueryError
from reelsearch.index.media import EmbeddedMedia
from reelsearch.io import numbered_lines, read_text
from reelsearch.models.embeddings import VideoEmbeddings
from reelsearch.search.request import MAX_QUERY_CHARS, check_query


def check_captions(captions: Sequence[str]) -> list[str]:
    """The captions to rank (stripped, empty ones dropped; each a query: ``check_query``); a clear error for one
    string or none."""
    if isinstance(captions, str):
        raise ConfigError("captions must be a list of sentences, not one string")
    out = [c.strip() for c in captions if isinstance(c, str) and c.strip()]
    if not out:
        raise QueryError("no captions given (empty lines are ignored)")
    for c in out:
        check_query(c)
    return out


def read_captions(path: str | Path) -> list[str]:
    """Captions from a text file, one per line (blank lines skipped)."""
    path = Path(path)
    captions = []
    for n, line in numbered_lines(read_text(path)):
        line = line.strip()
        if len(line) > MAX_QUERY_CHARS:
            raise DataFormatError(path, f"caption longer than {MAX_QUERY_CHARS} characters", n)
        captions.append(line)
    if not captions:
        raise DataFormatError(path, "no captions (one per line expected)")
    return captions


def with_picture(media: EmbeddedMedia, label: str) -> EmbeddedMedia:
    """``media``, or a QueryError naming ``label`` when it has no picture (a file of sound alone: no rows)."""
    if not media.pictured:
        raise QueryError(f"{label}: has no picture (sound alone): no caption can be ranked for it")
    return media


def rank_captions(model, captions: list[str], queries: np.ndarray, media: EmbeddedMedia) -> list[dict]:
    """``captions`` (``queries``: their embeddings) ranked for ``media`` by ``model``'s own similarity (a mixture
    fuses per caption) less each caption's querybank offset, best first: [{"caption", "score"}]."""
    video = VideoEmbeddings(np.asarray(media.video_vector, np.float32)[None], [media.frame_vectors])
    scores = model.score(queries, video, axis=0)
    bank = getattr(model, "querybank", None)
    offsets = bank.caption_offsets(model.ann_query(queries)) if bank is not None else 0.0
    column = np.asarray(scores, np.float64)[:, 0] - offsets
    order = sorted(range(len(captions)), key=lambda i: (-column[i], i))
    return [{"caption": captions[i], "score": float(column[i])} for i in order]
