"""The embedded catalog's exact rows read back from SQLite for its product-quantised vector indexes: the float32
[row, bias] of videos and segments that a re-rank scores again, and the sample a full build trains the codes on."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from reelsearch.index.embedded.vectors import READ_ROWS, FaissIndex

RowsOf = Callable[[Sequence[str]], dict[str, np.ndarray]]


def video_rows(db, ids: Sequence[str]) -> dict[str, np.ndarray]:
    """{id: [row, bias] float32} of the videos ``ids`` with a row in the SQLite database ``db``."""
    out = {}
    for start in range(0, len(ids), READ_ROWS):
        keys = [int(i) for i in ids[start:start + READ_ROWS]]
        found = db.execute(f"SELECT id, vector, bias FROM videos WHERE id IN ({','.join('?' * len(keys))}) AND "
                           "vector IS NOT NULL", keys).fetchall()
        out.update(_rows([str(r[0]) for r in found], found))
    return out


def segment_rows(db, ids: Sequence[str]) -> dict[str, np.ndarray]:
    """``video_rows`` of segments (ids "VIDEO:ORDINAL"): one primary-key lookup each (a row-value ``IN`` would scan
    the table; CROSS JOIN keeps the asked-for pairs the outer loop)."""
    out = {}
    for start in range(0, len(ids), READ_ROWS // 2):
        keys = [int(k) for i in ids[start:start + READ_ROWS // 2] for k in i.split(":")]
        pairs = ",".join(["(?, ?)"] * (len(keys) // 2))
        found = db.execute(f"SELECT s.video_id, s.ordinal, s.vector, s.bias FROM (VALUES {pairs}) AS w CROSS JOIN "
                           "video_segments s ON s.video_id = w.column1 AND s.ordinal = w.column2", keys).fetchall()
        out.update(_rows([f"{r[0]}:{r[1]}" for r in found], found))
    return out


def _rows(ids: list[str], found: list[tuple]) -> dict[str, np.ndarray]:
    """{id: [row, bias] float32} of rows read (``found``: each ending with its float32 vector's bytes and its bias)
    with their ``ids``: one matrix filled by one copy of the rows' joined bytes, each id's row a view of it (one
    ``np.append`` per row cost about half of a re-rank's read; a copy per row, twice this)."""
    if not found:
        return {}
    dim = len(found[0][-2]) // 4
    rows = np.empty((len(found), dim + 1), np.float32)
    rows[:, :dim] = np.frombuffer(b"".join([r[-2] for r in found]), np.float32).reshape(len(found), dim)
    rows[:, dim] = [r[-1] for r in found]
    return dict(zip(ids, rows, strict=True))


def train_for(db, index, ids_sql: str, rows_of: RowsOf) -> None:
    """Train an empty ``index`` (a :class:`FaissIndex`; others are left alone) for the rows of ``ids_sql`` on a
    random sample of them, read by ``rows_of``."""
    if len(index) or not isinstance(index, FaissIndex):
        return
    ids = [str(r[0]) for r in db.execute(ids_sql)]

    def sample(n: int) -> np.ndarray:
        pick = np.random.default_rng(0).choice(len(ids), n, replace=False)
        found = rows_of(sorted(ids[i] for i in pick))
        return np.stack(list(found.values())) if found else np.empty((0, index.dim), np.float32)

    index.train_for(len(ids), sample)
