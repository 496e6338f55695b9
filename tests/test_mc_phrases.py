"""Activity phrases on real captions, each expectation written by hand after reading the caption."""

from __future__ import annotations

import json

import pytest

from conftest import shared_path

pytest.importorskip("spacy")

from reelsearch.mc.phrases import ActivityTagger  # noqa: E402

# (caption, expected phrases, expected words). Flickr8k captions.txt and MSVD captions_msvd.json, verbatim.
FLICKR = [
    ("A child in a pink dress is climbing up a set of stairs in an entry way .",  # quantity noun -> its of-object
     {"climb up stair"}, {"climb", "stair"}),
    ("A little girl is sitting in front of a large painted rainbow .",  # relational noun kept; "painted" is amod
     {"sit in front of rainbow"}, {"sit", "front", "rainbow"}),
    ("Two dogs on pavement moving toward each other .", {"move"}, {"move"}),  # "each other": no noun object
    ("Three bicyclists race around a curve .", {"race around curve"}, {"race", "curve"}),
    ("A group of people sit watching an event behind a Tim hortons sign .",
     {"sit", "watch event"}, {"sit", "watch", "event"}),
    ("Two girls are playing softball .", {"play softball"}, {"play", "softball"}),
    ("Three people squat down on the edge of a lake .", {"squat down"}, {"squat"}),  # particle: no prep object
    ("Several people are gathered on the steps in front of a brick building .",
     {"gather on step"}, {"gather", "step"}),
    ("Two dogs are standing in a field of grass and dirt .", {"stand in field"}, {"stand", "field"}),
    ("A man sitting on a chair on the street , next to a board .", {"sit on chair"}, {"sit", "chair"}),
    ("People and camels sitting and standing on beach", {"sit", "stand on beach"}, {"sit", "stand", "beach"}),
    ("Two dogs play with each other on a wood floor .", {"play on floor"}, {"play", "floor"}),
]
FLICKR_NO_PHRASE = [  # no predicate: the words fall back to content-word lemmas
    ("a view of some large snowcapped mountains", {"view", "large", "snowcapped", "mountain"}),
    ("Four people , in colorful kayaks , are on the water on a sunny day .",
     {"colorful", "kayak", "water", "sunny", "day"}),  # copula "are" is no activity; "people" is generic
]
MSVD = [
    ("someone poured milk over fruit in a blender", {"pour milk"}, {"pour", "milk"}),
    ("someone is riding a bull", {"ride bull"}, {"ride", "bull"}),  # spaCy alone lemmatises riding -> "rid"
    ("a woman climbing in the rockwall", {"climb in rockwall"}, {"climb", "rockwall"}),
    ("a gymnast falls off a balance beam", {"fall off beam"}, {"fall", "beam"}),
    ("a man hits his thumb with a hammer", {"hit thumb"}, {"hit", "thumb"}),
    ("baby pandas are crawling on a bench", {"crawl on bench"}, {"crawl", "bench"}),
    ("the lady battered the shrimp", {"batter shrimp"}, {"batter", "shrimp"}),
    ("someone is pouring sauce on a plateful of food", {"pour sauce"}, {"pour", "sauce"}),
    ("a black dachshund jumps into a swimming pool and swims in the water",
     {"jump into pool", "swim in water"}, {"jump", "pool", "swim", "water"}),
    ("a woman is pouring olive oil into a pan", {"pour oil"}, {"pour", "oil"}),
    ("the man talked about the sport", {"talk about sport"}, {"talk", "sport"}),
]


@pytest.fixture(scope="module")
def tagger():
    return ActivityTagger()


def test_paper_example(tagger):
    """Torabi et al. 2016, Fig. 2 / section 5: the Knowlywood phrases of an LSMDC caption."""
    t = tagger.tag("She walks over to the banquette and sits down.")
    assert set(t.phrases) == {"walk over", "sit down"}
    assert t.words == {"walk", "sit"} and not t.fallback


@pytest.mark.parametrize(("caption", "phrases", "words"), FLICKR + MSVD)
def test_real_captions(tagger, caption, phrases, words):
    t = tagger.tag(caption)
    assert set(t.phrases) == phrases
    assert t.words == words and not t.fallback


@pytest.mark.parametrize(("caption", "words"), FLICKR_NO_PHRASE)
def test_caption_without_phrase_falls_back_to_content_words(tagger, caption, words):
    t = tagger.tag(caption)
    assert t.phrases == () and t.fallback and t.words == words


def test_lsmdc_placeholder_and_pronouns_are_not_words(tagger):
    t = tagger.tag("SOMEONE covers his eyes with her hands, then removes them.")
    assert "cover eye" in t.phrases and "remove" in t.phrases
    assert "someone" not in t.words and "they" not in t.words and {"cover", "eye", "remove"} <= t.words


def test_repeated_captions_are_parsed_once(tagger):
    caps = ["a man is playing a guitar", "a dog runs", "a man is playing a guitar"]
    tags = tagger.tag_many(caps, progress=False)
    assert tags[0] is tags[2] and tags[0].phrases == ("play guitar",)
    before = tagger.seconds
    tagger.tag_many(caps, progress=False)
    assert tagger.seconds == before  # memoised: nothing parsed again


def test_expectations_are_real_captions():
    flickr = shared_path("flickr8k", "captions.txt").read_text(encoding="utf-8")
    flickr_caps = {line.split("\t", 1)[1] for line in flickr.splitlines() if "\t" in line}
    msvd = json.loads(shared_path("msvd", "captions_msvd.json").read_text(encoding="utf-8"))
    msvd_caps = {c for caps in msvd.values() for c in caps}
    for caption, *_ in FLICKR + FLICKR_NO_PHRASE:
        assert caption in flickr_caps, caption
    for caption, *_ in MSVD:
        assert caption in msvd_caps, caption
