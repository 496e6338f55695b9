"""GloVe-style (lower-cased PTB) tokenizer, checked on real Flickr8k captions (which are PTB-tokenized already)."""

from __future__ import annotations

import pytest

from conftest import shared_path
from reelsearch.text.tokenize import tokenize


@pytest.fixture(scope="module")
def flickr_captions() -> dict[str, str]:
    captions = {}
    with open(shared_path("flickr8k", "captions.txt"), encoding="utf-8") as fh:
        for line in fh:
            key, caption = line.rstrip("\n").split("\t")
            captions[key] = caption
    return captions


# real captions, tokens checked by hand
HAND_CHECKED = {
    "1001773457_577c3a7d70.jpg#1": "a black dog and a tri-colored dog playing with each other on the road .",
    "10815824_2997e03d76.jpg#2": "a girl holding a horse 's lead behind a fire .",
    "2396669903_5217a83641.jpg#4": "sombody has stuck the face of groucho marx on a walk do n't walk button .",
    "3258395783_2de3a4ba27.jpg#1": "a man is setting up a camera to take shots of something that ca n't be seen near a "
                                   "zchtv wall .",
    "3563059800_c073081ce3.jpg#3": "a man with brown hair and a five o'clock shadow is wearing sunglasses and sitting "
                                   "at a table with cans of soda and other drinks .",
    "1253275679_e955fb7304.jpg#4": 'young boy with a black " adhd " t-shirt nodding off',
    "2769605231_dae8b30201.jpg#1": "a black greyhound , with a green and white jersey ( # 7 ) is running on a track .",
    "3215870337_c92a1a1b2f.jpg#1": "a crowd of people views newspaper covers in washington d.c.",
    "241345533_99c731403a.jpg#4": "a man wearing a white shirt is wearing an at&t headphone at a game .",
    "3215870337_c92a1a1b2f.jpg#2": "a group dressed in wintery attire of people on a sidewalk in washington d.c.",
}


def test_hand_checked_real_captions(flickr_captions):
    for key, expected in HAND_CHECKED.items():
        assert tokenize(flickr_captions[key]) == expected.split(" "), key


def test_flickr8k_captions_are_reproduced(flickr_captions):
    """Flickr8k captions are PTB-tokenized: tokenizing them again must give their own tokens (lower-cased)."""
    differ = [c for c in flickr_captions.values() if tokenize(c) != c.lower().split()]
    assert len(flickr_captions) == 35_000
    # the few that differ are typos ("RIF=ding", "bro!") or PTB's own rules ("cannot" -> "can" "not")
    assert len(differ) <= 15, differ
    assert tokenize("We cannot see the face") == ["we", "can", "not", "see", "the", "face"]


def test_untokenized_text_follows_ptb():
    text = ("Don't stop: the dog's owner can't see it, won't he? They're in the U.S. at 10:30 a.m., "
            "Mr. Smith's 3-year-old has 1,000 toys (3.5 each)... \"Cool\" -- dogs' toys at 5 o'clock")
    assert tokenize(text) == [
        "do", "n't", "stop", ":", "the", "dog", "'s", "owner", "ca", "n't", "see", "it", ",", "wo", "n't", "he",
        "?", "they", "'re", "in", "the", "u.s.", "at", "10:30", "a.m.", ",", "mr.", "smith", "'s", "3-year-old",
        "has", "1,000", "toys", "(", "3.5", "each", ")", "...", '"', "cool", '"', "--", "dogs", "'", "toys", "at",
        "5", "o'clock",
    ]


def test_curly_quotes_and_sentence_end():
    assert tokenize("It\u2019s a \u201ctest\u201d \u2014 isn\u2019t it?") == \
        ["it", "'s", "a", '"', "test", '"', "\u2014", "is", "n't", "it", "?"]
    assert tokenize("A dog runs on the grass.") == ["a", "dog", "runs", "on", "the", "grass", "."]
    assert tokenize("  ") == [] and tokenize("") == []


def test_hyphenated_words_split_only_when_out_of_vocabulary():
    vocab = {"t-shirt", "wet", "suit", "-", "black-and-white", "at&t"}
    text = "a black-and-white t-shirt and a wet-suit at at&t salt&pepper"
    assert tokenize(text) == ["a", "black-and-white", "t-shirt", "and", "a", "wet-suit", "at", "at&t",
                              "salt&pepper"]
    assert tokenize(text, vocab) == ["a", "black-and-white", "t-shirt", "and", "a", "wet", "-", "suit", "at", "at&t",
                                     "salt", "&", "pepper"]
