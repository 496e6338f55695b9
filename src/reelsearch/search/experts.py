"""The experts of one search: the model's (visual) experts and the speech and on-screen-text cues, fused into one
ranking by the project's fusion (``reelsearch.evaluation.fusion.fuse_experts``, the one a mixture of experts uses).

Experts and their scores for a query and a video:

* the model's experts (a joint model is one, called ``visual``; a mixture's keep their names): each its own
  similarity, weighted by ``weights["visual"]`` times the model's own weight for it (so with the cues left out,
  the fused score is the model's score times a constant, and the ranking is the model's); a video's bias in the
  library (its querybank offset, negated) is added with the weight of ``visual``, as the model's score includes it;
* ``speech`` and ``ocr``: the cue's expert score from the text-cue index (``CueScores.expert``): keyword (BM25,
  k1 = 0) + 2 x meaning (MiniLM cosine above ``SEMANTIC_FLOOR``, rescaled), 0 for a video without that cue.

Fusion is the model's kind: score fusion (the sum of weighted scores) for a joint model or a score-fused mixture,
rank fusion for a rank-fused mixture (with the cues ranked among all videos too).

**Candidates.** Score fusion of non-negative weights is monotone in every expert's score, so the top k can be found
from each expert's own top N (Fagin's threshold algorithm): the candidates are the visual top N (the vector index:
ANN or exact scan) and each cue's top N (every video with text is scored: one FTS5 lookup per query word and one
matrix-vector product over the segment embeddings), the fused scores are computed for the candidates only, and a
video outside them scores at most ``sum_e w_e * (N-th best score of e)``. When the k-th candidate reaches that
bound the result is exact; otherwise N grows (x4) and the search repeats, up to every video. Rank fusion (ranks
among all videos), a zscore-normalised mixture and frame attention (Torabi M3) score every video instead, as they do
without cues.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from reelsearch.errors import ReelsearchError
from reelsearch.evaluation.fusion import fuse_experts
from reelsearch.features.cues import CUES
from reelsearch.index.textcues import DEFAULT_WEIGHTS as KEYWORD_MEANING
from reelsearch.index.textcues import SEMANTIC_FLOOR, CueScores, SegmentMatch

VISUAL = "visual"
#: Expert weights of the fused ranking (``visual`` multiplies the model's own weights). Measured on generated clips
#: with real Flickr8k photos among Flickr8k dev photos (benchmarks/bench_fusion.py; docs/benchmarks.md).
DEFAULT_WEIGHTS: dict[str, float] = {VISUAL: 1.0, "speech": 1.0, "ocr": 0.5}
#: Each expert's top N that makes the first set of candidates (grows x4 until the threshold test passes).
CANDIDATES = 100


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
    """What one search fuses: the model's experts used (``visual``: {display name: model expert name}), the cues,
    each fused row's weight, and the fusion's kind and normalisation."""

    visual: dict[str, str]
    cues: list[str]
    weights: dict[str, float]
    visual_weight: float = 1.0
    kind: str = "score"
    normalize: str = "none"
    floor: float = SEMANTIC_FLOOR

    @property
    def threshold(self) -> bool:
        """Whether candidates + the threshold test find the exact top k (a weighted sum of scores)."""
        return self.kind == "score" and self.normalize == "none"


def plan(model, experts: Sequence[str] | None, weights: Mapping[str, float], stored_cues: Sequence[str],
         floor: float = SEMANTIC_FLOOR) -> Plan:
    """The experts of a search with ``model``: ``experts`` names some of ``visual`` (the model's experts, all of
    them), ``speech`` and ``ocr`` (None: visual and every cue the index holds, ``stored_cues``); ``weights``
    overrides some of DEFAULT_WEIGHTS."""
    model_experts = list(model.experts)
    display = {VISUAL: model_experts[0]} if len(model_experts) == 1 else {k: k for k in model_experts}
    clash = set(display) & set(CUES)
    if clash:
        raise ExpertError(f"the model has experts named like a text cue: {sorted(clash)}")
    known = [VISUAL, *CUES]
    unknown = sorted(set(weights) - set(known))
    if unknown:
        raise ExpertError(f"unknown expert {unknown[0]!r} in the weights; experts: {', '.join(known)}")
    w = {**DEFAULT_WEIGHTS, **weights}
    names = [VISUAL, *[c for c in CUES if c in stored_cues]] if experts is None else list(experts)
    for name in names:
        if name not in known:
            raise ExpertError(f"unknown expert {name!r}; experts: {', '.join(known)}")
        if name in CUES and name not in stored_cues:
            raise ExpertError(f"the index holds no {name} cue: run `reelsearch index` with it on (its extra "
                              f"installed: pip install 'reelsearch[{name}]')")
    visual = display if VISUAL in names else {}
    cues = [c for c in CUES if c in names]
    row_weights = {d: w[VISUAL] * model.weight(m) for d, m in visual.items()}
    row_weights.update({c: w[c] for c in cues})
    kind = model.fusion_kind if model.fusion_kind in ("score", "rank") else "score"
    fusion = getattr(model, "fusion", None)
    return Plan(visual, cues, row_weights, w[VISUAL], kind, getattr(fusion, "normalize", "none"), floor)


@dataclass
class Ranked:
    """One fused result: ``experts`` each expert's own score, ``terms`` its part of the fused score, ``match`` the
    text segment behind the strongest cue (None without text evidence), ``text_wins`` when that cue's part exceeds the
    visual experts' together (the result's moment is then the segment's)."""

    id: str
    score: float
    experts: dict[str, float]
    terms: dict[str, float]
    match: SegmentMatch | None = None
    text_wins: bool = False
    highlights: list[tuple[int, int]] = field(default_factory=list)


def fused_search(library, model, cues_index, text: str, query: np.ndarray, cue_query: np.ndarray | None,
                 p: Plan, k: int, candidates: int = CANDIDATES) -> list[Ranked]:
    """The ``k`` best videos of ``library`` for one query under plan ``p`` (see the module docstring).

    ``query``: the model's query embedding [1, D]; ``cue_query``: the MiniLM sentence embedding of ``text``.
    """
    sc = cues_index.scores(text, None, p.cues, query_vector=cue_query) if p.cues else None
    cue_scores = {c: sc.expert(c, KEYWORD_MEANING, p.floor) for c in p.cues}
    where = sc.positions if sc is not None else {}
    total = len(library)
    n = max(int(candidates), k)
    while True:
        if p.threshold and (not p.visual or model.search_mode in ("ann", "scan")) and n < total:
            ids, rows, bound = _candidates(library, model, query, p, cue_scores, sc, n)
        else:
            ids, rows, bound = _everything(library, model, query, p)
        for c in p.cues:
            rows[c] = np.asarray([[cue_scores[c][where[i]] if i in where else 0.0 for i in ids]], np.float32)
        terms = {e: fuse_experts({e: rows[e]}, {e: p.weights[e]}, p.kind, p.normalize)[0] for e in p.weights}
        fused = fuse_experts(rows, p.weights, p.kind, p.normalize)[0]
        if p.visual and p.kind == "score":  # each video's bias (a querybank's offset) is part of the model's score
            fused = fused + p.visual_weight * library.biases(ids)
        order = np.argsort(-fused, kind="stable")
        if not p.visual:  # text alone: only videos with evidence
            order = order[fused[order] > 0]
        order = order[:k]
        kth = float(fused[order[-1]]) if len(order) == k else -np.inf
        if bound is None or kth >= bound or n >= total:
            break
        n *= 4
    out = []
    for j in order:
        r = Ranked(ids[j], float(fused[j]), {e: float(rows[e][0, j]) for e in p.weights},
                   {e: float(terms[e][j]) for e in p.weights})
        _explain(r, sc, where, p, cues_index, text)
        out.append(r)
    return out


def _candidates(library, model, query, p: Plan, cue_scores, sc: CueScores | None, n: int):
    """(candidate ids, visual rows {name: [1, C]}, bound on the fused score of any other video)."""
    bound = 0.0
    ids: list[str] = []
    if p.visual:
        if model.search_mode == "ann":
            found, scores = library.vectors.search(model.ann_query(query)[:1], n)
        else:
            found, scores = library.vectors.scan(query[:1], n, model.score)
        ids = list(found[0])
        nth = float(scores[0, n - 1]) + library.bias_range()[1]  # the model's score (its experts' weighted sum) + bias
        bound += p.visual_weight * nth if np.isfinite(nth) else -np.inf
    for c in p.cues:
        s = cue_scores[c]
        top = np.argsort(-s, kind="stable")[:n]
        ids += [sc.ids[i] for i in top if s[i] > 0]
        bound += p.weights[c] * (float(s[top[-1]]) if len(s) > n else 0.0)
    ids = [i for i in dict.fromkeys(ids) if i in library.vectors]  # cues of videos gone from the library: skipped
    rows = _visual_rows(library, model, query, p, ids)
    return ids, rows, bound


def _everything(library, model, query, p: Plan):
    """Every video's visual rows (rank fusion, zscore mixtures, frame attention, or N beyond the library)."""
    ids: list[str] = []
    per: dict[str, list[np.ndarray]] = {d: [] for d in p.visual}
    if not p.visual:
        ids = [i for chunk, _ in library.vectors.iter_chunks() for i in chunk]
    elif model.search_mode == "pairwise":
        from reelsearch.models.interface import VideoEmbeddings

        all_ids = [i for chunk, _ in library.vectors.iter_chunks() for i in chunk]
        for start in range(0, len(all_ids), 256):
            block = all_ids[start:start + 256]
            media = [library.media(i) for i in block]
            videos = VideoEmbeddings(np.stack([m.video_vector for m in media]), [m.frame_vectors for m in media])
            scores = model.expert_scores(query, videos)
            for d, m in p.visual.items():
                per[d].append(scores[m])
            ids += block
    else:
        for chunk_ids, rows in library.vectors.iter_chunks():
            scores = model.expert_scores(query, rows)
            for d, m in p.visual.items():
                per[d].append(scores[m])
            ids += list(chunk_ids)
    rows = {d: np.concatenate(a, axis=1) if a else np.zeros((1, 0), np.float32) for d, a in per.items()}
    return ids, rows, None


def _visual_rows(library, model, query, p: Plan, ids: list[str]) -> dict[str, np.ndarray]:
    if not p.visual:
        return {}
    if not ids:
        return {d: np.zeros((1, 0), np.float32) for d in p.visual}
    scores = model.expert_scores(query, library.vectors.get(ids))
    return {d: np.asarray(scores[m], np.float32)[:1] for d, m in p.visual.items()}


def _explain(r: Ranked, sc: CueScores | None, where: dict, p: Plan, cues_index, text: str) -> None:
    """The strongest cue's segment (and whether it outweighs the picture) and its highlighted words."""
    i = where.get(r.id)
    if sc is None or i is None:
        return
    evidence = [c for c in p.cues if r.experts[c] > 0]
    if not evidence:
        return
    cue = max(evidence, key=lambda c: r.terms[c])
    r.match = sc.match(i, cue, KEYWORD_MEANING, p.floor)
    if r.match is None:
        return
    r.text_wins = not p.visual or r.terms[cue] > sum(r.terms[d] for d in p.visual)
    r.highlights = cues_index.highlights(r.match.segment, text)
