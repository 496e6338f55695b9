"""The PostgreSQL catalog's bulk writes: a commit's rows by binary ``COPY`` (one per table and commit, not one INSERT
per row), in the commit's transaction: atomic with it, so a crash loses only the batch in flight.

Each value is encoded as PostgreSQL's binary format reads it: ``int8`` / ``int4`` (big-endian), ``float8``,
``text`` (UTF-8), ``bytea``, pgvector's ``vector`` (``vector_recv``: dimensions int16, unused int16, big-endian
float4 values); None is NULL. A row the server refuses is named by its file (``CopyError``). Also pgvector's text
form of a vector (``vector_text``) and its binary output read back (``vectors_from_send``).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence

import numpy as np

from reelsearch.index.pg.database import CopyError, Database, Vector
from reelsearch.index.sync import CatalogSync
from reelsearch.index.sync_records import MediaRows

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


def copy_rows(db: Database, table: tuple[str, str, tuple[str, ...]], rows: list[tuple], files: list[str]) -> None:
    """COPY ``rows`` (tuples in ``table``'s column order) into ``table``, in the open transaction; ``files[i]``
    names the file of ``rows[i]`` in the error of a row the server refuses (``CopyError``, its message naming it)."""
    if not rows:
        return
    name, columns, types = table
    encode = _row_encoder(tuple(types))
    try:
        db.copy(f"COPY {name} ({columns}) FROM STDIN (FORMAT BINARY)", map(encode, rows))
    except CopyError as exc:
        if exc.line is None or not 0 < exc.line <= len(files):
            raise
        raise CopyError(f"{db.location}: {files[exc.line - 1]}: its {name} row was refused: {exc.problem}",
                        exc.line, exc.problem) from None


def copy_videos(db: Database, rows: list[tuple[tuple, str]]) -> list[int]:
    """COPY new ``videos`` rows ((values of ``CatalogSync._INSERT``'s columns with the vector as float32 [D] or None,
    the file's path)) with ids taken from the table's sequence; their ids."""
    if not rows:
        return []
    ids = [r[0] for r in db.execute("SELECT nextval('videos_id_seq') FROM generate_series(1, ?)", (len(rows),))]
    copy_rows(db, VIDEOS, [(vid, *values) for vid, (values, _) in zip(ids, rows, strict=True)],
              [path for _, path in rows])
    return ids


def copy_media(db: Database, written: list[tuple[int, MediaRows | None, str]]) -> None:
    """COPY each (video id, its ``media_rows`` (None: no picture), file path)'s frames, frame vectors and segments,
    after dropping what those videos had (their frames are dropped by the commit already)."""
    if not written:
        return
    ids = [vid for vid, _, _ in written]
    db.execute("DELETE FROM frame_vectors WHERE video_id = ANY(?)", (ids,))
    db.execute("DELETE FROM video_segments WHERE video_id = ANY(?)", (ids,))
    pictured = [(rows, path) for _, rows, path in written if rows is not None]
    copy_rows(db, FRAMES, [f for rows, _ in pictured for f in rows.frames],
              [path for rows, path in pictured for _ in rows.frames])
    copy_rows(db, FRAME_VECTORS, [rows.frame_vectors for rows, _ in pictured], [path for _, path in pictured])
    copy_rows(db, SEGMENTS, [s for rows, _ in pictured for s in rows.segments],
              [path for rows, path in pictured for _ in rows.segments])


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
