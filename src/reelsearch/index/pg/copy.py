"""The PostgreSQL catalog's bulk writes: a commit's rows by binary ``COPY`` (one per table and commit, not one INSERT
per row), in the commit's transaction: atomic with it, so a crash loses only the batch in flight.

Each value is encoded as PostgreSQL's binary format reads it: ``int8`` / ``int4`` (big-endian), ``float8``,
``text`` (UTF-8), ``bytea``, pgvector's ``vector`` (``vector_recv``: dimensions int16, unused int16, big-endian
float4 values); None is NULL. The videos' rows are encoded one by one (``encode_row``); a batch's frames and segments,
rows of fixed-width columns, all at once as numpy records whose bytes are the tuples (``fixed_rows``), their columns
taken from the media as arrays, with the frame vectors' float16 conversion one call a batch: the client's encoding,
the load's other half beside the server's, is a few array operations a batch instead of a few Python calls a value.
A row the server refuses is named by its file (``CopyError``). Also pgvector's text form of a vector
(``vector_text``) and its binary output read back (``vectors_from_send``).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from reelsearch.index.media import EmbeddedMedia
from reelsearch.index.pg.database import CopyError, Database, Vector
from reelsearch.index.sync import CatalogSync
from reelsearch.index.sync_records import with_segments

_LENGTH, _INT8, _INT4, _FLOAT8 = struct.Struct(">i"), struct.Struct(">iq"), struct.Struct(">ii"), struct.Struct(">id")
_NULL, _DIMS = _LENGTH.pack(-1), struct.Struct(">hh")


def _int8(v) -> bytes:
    return _INT8.pack(8, v)


def _int4(v) -> bytes:
    return _INT4.pack(4, v)


def _float8(v) -> bytes:
    return _FLOAT8.pack(8, v)


def _bytea(v) -> bytes:
    v = bytes(v)
    return _LENGTH.pack(len(v)) + v


def _text(v) -> bytes:
    return _bytea(v.encode())


def vector_recv(v) -> Vector:
    """``v`` [D] in pgvector's binary form (``vector_recv``): a ``Database`` parameter of type ``vector``."""
    v = np.asarray(v, ">f4")
    return Vector(_DIMS.pack(len(v), 0) + v.tobytes())


def _vector(v) -> bytes:
    data = vector_recv(v)
    return _LENGTH.pack(len(data)) + data


#: Each column type's encoder (of a value that is not None).
ENCODERS: dict[str, Callable[[object], bytes]] = {"int8": _int8, "int4": _int4, "float8": _float8, "bytea": _bytea,
                                                  "text": _text, "vector": _vector}


@functools.cache
def _row_encoder(types: tuple[str, ...]) -> Callable[[Sequence], bytes]:
    """``encode_row`` for rows of ``types``: the encoders looked up once, not per value."""
    header, encoders = struct.pack(">h", len(types)), [ENCODERS[kind] for kind in types]

    def encode(values: Sequence) -> bytes:
        if len(values) != len(encoders):
            raise ValueError(f"{len(values)} values for {len(encoders)} columns")
        return header + b"".join([_NULL if v is None else e(v) for e, v in zip(encoders, values)])  # noqa: B905

    return encode


#: The tables a commit copies into: (table, columns, each column's type).
VIDEOS = ("videos", "id, " + CatalogSync._INSERT, ("int8", "int8", "int8", "text", "float8", "int4", "text", "float8",
                                                   "int8", "vector", "float8", "float8", "text", "bytea", "float8"))
FRAMES = ("frames", "video_id, idx, t, thumbnail", ("int8", "int4", "float8", "bytea"))
FRAME_VECTORS = ("frame_vectors", "video_id, vectors, times, detail", ("int8", "bytea", "bytea", "bytea"))
SEGMENTS = ("video_segments", "video_id, ordinal, start, stop, first_frame, n_frames, vector, bias",
            ("int8", "int4", "float8", "float8", "int4", "int4", "vector", "float8"))


def encode_row(values: Sequence, types: Sequence[str]) -> bytes:
    """One tuple of binary COPY: the number of columns, then each value's length and bytes (-1: NULL)."""
    return _row_encoder(tuple(types))(values)


#: The numpy type of each fixed-width column type's binary value (big-endian; ``vector``: ``fixed_rows``).
FIXED = {"int8": ">i8", "int4": ">i4", "float8": ">f8"}


def fixed_rows(types: Sequence[str], columns: Sequence[np.ndarray], n_columns: int | None = None) -> np.ndarray:
    """Binary COPY tuples of fixed-width ``columns`` (each n values of ``types``' ``FIXED`` or ``vector``, [n, D]; no
    NULL) as n numpy records whose bytes are the tuples, as ``encode_row`` encodes them one by one; ``n_columns``: the
    tuple's number of columns when more follow each record (default: these). ValueError for an ``int4`` out of range."""
    fields, values = [("n", ">i2")], []
    for i, (kind, column) in enumerate(zip(types, columns, strict=True)):
        column = np.asarray(column)
        if kind == "vector":
            dim = column.shape[1]
            fields += [(f"l{i}", ">i4"), (f"d{i}", ">i2"), (f"u{i}", ">i2"), (f"v{i}", ">f4", (dim,))]
            values += [(f"l{i}", 4 + 4 * dim), (f"d{i}", dim), (f"u{i}", 0), (f"v{i}", column)]
        else:
            if kind == "int4" and len(column) and not -2**31 <= int(column.min()) <= int(column.max()) < 2**31:
                raise ValueError(f"an int4 value out of range in column {i}")
            fields += [(f"l{i}", ">i4"), (f"v{i}", FIXED[kind])]
            values += [(f"l{i}", np.dtype(FIXED[kind]).itemsize), (f"v{i}", column)]
    records = np.empty(len(columns[0]) if columns else 0, np.dtype(fields))
    records["n"] = len(types) if n_columns is None else n_columns
    for name, value in values:
        records[name] = value
    return records


def copy_encoded(db: Database, table: tuple[str, str, tuple[str, ...]], encoded: Iterable[bytes],
                 files: list[str]) -> None:
    """COPY the binary tuples ``encoded`` (any split into bytes) into ``table``, in the open transaction; ``files[i]``
    names the file of row i in the error of a row the server refuses (``CopyError``, its message naming it)."""
    name, columns, _ = table
    try:
        db.copy(f"COPY {name} ({columns}) FROM STDIN (FORMAT BINARY)", encoded)
    except CopyError as exc:
        if exc.line is None or not 0 < exc.line <= len(files):
            raise
        raise CopyError(f"{db.location}: {files[exc.line - 1]}: its {name} row was refused: {exc.problem}",
                        exc.line, exc.problem) from None


def copy_rows(db: Database, table: tuple[str, str, tuple[str, ...]], rows: list[tuple], files: list[str]) -> None:
    """COPY ``rows`` (tuples in ``table``'s column order, each encoded by ``encode_row``) into ``table``, as
    ``copy_encoded``."""
    if rows:
        copy_encoded(db, table, map(_row_encoder(tuple(table[2])), rows), files)


def copy_videos(db: Database, rows: list[tuple[tuple, str]]) -> list[int]:
    """COPY new ``videos`` rows ((values of ``CatalogSync._INSERT``'s columns with the vector as float32 [D] or None,
    the file's path)) with ids taken from the table's sequence; their ids."""
    if not rows:
        return []
    ids = [r[0] for r in db.execute("SELECT nextval('videos_id_seq') FROM generate_series(1, ?)", (len(rows),))]
    copy_rows(db, VIDEOS, [(vid, *values) for vid, (values, _) in zip(ids, rows, strict=True)],
              [path for _, path in rows])
    return ids


def copy_media(db: Database, written: list[tuple[int, EmbeddedMedia, str]]) -> None:
    """COPY each (video id, its media, file path)'s frames, frame vectors and segments, the rows ``media_rows`` makes
    (none without a picture; one segment of every frame when the media has none), after dropping what those videos
    had (their frames are dropped by the commit already). The frames are encoded for the batch at once, the frame
    vectors and segments CHUNK videos at a time (``fixed_rows``; the float16 conversion one call a chunk), those in a
    thread while the server takes the frames (numpy's casts release the GIL: this thread sends meanwhile)."""
    if not written:
        return
    ids = [vid for vid, _, _ in written]
    pictured = [(vid, with_segments(media), path) for vid, media, path in written if media.pictured]
    with ThreadPoolExecutor(1, thread_name_prefix="reelsearch-copy") as pool:
        later = pool.submit(_vectors_and_segments, pictured)
        db.execute("DELETE FROM frame_vectors WHERE video_id = ANY(?)", (ids,))
        db.execute("DELETE FROM video_segments WHERE video_id = ANY(?)", (ids,))
        if not pictured:
            return
        vids = np.array([vid for vid, _, _ in pictured], np.int64)
        counts = [len(m.timestamps) for _, m, _ in pictured]
        thumbs = [th for _, m, _ in pictured for th in (m.thumbnails or [None] * len(m.timestamps))]
        frames = fixed_rows(FRAMES[2][:3], [np.repeat(vids, counts), np.concatenate([np.arange(c) for c in counts]),
                                            np.concatenate([m.timestamps for _, m, _ in pictured])], 4).tobytes()
        width = len(frames) // len(thumbs)
        copy_encoded(db, FRAMES, (p for i, th in enumerate(thumbs) for p in (
            frames[i * width:(i + 1) * width], _NULL if th is None else _LENGTH.pack(len(th)) + bytes(th))),
                     [path for (_, _, path), c in zip(pictured, counts, strict=True) for _ in range(c)])
        vectors, segments = later.result()
    copy_rows(db, FRAME_VECTORS, vectors, [path for _, _, path in pictured])
    copy_encoded(db, SEGMENTS, segments, [path for _, m, path in pictured for _ in m.segment_vectors])


#: Videos whose frame vectors and segments are encoded together (a few MiB of temporaries, reused, not mapped anew).
CHUNK = 256


def _vectors_and_segments(pictured: list[tuple[int, EmbeddedMedia, str]]) -> tuple[list[tuple], list[bytes]]:
    """The ``frame_vectors`` rows (video id, float16 [T, D] bytes, float64 [T] bytes, float32 [T] detail bytes: b""
    when not measured) and the ``video_segments`` tuples (binary COPY, a block per CHUNK videos) of ``pictured``."""
    vectors, segments = [], []
    for start in range(0, len(pictured), CHUNK):
        chunk = pictured[start:start + CHUNK]
        counts = np.array([len(m.timestamps) for _, m, _ in chunk])
        half = np.concatenate([m.frame_vectors for _, m, _ in chunk], dtype=np.float16)
        vectors += [(vid, half[end - c:end].tobytes(), np.asarray(m.timestamps, np.float64).tobytes(),
                     b"" if m.detail is None else np.asarray(m.detail, np.float32).tobytes())
                    for (vid, m, _), c, end in zip(chunk, counts, np.cumsum(counts), strict=True)]
        k = [len(m.segment_vectors) for _, m, _ in chunk]
        times, frames = (np.concatenate([np.asarray(getattr(m, part)).reshape(-1, 2) for _, m, _ in chunk])
                         for part in ("segment_times", "segment_frames"))
        segments.append(fixed_rows(SEGMENTS[2], [
            np.repeat([vid for vid, _, _ in chunk], k), np.concatenate([np.arange(n) for n in k]), times[:, 0],
            times[:, 1], frames[:, 0], frames[:, 1] - frames[:, 0],
            np.concatenate([m.segment_vectors for _, m, _ in chunk], dtype=np.float32),
            np.concatenate([m.segment_biases for _, m, _ in chunk], dtype=np.float64)]).tobytes())
    return vectors, segments


def vector_text(vector: np.ndarray) -> str:
    """``vector`` [D] as pgvector's text form, float32 values exactly (shortest round-trip decimals)."""
    return "[" + ",".join(map(repr, np.asarray(vector, np.float32).reshape(-1).tolist())) + "]"


def vectors_from_send(values: Sequence[bytes], dim: int) -> np.ndarray:
    """float32 [len(values), dim] from pgvector's binary form (``vector_send``: a 4-byte header, big-endian
    float32s): one header-sized column per row, dropped."""
    if not values:
        return np.empty((0, dim), np.float32)
    raw = np.frombuffer(b"".join(values), ">f4").reshape(len(values), dim + 1)
    return raw[:, 1:].astype(np.float32)
