"""Short queries derived from captions, as people type them (one to three words, sometimes four), and which photos
they are right for: what the confidence is calibrated and measured on besides full captions (docs/evaluation.md).

The extractor is a few rules over a caption's words (lower case, punctuation dropped), no parser: the subject noun
phrase is the words before the first verb or preposition (a word of :data:`STOPS`, or one ending in "ing"), its head
the last of them. A caption gives up to four queries: the head alone (``dog``), the phrase cut to its first word
when that is an article or a number plus its last two (``a black dog``, ``two children``; three for ``a group of
people``: a phrase headed by a word of :data:`GROUPS` goes on past its "of"), that phrase with the
verb in "ing" that follows it (``two children playing``, after an optional is / are), and what the head does: the
head, the word after the phrase (its verb), a preposition of :data:`PREPOSITIONS` if one follows, and the object's
head with its article (``dog running through the grass``, ``man riding a bike``; none when the object is longer than
four words or goes on with "of": ``in front of``). A caption whose phrase is empty or longer than six words gives
none.

A short query is right for a photo when some one caption of the photo holds every content word of the query (its
words but the articles, ``reelsearch.scoring.commonness.content_words``), a word's plural (``-s``, ``-es``) counting
as the word: "a dog" is right for every photo
a caption of which says "dog" or "dogs", not only the photo whose caption it came from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reelsearch.scoring.commonness import ARTICLES, content_words, words

#: Words that end a subject noun phrase: verbs, prepositions, conjunctions.
STOPS = frozenset("""is are was were be being been has have had does do did can will while as who that which and or
but in on at with by from into onto over under near through across along down up off out of for to behind beside
between next against around above below inside outside toward towards during after before like
sits sit stands stand runs run jumps jump walks walk looks look plays play rides ride holds hold wearing
climb climbs sings sing skate skates swim swims dressed smiles smile poses pose waits wait lies lie lays lay sleeps
sleep using wears wear throws throw catches catch watches watch carries carry stares stare dances dance
""".split())
#: Words a phrase may not end on (its head would not be a noun).
NOT_HEADS = frozenset("""black white brown tan young little small big large red blue green yellow pink orange purple
grey gray dark light old tall short long wet muddy shaggy fluffy
""".split())
#: Heads that name a number of something (``a group of people``): the phrase goes on past their "of".
GROUPS = frozenset({"group", "couple", "pair", "crowd", "team", "bunch", "herd", "family"})
#: Prepositions kept between a verb and its object (``running through the grass``).
PREPOSITIONS = frozenset("""in on at through across along into onto over under near by down up off with behind beside
toward towards around against""".split())
NUMBERS = frozenset({"one", "two", "three", "four", "five", "six", "several", "many", "some"})
MAX_PHRASE = 6


def short_queries(caption: str) -> list[str]:
    """The short queries of one caption (module docstring), shortest first, without repeats."""
    ws = words(caption)
    n = _phrase_end(ws, 0)
    if n < len(ws) - 1 and n > 0 and ws[n - 1] in GROUPS and ws[n] == "of":
        n = _phrase_end(ws, n + 1)
    phrase = ws[:n]
    if not phrase or len(phrase) > MAX_PHRASE or phrase[-1] in ARTICLES | NUMBERS | NOT_HEADS:
        return []
    head = phrase[-1]
    lead = phrase[:1] if phrase[0] in ARTICLES | NUMBERS and len(phrase) > 1 else []
    body = phrase[len(lead):]
    cut = lead + (body[-3:] if "of" in body[-3:-1] else body[-2:])  # "a group of people"
    out = [head, " ".join(cut)]
    rest = ws[n:]
    if rest[:1] and rest[0] in ("is", "are"):
        rest = rest[1:]
    if rest[:1] and rest[0].endswith("ing") and len(rest[0]) > 4 and rest[0] not in STOPS:
        out.append(" ".join([*cut, rest[0]]))
    out += _action(head, rest)
    return list(dict.fromkeys(out))


def _action(head: str, rest: list[str]) -> list[str]:
    """``[head verb (preposition) (article) object]`` from the words after the subject phrase, or none."""
    if len(rest) < 2 or rest[0] in PREPOSITIONS | ARTICLES or rest[0] in ("and", "while", "as", "who", "that", "of"):
        return []
    verb, rest = rest[0], rest[1:]
    prep = rest[:1] if rest[0] in PREPOSITIONS else []
    rest = rest[len(prep):]
    n = _phrase_end(rest, 0)
    obj = rest[:n]
    if not obj or len(obj) > 4 or obj[-1] in ARTICLES | NUMBERS | NOT_HEADS or rest[n:n + 1] == ["of"]:
        return []
    lead = obj[:1] if obj[0] in ARTICLES and len(obj) > 1 else []
    return [" ".join([head, verb, *prep, *lead, obj[-1]])]


def _phrase_end(ws: list[str], start: int) -> int:
    """The index of the first word from ``start`` on that ends a noun phrase (a stop, or a word in "ing" after the
    phrase's first)."""
    n = start
    while n < len(ws) and ws[n] not in STOPS and not (ws[n].endswith("ing") and n > start):
        n += 1
    return n


def relevance(queries: Sequence[str], captions: Sequence[str], cap2vid: Sequence[int], videos: int) -> np.ndarray:
    """[queries x videos] bool: a query is right for a video when one caption of it holds all the query's content
    words (module docstring). ``cap2vid``: each caption's video."""
    holding: dict[str, set[int]] = {}  # content word -> the captions that hold it
    for c, caption in enumerate(captions):
        for word in content_words(caption):
            holding.setdefault(word, set()).add(c)
    video_of = np.asarray(cap2vid, dtype=np.int64).reshape(-1)
    out = np.zeros((len(queries), videos), bool)
    for q, query in enumerate(queries):
        need = sorted(content_words(query), key=lambda w: len(holding.get(w, ())))  # the rarest word first
        found = set(holding.get(need[0], ())) if need else set(range(len(captions)))
        for word in need[1:]:
            if not found:
                break
            found &= holding[word]
        out[q, video_of[sorted(found)]] = True
    return out
