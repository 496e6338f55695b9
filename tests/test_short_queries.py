"""Short queries as people type them: the rule-based extractor over captions, which photos a short query is right
for, the query lengths a confidence curve is chosen by, and a model's calibration of lengths and negative terms
(saved, loaded, and read from an older one-curve file), and how common a query is in the training captions (version
6)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from conftest import shared_path
from reelsearch.errors import DataFormatError
from reelsearch.evaluation.short_queries import relevance, short_queries
from reelsearch.features.caches import DatasetSource
from reelsearch.models import load_model
from reelsearch.models.calibration import Calibration
from reelsearch.scoring.calibration import NO_GOOD_MATCH, Curve, banked, query_length
from reelsearch.scoring.commonness import Commonness
from reelsearch.training.calibrate import fit_length


@pytest.mark.parametrize(("caption", "queries"), [
    ("A black dog is running through the grass .", ["dog", "a black dog", "a black dog running",
                                                   "dog running through the grass"]),
    ("Two children playing in the water", ["children", "two children", "two children playing",
                                            "children playing in the water"]),
    ("A little tan dog jumps over a log .", ["dog", "a tan dog", "dog jumps over a log"]),
    ("A group of people are standing outside .", ["people", "a group of people", "a group of people standing"]),
    ("Dogs run .", ["dogs"]),
    # "in front of": the object goes on with "of", so what the head does is not given
    ("A group of people standing in front of a building",
     ["people", "a group of people", "a group of people standing"]),
    ("A man wearing a red hat", ["man", "a man", "man wearing a hat"]),  # a verb of STOPS: only in what the head does
    ("A black and white dog", []),  # the phrase ends on a colour: no noun head
    ("In the park , a boy", []),  # starts with a preposition: no subject phrase
])
def test_short_queries_of_a_caption(caption, queries):
    assert short_queries(caption) == queries


def test_a_short_query_is_right_for_every_photo_a_caption_of_which_holds_its_words():
    captions = ["A dog runs .", "Two dogs play in the snow .", "A man sits .", "A man walks his dog .",
                "Children play in the water ."]
    cap2vid = [0, 1, 2, 3, 4]
    got = relevance(["a dog", "dogs", "a man", "two children playing", "water"], captions, cap2vid, 5)
    np.testing.assert_array_equal(got, [[1, 1, 0, 1, 0],  # "dogs" counts as "dog"
                                        [1, 1, 0, 1, 0],
                                        [0, 0, 1, 1, 0],
                                        [0, 0, 0, 0, 0],  # "playing" is not "play": every word must be there
                                        [0, 0, 0, 0, 1]])


@pytest.mark.parametrize(("text", "length"), [("dog", "1"), ("a dog", "2-3"), ("two children playing", "2-3"),
                                              ("a dog runs fast", "4-6"), ("a dog runs on green grass", "4-6"),
                                              ("a dog runs fast on the green grass", "7+"), ("", "1"), ("dog!", "1")])
def test_query_length(text, length):
    assert query_length(text) == length


def test_calibration_curve_per_length_and_terms_round_trip(tmp_path):
    model = load_model("default")
    cal = model.calibration
    assert set(cal.lengths) == {"1", "2-3", "4-6"} and set(cal.terms) == {"1", "2-3"}
    probe = np.linspace(-0.5, 0.1, 61)
    # a short query's curve is its own: at a score where a sentence's hits are rarely right, a word's often are
    assert not np.allclose(cal(probe, "1"), cal(probe, "7+"))
    np.testing.assert_array_equal(cal(probe), cal(probe, "7+"))
    for n in ("4-6", "7+"):  # the longest shorter curve
        np.testing.assert_array_equal(cal.shows(probe, n), cal.shows(probe, "2-3"))
    # 1-6 words: curves of the model's own score, as they rank (no querybank offset, which is about 0.6); captions
    # less it; a "no good match" threshold each
    assert [cal.less_offsets(n) for n in ("1", "2-3", "4-6", "7+")] == [False, False, False, True]
    assert all(0 < cal.threshold(n) < 0.05 for n in ("1", "2-3", "4-6", "7+"))
    assert np.median(cal.lengths["4-6"].score) > np.median(cal.curve.score) + 0.3
    saved = load_model(model.save(tmp_path / "copy")).calibration
    for n in ("1", "2-3", "4-6", "7+"):
        np.testing.assert_array_equal(saved(probe, n), cal(probe, n))
        assert saved.threshold(n) == cal.threshold(n) and saved.less_offsets(n) == cal.less_offsets(n)
        np.testing.assert_array_equal(saved.shows(probe, n), cal.shows(probe, n))


def test_a_version_2_calibration_loads_with_a_warning_to_recalibrate(tmp_path, caplog):
    """Version 2's term curves read the score less the querybank's offsets, which a search no longer subtracts for
    1-3 words: it still loads, with its curves, and says to rerun `reelsearch calibrate`; version 6 says nothing."""
    folder = load_model("default").save(tmp_path / "copy")
    doc = json.loads((folder / "calibration.json").read_text())
    assert doc["version"] == 6
    with caplog.at_level("WARNING", logger="reelsearch.models.parts"):
        load_model(folder)
    assert not caplog.records
    (folder / "calibration.json").write_text(json.dumps({**doc, "version": 2}))
    with caplog.at_level("WARNING", logger="reelsearch.models.parts"):
        cal = load_model(folder).calibration
    assert set(cal.terms) == {"1", "2-3"}
    assert any("rerun `reelsearch calibrate`" in r.getMessage() and "calibration.json" in r.getMessage()
               for r in caplog.records)


def test_only_queries_of_seven_words_or_more_rank_with_the_querybank():
    assert [banked(query_length(q)) for q in ("dog", "a black dog", "dog running on grass", "",
                                              "a black dog running on the grass")] == [False, False, False, False, True]


def test_a_version_4_calibration_keeps_its_scores_and_threshold(tmp_path):
    """Version 4's curves (of the top 10) read 1-3 words' and captions' scores less the offsets, 4-6 words' the own
    score, and say "no good match" below NO_GOOD_MATCH for every length, as they did."""
    folder = load_model("default").save(tmp_path / "copy")
    doc = json.loads((folder / "calibration.json").read_text())
    old = {k: v for k, v in doc.items() if k not in ("no_good_match", "own_score")} | {"version": 4}
    (folder / "calibration.json").write_text(json.dumps(old))
    cal = load_model(folder).calibration
    assert [cal.less_offsets(n) for n in ("1", "2-3", "4-6", "7+")] == [True, True, False, True]
    assert all(cal.threshold(n) == NO_GOOD_MATCH for n in ("1", "2-3", "4-6", "7+"))
    (folder / "calibration.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "own_score"}))
    with pytest.raises(DataFormatError, match="calibration.json.*own_score"):
        load_model(folder)


def test_a_version_3_calibration_reads_its_captions_curve_less_the_offsets_for_four_to_six_words(tmp_path):
    """Version 3 had no 4-6-word curve: such queries read the captions' curve, of the score less the offsets."""
    folder = load_model("default").save(tmp_path / "copy")
    doc = json.loads((folder / "calibration.json").read_text())
    lengths = {n: c for n, c in doc["lengths"].items() if n != "4-6"}
    (folder / "calibration.json").write_text(json.dumps({**doc, "version": 3, "lengths": lengths}))
    cal = load_model(folder).calibration
    probe = np.linspace(-0.5, 0.1, 61)
    np.testing.assert_array_equal(cal(probe, "4-6"), cal(probe))
    assert cal.less_offsets("4-6") and cal.less_offsets("1")


def test_a_calibration_of_one_curve_still_loads_and_reads_it_for_every_length(tmp_path):
    folder = load_model("default").save(tmp_path / "copy")
    doc = json.loads((folder / "calibration.json").read_text())
    old = {k: v for k, v in doc.items() if k not in ("lengths", "terms")} | {"version": 1}
    (folder / "calibration.json").write_text(json.dumps(old))
    cal = load_model(folder).calibration
    probe = np.linspace(-0.5, 0.1, 61)
    np.testing.assert_array_equal(cal(probe, "1"), Curve(doc["score"], doc["right"])(probe))
    assert cal.shows(probe, "1") is None  # no negative-term curve: negative terms are words only
    (folder / "calibration.json").write_text(json.dumps({**doc, "lengths": {"5": doc["lengths"]["1"]}}))
    with pytest.raises(DataFormatError, match="unknown query lengths"):
        load_model(folder)


def test_calibration_refuses_an_unknown_length():
    with pytest.raises(ValueError, match="unknown query lengths"):
        Calibration(Curve([0.0], [0.5]), "x", None, lengths={"7": Curve([0.0], [0.5])})


def _brute_count(query: str, videos: list[list[str]]) -> int:
    """The training videos a caption of which holds every word of ``query`` but the articles, a plural (-s, -es, on
    a word of four letters or more) counting as the word: word by word over every caption, no table."""
    def bare(word):
        return word[:-2] if word.endswith("es") and len(word) > 4 else word[:-1] if word.endswith("s") and \
            len(word) > 3 else word

    need = {bare(w) for w in re.findall("[a-z]+", query.lower())} - {"a", "an", "the"}
    return sum(any(need <= {bare(w) for w in re.findall("[a-z]+", c.lower())} for c in captions)
               for captions in videos)


def test_commonness_counts_the_training_videos_a_caption_of_which_holds_the_query():
    """The bundled calibration's commonness table (version 6) is Flickr8k train's: each query's count of training
    photos checked against a count over the captions themselves; a query no caption holds counts 0 (an unknown word
    too), one without a content word has none; its log share is (count + 0.5) / (photos + 1)."""
    cal = load_model("default").calibration
    source, _ = DatasetSource.open(f"flickr8k:{shared_path('flickr8k')}")
    videos = [item.captions for item in source.dataset.items("train")]
    assert cal.commonness.videos == len(videos) == 6000
    for query in ("a dog", "dogs", "a black dog", "two children playing", "trampoline", "dog running through the grass",
                  "a spaceship landing on mars", "stock market chart", "The Dog!"):
        assert cal.commonness.count(query) == _brute_count(query, videos), query
    assert cal.commonness.count("a dog") > 1000 and cal.commonness.count("trampoline") < 60
    assert cal.commonness.count("a spaceship landing on mars") == 0 and cal.commonness.count("the") is None
    assert cal.commonness.log_share("a dog") == pytest.approx(math.log((cal.commonness.count("a dog") + 0.5) / 6001))
    assert Commonness.of([["A dog runs.", "Two dogs"], ["a cat"], ["dog and cat"]]).count("a dog") == 2


def test_a_commonness_curve_reads_the_length_curve_and_the_query_as_its_weights_say():
    """A version-6 confidence, by hand from the saved weights: z = a(l) + max(b(l), 0) g (g the log-odds of the
    length curve, l clamped to the fitted span), then the correction curve; non-decreasing in the score at every
    commonness, higher for a common query than a rare one at a score where a hit is likely, the length's curve for a
    query without a content word."""
    cal = load_model("default").calibration
    assert set(cal.common) == {"1", "2-3", "4-6"}
    probe = np.linspace(-0.4, 0.6, 101)
    for n, common in cal.common.items():
        w, (lo, hi) = common.weights.tolist(), common.span
        for share in (lo - 1, lo, -4.0, -1.4, hi, 0.0):
            c = min(max(share, lo), hi)
            want = []
            for x in probe:
                p = min(max(float(np.interp(x, cal.lengths[n].score, cal.lengths[n].right)), 1e-4), 1 - 1e-4)
                z = w[0] + w[2] * c + w[4] * c * c + max(w[1] + w[3] * c + w[5] * c * c, 0) * math.log(p / (1 - p))
                want.append(float(np.interp(z, common.correction.score, common.correction.right)))
            got = cal.read(probe, n, share)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
            assert np.all(np.diff(got) >= -1e-12), (n, share)
        np.testing.assert_array_equal(cal.read(probe, n), cal.lengths[n](probe))  # no commonness: the length curve
        np.testing.assert_array_equal(cal(probe, n, "the"), cal.lengths[n](probe))
        np.testing.assert_array_equal(cal(probe, n), cal.lengths[n](probe))  # no text: the length curve
    assert cal(0.25, "2-3", "a dog") > 4 * cal(0.25, "2-3", "a trampoline")
    np.testing.assert_array_equal(cal(probe, "7+", "a dog runs on the green grass"), cal.curve(probe))


def test_a_version_5_calibration_reads_its_length_curves(tmp_path):
    """Version 5 (no commonness): every query of a length reads its curve, as before; a version-6 file whose
    commonness table is missing is refused, naming the file."""
    folder = load_model("default").save(tmp_path / "copy")
    doc = json.loads((folder / "calibration.json").read_text())
    assert (folder / "commonness.npz").is_file() and doc["commonness"]["file"] == "commonness.npz"
    (folder / "calibration.json").write_text(json.dumps({k: v for k, v in doc.items()
                                                         if k not in ("common", "commonness")} | {"version": 5}))
    cal = load_model(folder).calibration
    probe = np.linspace(-0.5, 0.5, 101)
    assert not cal.common and cal.commonness is None
    for n in ("1", "2-3", "4-6"):
        np.testing.assert_array_equal(cal(probe, n, "a dog"), Curve(**doc["lengths"][n])(probe))
    (folder / "calibration.json").write_text(json.dumps(doc))
    (folder / "commonness.npz").unlink()
    with pytest.raises(DataFormatError, match="commonness.npz"):
        load_model(folder)


def test_too_few_queries_with_a_commonness_keep_the_length_curve():
    """A length with fewer than ``COMMON_QUERIES`` queries of a known commonness, or all as common, gets no commonness
    curve (its curve alone); with enough, it gets one (a curve that reads common queries' high scores higher)."""
    rng = np.random.default_rng(0)
    scores = rng.normal(0, 0.1, (40, 50))
    shares = np.log(np.linspace(0.001, 0.3, 40))
    right = rng.random((40, 50)) < np.exp(shares)[:, None] * (1 + 4 * (scores > 0.1))
    few = fit_length([("", scores[:5], scores[:5], right[:5], None, None, shares[:5])], 0)
    same = fit_length([("", scores, scores, right, None, None, np.full(40, -2.0))], 0)
    assert not few.common and not same.common
    np.testing.assert_array_equal(few.read(scores[:5], "7+", shares[:5, None]), few.curve(scores[:5]))
    fitted = fit_length([("", scores, scores, right, None, None, shares)], 0)
    assert "7+" in fitted.common and fitted.read(0.2, "7+", shares[-1]) > fitted.read(0.2, "7+", shares[0])
