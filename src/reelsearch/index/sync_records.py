"""What a catalog's sync plans, writes and reports, as plain records (``reelsearch.index.sync`` does the work): the
outcome of a sync (``SyncReport``), a stored video as sync compares it (``StoredFile``), a file to hash
(``FileToSync``), what a commit writes of one file (``FileChange``) and of one video's picture (``MediaRows``,
``media_rows``), and the plan (``SyncPlan``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from reelsearch.index.media import EmbeddedMedia
from reelsearch.index.textcue_records import CueReport


@dataclass
class SyncReport:
    """Outcome of :meth:`CatalogSync.sync`: paths per fate; ``failed`` holds (path, problem) pairs."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): files in the folders that are not media
    reused: int = 0  # added/updated files whose embeddings were copied from an identical file already indexed
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (path, line): indexed, but not all of it
    cues: CueReport | None = None  # the text-cue stage after the sync (``reelsearch.search.cue_indexing``)
    cues_off: dict[str, str] = field(default_factory=dict)  # cue -> why it did not run

    def summary(self) -> str:
        out = (f"{len(self.added)} added, {len(self.updated)} updated, {len(self.removed)} removed, "
               f"{len(self.unchanged)} unchanged, {len(self.failed)} failed")
        if self.warnings:
            out += f", {len(self.warnings)} indexed in part"
        if self.skipped:
            out += f", {len(self.skipped)} skipped"
        if self.cues is not None:
            out += f"; speech/text: {self.cues.summary()}"
        return out


class StoredFile(NamedTuple):
    """A video row as sync compares it with a file on disk."""

    path: bytes  # absolute path as stored, file-system bytes
    id: int
    size: int
    mtime_ns: int
    sha256: str


class FileToSync(NamedTuple):
    """A file sync hashes: new, or its size or mtime changed; ``stored`` its row (None: new, or a model change)."""

    path: str
    stat: os.stat_result
    stored: StoredFile | None


class FileChange(NamedTuple):
    """What a commit writes for one file: its content hash and new embeddings, or with ``media`` None only its new
    size and mtime (same content)."""

    file: FileToSync
    sha256: str
    media: EmbeddedMedia | None = None
    taken: tuple[float, str] | None = None  # (taken_at, taken_from) known already (a copy); None: read from the file


class SyncPlan(NamedTuple):
    """What a sync has to do: ``todo`` files to hash, ``gone`` stored videos of its scope whose file vanished, every
    ``stored`` video of its scope, and whether the model changed (everything is embedded again; ``again``: the
    files that were indexed under the old model, reported as updated, not added)."""

    todo: list[FileToSync]
    gone: list[StoredFile]
    stored: list[StoredFile]
    model_changed: bool
    again: frozenset[str] = frozenset()


class MediaRows(NamedTuple):
    """What a commit writes of one video's picture: ``frames`` rows (video_id, idx, t, thumbnail), its
    ``frame_vectors`` row (video_id, float16 [T, D] bytes, float64 [T] bytes, float32 [T] detail bytes: b"" when not
    measured) and ``segments`` rows (video_id, ordinal, start, stop, first_frame, n_frames, float32 [D], bias)."""

    frames: list[tuple]
    frame_vectors: tuple
    segments: list[tuple]


def with_segments(media: EmbeddedMedia) -> EmbeddedMedia:
    """``media`` (with a picture) with its segments: one segment of every frame when it has none
    (``EmbeddedMedia.checked``)."""
    return media if media.segment_vectors is not None else media.checked(len(media.video_vector))


def media_rows(vid: int, media: EmbeddedMedia) -> MediaRows | None:
    """The rows of video ``vid``'s frames, frame vectors and segments (one segment of every frame when ``media`` has
    none: ``EmbeddedMedia.checked``); None without a picture."""
    if not media.pictured:
        return None
    media = with_segments(media)
    thumbs = media.thumbnails or [None] * len(media.timestamps)
    frames = [(vid, i, float(t), th) for i, (t, th) in enumerate(zip(media.timestamps, thumbs, strict=True))]
    detail = b"" if media.detail is None else np.asarray(media.detail, np.float32).tobytes()
    vectors = (vid, np.asarray(media.frame_vectors).astype(np.float16).tobytes(),
               np.asarray(media.timestamps, np.float64).tobytes(), detail)
    segments = [(vid, s, float(t[0]), float(t[1]), int(f[0]), int(f[1] - f[0]), np.asarray(v, np.float32), float(b))
                for s, (v, f, t, b) in enumerate(zip(media.segment_vectors, media.segment_frames, media.segment_times,
                                                     media.segment_biases, strict=True))]
    return MediaRows(frames, vectors, segments)
