"""Multiple-choice builder: the distractor rule, seeded reproducibility, file round trip, too-small pools."""

from __future__ import annotations

import time

import pytest

from conftest import shared_path

pytest.importorskip("spacy")

from reelsearch.datasets import load_dataset  # noqa: E402
from reelsearch.datasets.item import Item  # noqa: E402
from reelsearch.errors import DataFormatError  # noqa: E402
from reelsearch.mc import ActivityTagger, Question, build_questions, read_mc_file, write_mc_file  # noqa: E402
from reelsearch.mc.build import format_stamp, item_stamps  # noqa: E402


@pytest.fixture(scope="module")
def tagger():
    return ActivityTagger()  # shared: each caption is parsed once for the whole module


def items_of(captions: dict[str, list[str]], split: str = "test") -> list[Item]:
    return [Item(k, None, list(v), split) for k, v in captions.items()]


SMALL = {
    "v1": ["a man is playing a guitar", "a person plays the guitar"],
    "v2": ["a dog catches a frisbee"],
    "v3": ["a woman slices an onion"],
    "v4": ["a boy rides a bicycle"],
    "v5": ["a girl swims in a pool"],
    "v6": ["a chef cooks pasta"],
    "v7": ["a man plays the piano"],  # shares "play" with v1
    "v8": ["two men are playing football"],  # shares "play"
}


def check_rule(questions, items, tagger):
    """Every distractor: no shared activity word with the answer, not a caption of the same item, distinct."""
    caps = {it.id: it.captions for it in items}
    pool = {c for it in items for c in it.captions}
    for q in questions:
        truth = tagger.tag(q.correct)
        assert q.correct in caps[q.id]
        distractors = [c for i, c in enumerate(q.candidates) if i != q.answer]
        assert len(set(distractors)) == 4 and set(distractors) <= pool
        for d in distractors:
            assert d not in caps[q.id], (q.id, d)
            assert not (tagger.tag(d).words & truth.words), (q.id, q.correct, d)
            if truth.fallback:
                assert not (tagger.tag(d).content & truth.content), (q.id, q.correct, d)


def test_small_build_follows_the_rule(tagger):
    items = items_of(SMALL)
    res = build_questions(items, tagger, seed=1, progress=False)
    assert [q.id for q in res.questions] == list(SMALL) and not res.too_small
    check_rule(res.questions, items, tagger)
    q1 = res.questions[0]
    assert not {"a man plays the piano", "two men are playing football"} & set(q1.candidates)


def test_seeded_reproducibility(tagger):
    items = items_of(SMALL)
    a = build_questions(items, tagger, seed=7, progress=False).questions
    b = build_questions(items, tagger, seed=7, progress=False).questions
    assert a == b
    others = [build_questions(items, tagger, seed=s, progress=False).questions for s in (8, 9, 10)]
    assert any(o != a for o in others)
    # an item's question does not depend on the items before it
    c = build_questions(items[::-1], tagger, seed=7, progress=False).questions
    assert sorted(c, key=lambda q: q.id) == sorted(a, key=lambda q: q.id)


def test_too_small_pool_is_reported_not_dropped_silently(tagger):
    caps = {
        "a": ["a man is playing a guitar"],
        "b": ["a boy plays football"],  # shares "play": ineligible for a
        "c": ["a dog catches a frisbee"],
        "d": ["a woman slices an onion"],
        "e": ["a chef cooks pasta"],
    }
    res = build_questions(items_of(caps), tagger, seed=0, progress=False)
    assert dict(res.too_small) == {"a": 3, "b": 3}
    assert sorted(q.id for q in res.questions) == ["c", "d", "e"]
    assert res.summary()["too_small"] == 2
    empty = build_questions([*items_of(caps), Item("z", None, [], "test")], tagger, progress=False)
    assert empty.no_captions == ["z"]


def test_caption_without_phrase_uses_content_words(tagger):
    caps = {
        "np": ["a man in an orange hat"],  # no predicate: words man, orange, hat
        "x1": ["a man runs down the street"],  # activity words {run, street}, but content words hold "man"
        "x2": ["a dog catches a frisbee"],
        "x3": ["a woman slices an onion"],
        "x4": ["a chef cooks pasta"],
        "x5": ["a girl swims in a pool"],
    }
    res = build_questions(items_of(caps), tagger, seed=0, progress=False)
    q = next(q for q in res.questions if q.id == "np")
    assert "a man runs down the street" not in q.candidates and res.answers_fallback == 1


def test_file_round_trip_and_layout(tmp_path, tagger):
    items = items_of(SMALL)
    res = build_questions(items, tagger, seed=3, progress=False)
    path = tmp_path / "mc.csv"
    assert write_mc_file(path, res.questions) == len(SMALL)
    assert read_mc_file(path) == res.questions
    first = path.read_text(encoding="utf-8").splitlines()[0].split("\t")
    q = res.questions[0]
    # LSMDC16_multiple_choice_test_randomized.csv: clip, 4 time stamps, 5 sentences, answer index 1-5
    assert len(first) == 11 and first[0] == q.id and first[1:5] == ["", "", "", ""]
    assert first[5:10] == list(q.candidates) and first[10] == str(q.answer + 1)
    assert not list(tmp_path.glob(".mc.csv.*"))  # the atomic write left no temporary file


def test_reads_lsmdc_layouts(tmp_path):
    clip = "0001_American_Beauty_00.00.51.926-00.00.54.557"
    stamps = "00.00.51.926\t00.00.54.557\t00.00.51.926\t00.00.54.557"
    sents = "\t".join(f"sentence {i}." for i in range(1, 6))
    path = tmp_path / "lsmdc.csv"
    path.write_text(f"{clip}\t{stamps}\t{sents}\t3\n{clip}x\t{stamps}\t{sents}\n", encoding="utf-8")
    a, b = read_mc_file(path)
    assert a.answer == 2 and a.correct == "sentence 3." and a.stamps[0] == "00.00.51.926"
    assert b.answer == 0 and b.id == clip + "x"  # train/valid layout: the correct sentence comes first
    path.write_text(f"{clip}\t{stamps}\t{sents}\t6\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"lsmdc.csv:1: .*answer index"):
        read_mc_file(path)
    path.write_text(f"{clip}\t{sents}\t1\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"lsmdc.csv:1: expected 11"):
        read_mc_file(path)


def test_lsmdc_time_stamps_are_written_back():
    assert format_stamp(3 * 3600 + 2 * 60 + 27.034) == "03.02.27.034" and format_stamp(None) == ""
    it = Item("c", None, ["x"], "test", meta={"aligned": (51.926, 54.557), "extracted": (51.0, 55.5)})
    assert item_stamps(it) == ("00.00.51.926", "00.00.54.557", "00.00.51.000", "00.00.55.500")


def test_question_checks_its_shape():
    with pytest.raises(ValueError):
        Question("x", ("a", "b"), 0)
    with pytest.raises(ValueError):
        Question("x", ("a", "b", "c", "d", "e"), 5)


def test_whole_flickr8k_dev_build(tmp_path, tagger):
    """Over the whole real dev split: no distractor shares an activity word with its answer."""
    root = shared_path("flickr8k")
    items = load_dataset("flickr8k", root).items("dev")
    start = time.process_time()  # CPU time: wall time on a shared 2-core machine says little
    res = build_questions(items, tagger, seed=0, progress=False)
    elapsed = time.process_time() - start
    assert len(res.questions) + len(res.too_small) == len(items) == 1000
    assert not res.too_small
    check_rule(res.questions, items, tagger)
    path = tmp_path / "dev.csv"
    write_mc_file(path, res.questions)
    assert read_mc_file(path) == res.questions
    answers = [q.answer for q in res.questions]
    assert all(answers.count(i) > 150 for i in range(5))  # answer positions drawn uniformly
    assert elapsed < 30, f"building the Flickr8k dev test took {elapsed:.1f} s of CPU"
