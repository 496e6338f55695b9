"""The experts of one search: which of the model (``visual``) and the speech and on-screen-text cues take part, and
with what weights. The search itself is sources (``reelsearch.search.sources``, ``reelsearch.search.cues``) and one
fusion (``reelsearch.search.fusion``):

* the model's score, weighted by ``weights["visual"]`` (its experts keep their own weights within it), with each
  video's bias in the library (its querybank offset, negated) as the model's score includes it;
* ``speech`` and ``ocr``: the cue's expert score (``reelsearch.search.cues.cue_score``): keyword (BM25, k1 = 0) +
  2 x meaning (MiniLM cosine above ``SEMANTIC_FLOOR``, rescaled), 0 for a video without that cue.

Fusion is the model's kind: weighted scores (the threshold algorithm over each source's top n) for a joint model or
a score-fused mixture; rank fusion (ranks among all videos, the cues' too) for a rank-fused mixture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.features.cues import CUES
from reelsearch.search.sources import LIKE, VISUAL

#: Expert weights of the fused ranking (``visual`` multiplies the model's own weights). Measured on generated clips
#: with real Flickr8k photos among Flickr8k dev photos (benchmarks/bench_fusion.py; docs/benchmarks.md).
#: ``like``: the weight of an example (query by example, ``reelsearch.search.example``) beside text: 1, as the model's
#: text score (both are cosines in the model's space).
DEFAULT_WEIGHTS: dict[str, float] = {VISUAL: 1.0, "speech": 1.0, "ocr": 0.5, LIKE: 1.0}


class ExpertError(ReelsearchError):
    """Experts or weights a search cannot use (unknown names, negative weights, a cue the index lacks)."""


def parse_experts(text: str | Sequence[str] | None) -> list[str] | None:
    """``"visual,speech"`` (or a list) -> names, in order, without repeats; None stays None (every expert)."""
    if text is None:
        return None
    names = text.split(",") if isinstance(text, str) else list(text)
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise ExpertError("no experts named (e.g. --experts visual,speech,ocr)")
    return names


def parse_weights(text: str | Mapping[str, float] | None) -> dict[str, float]:
    """``"speech=0.5,ocr=0.2"`` (or a mapping) -> {name: weight}; weights must be finite and >= 0."""
    if text is None:
        return {}
    if isinstance(text, Mapping):
        items = list(text.items())
    else:
        items = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            name, sep, value = part.partition("=")
            if not sep:
                raise ExpertError(f"weight {part!r}: write NAME=NUMBER (e.g. speech=0.5)")
            items.append((name.strip(), value.strip()))
    out = {}
    for name, value in items:
        try:
            w = float(value)
        except (TypeError, ValueError):
            raise ExpertError(f"weight of {name!r}: {value!r} is not a number") from None
        if not np.isfinite(w) or w < 0:
            raise ExpertError(f"weight of {name!r} must be a finite number >= 0, got {value}")
        out[str(name)] = w
    return out


@dataclass
class Plan:
    """What one search fuses: the model (``visual``) or not, the text cues, and the weight of each (``visual``
    weighs the model as a whole: its own experts keep their weights within it)."""

    visual: bool
    cues: list[str]
    weights: dict[str, float]


def plan(model, experts: Sequence[str] | None, weights: Mapping[str, float], stored_cues: Sequence[str], *,
         text: bool = True, like: bool = False) -> Plan:
    """The experts of a search with ``model``: ``experts`` names some of ``visual`` (the model, all its experts),
    ``speech`` and ``ocr`` (None: visual and every cue the index holds, ``stored_cues``); ``weights`` overrides some
    of DEFAULT_WEIGHTS. The model alone scores as the model does (weight 1). ``like``: an example takes part too
    (weight ``like``; alone, without ``text``, it scores as it is: weight 1)."""
    clash = set(model.experts) & set(CUES) if len(model.experts) > 1 else set()
    if clash:
        raise ExpertError(f"the model has experts named like a text cue: {sorted(clash)}")
    known = [VISUAL, *CUES]
    unknown = sorted(set(weights) - {*known, LIKE})
    if unknown:
        raise ExpertError(f"unknown expert {unknown[0]!r} in the weights; experts: {', '.join(known)}")
    w = {**DEFAULT_WEIGHTS, **weights}
    if not text:
        return Plan(False, [], {LIKE: 1.0})
    names = [VISUAL, *[c for c in CUES if c in stored_cues]] if experts is None else list(experts)
    for name in names:
        if name not in known:
            raise ExpertError(f"unknown expert {name!r}; experts: {', '.join(known)}")
        if name in CUES and name not in stored_cues:
            raise ExpertError(f"the index holds no {name} cue: run `reelsearch index` with it on (its extra "
                              f"installed: pip install 'reelsearch[{name}]')")
    cues = [c for c in CUES if c in names]
    visual = VISUAL in names
    out = {VISUAL: w[VISUAL] if cues else 1.0} if visual else {}
    out.update({c: w[c] for c in cues})
    if like:
        out[LIKE] = w[LIKE]
    return Plan(visual, cues, out)
