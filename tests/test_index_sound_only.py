"""A file without a picture (sound alone) in both catalogs: a video record (listed, its duration, kind "audio") with
no vector, frame or segment row; an older index's zero rows of one are dropped when it is opened."""

from __future__ import annotations

import os

import numpy as np
import pytest

from reelsearch.index import EmbeddedMedia
from reelsearch.index.embedded import EmbeddedCatalog
from reelsearch.index.embedded.repair import check_index, repair_index
from reelsearch.index.pg import PostgresCatalog
from test_index_library import DIM, FakeEmbedder, folder, open_catalog, vectors_of  # noqa: F401

SOUND = "img3.png"  # what the embedder below takes for a file of sound alone


class SoundEmbedder(FakeEmbedder):
    """FakeEmbedder, but ``sound`` files have no picture (``reelsearch.search.embed.sound_only``'s media), or, with
    ``zero_rows``, the zero rows and one placeholder frame an earlier reelsearch stored for them."""

    def __init__(self, sound=(SOUND,), zero_rows: bool = False):
        super().__init__()
        self.sound, self.zero_rows = set(sound), zero_rows

    def __call__(self, path: str) -> EmbeddedMedia:
        if os.path.basename(path) not in self.sound:
            return super().__call__(path)
        self.calls.append(os.path.basename(path))
        if self.zero_rows:
            zero = np.zeros((1, DIM), np.float32)
            return EmbeddedMedia(zero[0], zero, np.zeros(1), 7.5, None, 0.0, np.zeros(1, np.float32))
        return EmbeddedMedia(None, None, np.zeros(0), 7.5, warning="audio only")


def rows_of(lib, vid: str) -> dict[str, int]:
    """How many rows of each table name video ``vid`` (and whether its vector is NULL)."""
    out = {t: lib._db.execute(f"SELECT COUNT(*) FROM {t} WHERE video_id = ?", (int(vid),)).fetchone()[0]
           for t in ("frames", "frame_vectors", "video_segments")}
    null = lib._db.execute("SELECT vector IS NULL FROM videos WHERE id = ?", (int(vid),)).fetchone()[0]
    out["null vector"] = int(null)
    return out


def check_sound_only(lib, folder, sound=(SOUND,)) -> None:  # noqa: F811
    """``sound`` files are videos of the catalog without a row of any kind; the others are as ever."""
    audio = {lib.find(folder / "sub" / name) for name in sound}
    every = {r.id for r in lib.videos()}
    assert lib.sound_only() == audio and len(lib) == len(every) == 6
    assert set(lib.ids()) == every - audio and lib.row_count() == 6 - len(audio)
    assert lib.known(sorted(every)) == [True] * 6
    for vid in audio:
        assert rows_of(lib, vid) == {"frames": 0, "frame_vectors": 0, "video_segments": 0, "null vector": 1}
        with pytest.raises(KeyError):
            lib.rows([vid])
        stored = lib.stored([vid])[vid]
        assert not stored.pictured and stored.frame_rows.shape[0] == 0 and stored.duration == 7.5
        assert not lib.media(vid).pictured and lib.video(vid).n_frames == 0
    assert not set(lib.segments(sorted(every))) & audio and lib.segment_count() == 6 - len(audio)
    for q in np.random.default_rng(3).standard_normal((4, DIM)).astype(np.float32):
        assert not set(lib.nearest(q, 10)[0]) & audio
        assert not {k.partition(":")[0] for k in lib.nearest_segments(q, 10)[0]} & audio
    facts = lib.facts()
    assert {i: str(k) for i, k in zip(facts.ids, facts.kinds, strict=True)} == {
        i: "audio" if i in audio else "image" for i in every}
    if isinstance(lib, EmbeddedCatalog):
        assert set(lib.vectors.ids()) == every - audio
        assert {k.partition(":")[0] for k in lib.segment_vectors.ids()} == every - audio


def test_a_file_without_a_picture_has_no_rows(open_catalog, folder):  # noqa: F811
    lib = open_catalog()
    report = lib.sync([folder], SoundEmbedder(), progress=False)
    assert len(report.added) == 6 and report.warnings == [(str(folder / "sub" / SOUND), "audio only")]
    check_sound_only(lib, folder)
    lib.close()
    lib = open_catalog()  # as another process sees it (the embedded vector files saved, read back)
    check_sound_only(lib, folder)
    # another file's copy reuses what is stored of it: nothing
    (folder / "copy").mkdir()
    (folder / "copy" / "again.png").write_bytes((folder / "sub" / SOUND).read_bytes())
    report = lib.sync([folder], SoundEmbedder(), progress=False)
    again = lib.find(folder / "copy" / "again.png")
    assert report.reused == 1 and again in lib.sound_only() and rows_of(lib, again)["null vector"] == 1


def test_a_file_that_loses_or_gains_its_picture_is_written_again(open_catalog, folder):  # noqa: F811
    """A file written again without a picture leaves the vector indexes (and comes back with one)."""
    lib = open_catalog()
    lib.sync([folder], SoundEmbedder(sound=()), progress=False)
    vid = lib.find(folder / "sub" / SOUND)
    assert vid in lib.ids() and not lib.sound_only()
    target = folder / "sub" / SOUND
    target.write_bytes(target.read_bytes() + b"\0")  # a new content: embedded again, now without a picture
    lib.sync([folder], SoundEmbedder(), progress=False)
    check_sound_only(lib, folder)
    target.write_bytes(target.read_bytes() + b"\0")
    lib.sync([folder], SoundEmbedder(sound=()), progress=False)
    assert not lib.sound_only() and vid in lib.ids() and lib.segment_count() == 6
    np.testing.assert_allclose(lib.rows([vid])[0], vectors_of(target)[0], atol=1e-6)


def test_an_older_index_drops_its_zero_rows(open_catalog, folder):  # noqa: F811
    """An index written before (a file of sound alone as zero rows and one placeholder frame: schema 5 of the
    embedded catalog, migration 7 of PostgreSQL) is migrated when opened: those rows are dropped, the file stays a
    video of the catalog without a picture, the vector index follows."""
    lib = open_catalog()
    lib.sync([folder], SoundEmbedder(zero_rows=True), progress=False)
    vid = lib.find(folder / "sub" / SOUND)
    assert vid in lib.ids() and rows_of(lib, vid) == {"frames": 1, "frame_vectors": 1, "video_segments": 1,
                                                      "null vector": 0}
    if isinstance(lib, PostgresCatalog):
        with lib._db.transaction():
            lib._db.execute("DELETE FROM schema_version WHERE version >= 8")
    else:
        with lib._transaction():
            lib._set_meta("schema_version", 5)
    lib.close()
    lib = open_catalog()
    check_sound_only(lib, folder)
    lib.sync([folder], SoundEmbedder(), progress=False)  # nothing to do: its file is unchanged
    check_sound_only(lib, folder)


def test_check_and_repair_keep_a_file_without_a_picture(tmp_path, folder):  # noqa: F811
    """``index --check`` finds nothing wrong with a file of sound alone (no frames, no segments), and a repair keeps
    it as it is, and turns an older index's zero rows of one into none."""
    directory = tmp_path / "index"
    with EmbeddedCatalog(directory) as lib:
        lib.sync([folder], SoundEmbedder(), progress=False)
    assert all(not problems for problems in check_index(directory).values())
    with EmbeddedCatalog(directory) as lib:
        lib._db.execute("DELETE FROM video_segments WHERE video_id = (SELECT MIN(id) FROM videos)")  # damage
    assert any(check_index(directory).values())
    report = repair_index(directory)
    assert report.kept == 5 and report.lost == 1
    with EmbeddedCatalog(directory) as lib:
        lib.sync([folder], SoundEmbedder(), progress=False)  # the lost one indexed again
        check_sound_only(lib, folder)
    with EmbeddedCatalog(tmp_path / "old") as lib:  # zero rows, as written before
        lib.sync([folder], SoundEmbedder(zero_rows=True), progress=False)
        lib._db.execute("DELETE FROM video_segments WHERE video_id = (SELECT MIN(id) FROM videos)")
    repair_index(tmp_path / "old")
    with EmbeddedCatalog(tmp_path / "old") as lib:
        lib.sync([folder], SoundEmbedder(), progress=False)
        check_sound_only(lib, folder)
