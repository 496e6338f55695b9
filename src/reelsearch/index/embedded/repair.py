"""A damaged embedded catalog (an index folder), checked and repaired (``reelsearch index --check`` / ``--repair``).

``check_index`` runs SQLite's integrity check on the index's two databases (``library.sqlite``, ``textcues.sqlite``),
and checks that each video's segments cover its frames (a video whose segment rows are lost is found by nothing).
``repair_index`` keeps every video still readable and whole: it copies each video whose row, frames (thumbnails whole),
frame vectors and segments can all be read into a new ``library.sqlite`` (a video with any part unreadable is left
out, so the next sync indexes its file again), moves the damaged file aside (``library.sqlite.damaged``), and drops
the derived files (the vector files, rebuilt from the new database on open; a damaged text-cue database, whose
cues are extracted again).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from reelsearch.index.embedded.catalog import FAISS_NAME, SEGMENTS_FAISS_NAME, SQLITE_NAME
from reelsearch.index.embedded.schema import SCHEMA_SQL, SCHEMA_VERSION, SEGMENTS_SQL
from reelsearch.index.embedded.sqlite import damage, integrity_problems
from reelsearch.index.embedded.textcues import SQLITE_NAME as TEXTCUES_NAME

#: Suffix of a damaged database moved aside by a repair.
DAMAGED_SUFFIX = ".damaged"
_VIDEO_COLUMNS = ("id, path, size, mtime_ns, sha256, duration, n_frames, model_id, added_at, updated_at, gen, vector, "
                  "bias")


def check_index(directory: str | Path) -> dict[str, list[str]]:
    """{database file: what SQLite's integrity check finds wrong, or the videos whose segments do not cover their
    frames} of the index in ``directory`` ([] when sound; files that do not exist are left out)."""
    out = {}
    for name in (SQLITE_NAME, TEXTCUES_NAME):
        path = Path(directory) / name
        if path.exists():
            out[str(path)] = integrity_problems(path)
            if name == SQLITE_NAME and not out[str(path)]:
                out[str(path)] = segment_problems(path)
    return out


def segment_problems(path: Path) -> list[str]:
    """``video N: its segments cover F of its T frames`` for each video of the library database at ``path`` whose
    segments do not cover its frames exactly ([] when all do, or when the database predates segments: opening it
    makes each video one segment)."""
    db = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'video_segments'").fetchone():
            return []
        rows = db.execute("SELECT v.id, v.n_frames, COALESCE(s.covered, 0) FROM videos v LEFT JOIN (SELECT video_id, "
                          "SUM(n_frames) AS covered FROM video_segments GROUP BY video_id) s ON s.video_id = v.id "
                          "WHERE COALESCE(s.covered, 0) != v.n_frames ORDER BY v.id").fetchall()
    except sqlite3.DatabaseError as exc:
        return [damage(exc) or str(exc)]
    finally:
        db.close()
    return [f"video {vid}: its segments cover {covered} of its {frames} frames" for vid, frames, covered in rows]


@dataclass
class RepairReport:
    """What ``repair_index`` did: videos kept and lost, the damaged files moved aside (their new names)."""

    kept: int = 0
    lost: int = 0
    moved: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.moved:
            return "nothing to repair: the index is sound"
        return (f"repaired: {self.kept} videos kept, {self.lost} unreadable (indexed again from their files); "
                f"damaged files moved aside: {', '.join(self.moved)}")


def repair_index(directory: str | Path) -> RepairReport:
    """Rebuild the damaged databases of the index in ``directory`` from what is still readable (see the module)."""
    directory = Path(directory)
    report = RepairReport()
    problems = check_index(directory)
    library = directory / SQLITE_NAME
    if problems.get(str(library)):
        fresh = directory / (SQLITE_NAME + ".repairing")
        _remove(fresh)
        report.kept, report.lost = _salvage(library, fresh)
        report.moved.append(_move_aside(library))
        os.replace(fresh, library)
        _remove(directory / FAISS_NAME)  # derived: rebuilt from the new database
        _remove(directory / SEGMENTS_FAISS_NAME)
    cues = directory / TEXTCUES_NAME
    if problems.get(str(cues)):
        report.moved.append(_move_aside(cues))
    return report


def _salvage(damaged: Path, fresh: Path) -> tuple[int, int]:
    """Copy every fully readable video of ``damaged`` into a new index database at ``fresh``: (kept, lost)."""
    out = sqlite3.connect(fresh, isolation_level=None)
    try:
        out.executescript(SCHEMA_SQL + SEGMENTS_SQL)
        try:
            src = sqlite3.connect(f"file:{damaged.resolve()}?mode=ro", uri=True)
        except sqlite3.Error:
            return 0, 0
        try:
            ids = _readable_ids(src)
            kept = lost = 0
            dim = model = None
            out.execute("BEGIN")
            for vid in ids:
                try:
                    row = src.execute(f"SELECT {_VIDEO_COLUMNS} FROM videos WHERE id = ?", (vid,)).fetchone()
                    frames = src.execute("SELECT video_id, idx, t, thumbnail FROM frames WHERE video_id = ?",
                                         (vid,)).fetchall()
                    vectors = src.execute("SELECT video_id, vectors, times FROM frame_vectors WHERE video_id = ?",
                                          (vid,)).fetchone()
                    segments = src.execute("SELECT video_id, ordinal, start, stop, first_frame, n_frames, vector, "
                                           "bias FROM video_segments WHERE video_id = ?", (vid,)).fetchall()
                except sqlite3.DatabaseError:
                    lost += 1
                    continue
                if row is not None and row[11] is not None and row[6] == 1 and not any(bytes(row[11])):
                    # an earlier schema's file of sound alone (zero rows, one placeholder frame): without them
                    row, frames, vectors, segments = (*row[:6], 0, *row[7:11], None, 0.0), [], None, []
                # a video is kept whole or not at all: its segments must cover its frames (none without a picture)
                pictured = row is not None and row[11] is not None
                if (row is None or (vectors is None) == pictured or len(frames) != row[6]
                        or sum(s[5] for s in segments) != row[6] or not all(_whole_image(f[3]) for f in frames)):
                    lost += 1
                    continue
                out.execute(f"INSERT INTO videos ({_VIDEO_COLUMNS}) VALUES ({', '.join('?' * 13)})",
                            (*row[:10], 1, *row[11:]))
                out.executemany("INSERT INTO frames VALUES (?, ?, ?, ?)", frames)
                if pictured:  # detail NULL: measured again from the thumbnails by the sync that follows the repair
                    out.execute("INSERT INTO frame_vectors (video_id, vectors, times) VALUES (?, ?, ?)", vectors)
                    dim = len(row[11]) // 4
                out.executemany("INSERT INTO video_segments VALUES (?, ?, ?, ?, ?, ?, ?, ?)", segments)
                model = row[7]
                kept += 1
            meta = {"schema_version": SCHEMA_VERSION, "gen": 1}
            if dim is not None:
                meta |= {"dim": dim}
            if model is not None:
                meta |= {"model_id": model}
            out.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                            [(k, str(v)) for k, v in meta.items()])
            out.execute("COMMIT")
            return kept, lost
        finally:
            src.close()
    finally:
        out.close()


def _whole_image(blob: bytes | None) -> bool:
    """Whether a stored thumbnail ends as its format says (JPEG's end-of-image marker, PNG's IEND chunk): SQLite keeps
    no checksum, so a thumbnail's lost last page reads back as garbage without an error; this finds it."""
    if blob is None:
        return True
    blob = bytes(blob)
    if blob.startswith(b"\xff\xd8"):
        return blob.endswith(b"\xff\xd9")
    if blob.startswith(b"\x89PNG"):
        return blob.endswith(b"IEND\xaeB`\x82")
    return False


def _readable_ids(src: sqlite3.Connection) -> list[int]:
    """Ids of the videos whose rows can be found: a scan up to the first unreadable page, then a lookup of every
    other id up to the largest one known (a lookup by key reaches rows past a damaged page)."""
    seen: set[int] = set()
    with contextlib.suppress(sqlite3.DatabaseError):
        for (vid,) in src.execute("SELECT id FROM videos"):
            seen.add(int(vid))
    top = max(seen, default=0)
    for sql in ("SELECT seq FROM sqlite_sequence WHERE name = 'videos'", "SELECT MAX(id) FROM videos"):
        with contextlib.suppress(sqlite3.DatabaseError, TypeError):
            top = max(top, int(src.execute(sql).fetchone()[0]))
    for vid in range(1, top + 1):
        if vid not in seen:
            with contextlib.suppress(sqlite3.DatabaseError):
                if src.execute("SELECT 1 FROM videos WHERE id = ?", (vid,)).fetchone():
                    seen.add(vid)
    return sorted(seen)


def _move_aside(path: Path) -> str:
    target = path.with_name(path.name + DAMAGED_SUFFIX)
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        _remove(path.with_name(path.name + suffix))
    return str(target)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
