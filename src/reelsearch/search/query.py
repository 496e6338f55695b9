"""One query answered over a catalog: its sources (the model's and the text cues'), one fusion, the results.

::

    query text ─┬─ model.encode_text ──> visual sources (visual_sources(model, catalog): chosen once per model)
                └─ MiniLM sentence ─────> cue sources (TextCues.scores: keyword + meaning, per cue)
                                               │
                         fusion: threshold (weighted scores) or exhaustive (ranks, zscore)
                                               │
                         top k ──> results: frame rows read in one query -> best moment, each expert's score,
                                   the words said or written that match (their moment when they outweigh the picture)
"""

from __future__ import annotations

import numpy as np

from reelsearch.index.catalog import Catalog
from reelsearch.index.paths import unreachable
from reelsearch.index.textcues import TextCues
from reelsearch.search.cues import CueSource
from reelsearch.search.experts import Plan
from reelsearch.search.fusion import Fused, exhaustive_fusion, threshold_fusion
from reelsearch.search.results import FrameScore, Match, SearchResult
from reelsearch.search.sources import BIAS, VISUAL, Source, Visual


def run_query(catalog: Catalog, visual: Visual, cue_index: TextCues | None, text: str, query: np.ndarray,
              cue_query: np.ndarray | None, p: Plan, k: int, *, frames: bool = True,
              first: int | None = None) -> list[SearchResult]:
    """The ``k`` best videos of ``catalog`` for ``text`` under plan ``p``, best first.

    ``query``: the model's query embedding [1, D]; ``cue_query``: the sentence embedding of ``text`` for the text
    cues (when ``p`` has cues); ``frames``: give each result's per-frame scores; ``first``: the fusion's first
    candidate count (``threshold_fusion``)."""
    sources: dict[str, Source] = {}
    weights: dict[str, float] = {}
    if p.visual:
        sources.update(visual.sources(query))
        weights.update(visual.weights(p.weights[VISUAL]))
    cues = {}
    if p.cues:
        scores = cue_index.scores(text, None, p.cues, query_vector=cue_query)
        cues = {c: CueSource(scores, c, catalog.known) for c in p.cues}
        sources.update(cues)
        weights.update({c: p.weights[c] for c in p.cues})
    if visual.exhaustive:
        fused = exhaustive_fusion(sources, weights, k, catalog.ids(), kind=visual.kind, normalize=visual.normalize,
                                  positive_only=not p.visual)
    else:
        fused = threshold_fusion(sources, weights, k, len(catalog), positive_only=not p.visual, first=first)
    return _results(catalog, visual, cue_index, fused, text, query, p, cues, frames)


def _results(catalog: Catalog, visual: Visual, cue_index: TextCues | None, fused: Fused, text: str,
             query: np.ndarray, p: Plan, cues: dict[str, CueSource], frames: bool) -> list[SearchResult]:
    """The fused top k as results: the best moment from the frame rows (read for all of them in one query), each
    expert's score, the text segment behind the strongest cue (its moment when it outweighs the picture)."""
    stored = catalog.stored(fused.ids)
    shown = {}  # each expert's own score, shown for a mixture or when text cues take part
    if p.visual and (cues or len(visual.experts) > 1):
        shown = visual.expert_scores(query, fused.ids, fused.rows)
    shown.update({c: fused.rows[c] for c in cues})
    picture = sum((fused.terms[s] for s in fused.terms if s not in cues and s != BIAS), np.zeros(len(fused.ids)))
    frame_scores = visual.frame_scorer(query)
    out = []
    for j, id_ in enumerate(fused.ids):
        video = stored.get(id_)
        if video is None:  # committed away after it was ranked
            continue
        fs = frame_scores(video.frame_rows)
        frame = int(np.argmax(fs))
        moment = float(video.times[frame])
        match = None
        evidence = [c for c in cues if fused.rows[c][j] > 0]
        if evidence:
            cue = max(evidence, key=lambda c: fused.terms[c][j])
            found = cues[cue].match(id_)
            if found is not None:
                match = Match(found.cue, found.start, found.end, found.text, found.score, found.how, found.moment,
                              cue_index.highlights(found.segment, text))
                if not p.visual or fused.terms[cue][j] > picture[j]:  # the words outweigh the picture
                    moment = float(found.moment)
                    frame = int(np.argmin(np.abs(video.times - moment))) if len(video.times) else 0
        strip = [FrameScore(i, t, s) for i, (t, s) in enumerate(zip(video.times.tolist(), fs.tolist()))]
        out.append(SearchResult(id_, video.path, float(fused.scores[j]), moment, frame, video.duration,
                                strip if frames else None,
                                {name: float(s[j]) for name, s in shown.items()} if shown else None, match,
                                unreachable(video.path)))
    return out
