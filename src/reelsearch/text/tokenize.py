"""A word tokenizer that matches GloVe 6B's vocabulary (lower-cased Stanford / Penn-Treebank-style tokens).

GloVe 6B was trained on Wikipedia + Gigaword tokenized by the Stanford tokenizer and lower-cased, so its vocabulary
holds PTB tokens: clitics split off ("do" "n't", "ca" "n't", "dog" "'s", "they" "'re"), punctuation as tokens
("," "." "..." "--" "''" "``"), numbers kept whole ("1,000" "3.5"), abbreviations with their period ("u.s."
"mr." "a.m."), and hyphenated compounds kept whole ("t-shirt" "black-and-white" "3-year-old").

Rules, in order:
1. Lower-case; curly quotes and apostrophes become ASCII ' and ".
2. Split into tokens: abbreviations (letter-period pairs "u.s.", "a.m.", an initial followed by more text "u.", or
   a known title "mr." "dr." "st." "etc."), web domains ("statefarm.com"),
   numbers with separators ("1,000", "3.5", "10:30"), words (letters/digits joined by hyphens, apostrophes or "&"),
   runs of "." / "-" ("..." "--"), and any other single punctuation character.
3. Split clitics off words: "n't", "'s", "'re", "'ll", "'m", "'ve", "'d" ("don't" -> "do" "n't", "can't" ->
   "ca" "n't", "won't" -> "wo" "n't"); PTB's "cannot" -> "can" "not", "gonna" -> "gon" "na",
   "gotta" -> "got" "ta", "wanna" -> "wan" "na". Other apostrophes stay inside ("o'clock").
4. With a ``vocab``: a hyphenated word it lacks is split at its hyphens ("wet-suit" -> "wet" "-" "suit"), as the
   newer PTB convention does, and likewise at "&" ("salt&pepper"; "at&t" is in GloVe); without a ``vocab``,
   such words stay whole (the classic PTB convention).
"""

from __future__ import annotations

import re
from collections.abc import Container

_ABBREVIATIONS = ("mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "mt", "prof", "inc", "ltd", "co")

_TOKEN = re.compile(
    r"(?:[a-z]\.){2,}(?![a-z])"  # u.s.  a.m.  t.v.
    r"|[a-z]\.(?=\s+\S)"  # an initial inside the text: "u. miami"
    r"|[^\W_]+(?:[.-][^\W_]+)*\.(?:com|org|net|edu|gov)\b"  # web domains
    rf"|(?:{'|'.join(_ABBREVIATIONS)})\.(?![a-z0-9])"  # mr.  st.  etc.
    r"|\d+(?:[.,:]\d+)+(?![^\W_])"  # 1,000  3.5  10:30
    r"|[^\W_]+(?:['&-][^\W_]+)*"  # words, hyphenated words, words with apostrophes or & ("at&t")
    r"|'(?:s|re|ll|m|ve|d)\b"  # a clitic whose word was split off already ("dog 's")
    r"|n't\b"
    r"|\.{2,}|-{2,}|''|``"
    r"|[^\w\s]",  # any other punctuation (and _), one character at a time
)
_JOINER = re.compile(r"([-&])")
_CLITIC = re.compile(r"^(.+?)(n't|'s|'re|'ll|'m|'ve|'d)$")
_SPECIAL_SPLITS = {"cannot": ("can", "not"), "gonna": ("gon", "na"), "gotta": ("got", "ta"),
                   "wanna": ("wan", "na")}
_NORMALISE = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00b4": "'",
                            "\u2032": "'"})


def _split_word(word: str, vocab: Container[str] | None) -> list[str]:
    if word in _SPECIAL_SPLITS:
        return list(_SPECIAL_SPLITS[word])
    match = _CLITIC.match(word)
    if match:
        stem, clitic = match.groups()
        return _split_word(stem, vocab) + [clitic]
    if vocab is not None and ("-" in word or "&" in word) and word not in vocab:
        return [part for part in _JOINER.split(word) if part]
    return [word]


def tokenize(text: str, vocab: Container[str] | None = None) -> list[str]:
    """Lower-cased PTB-style tokens of ``text`` (see the module docstring); ``vocab`` decides hyphenated words."""
    tokens: list[str] = []
    for token in _TOKEN.findall(text.lower().translate(_NORMALISE)):
        if token[0].isalnum():
            tokens += _split_word(token, vocab)
        else:
            tokens.append(token)
    return tokens
