"""One query answered over a catalog: its sources (the model's and the text cues'), one fusion, the results.

::

    query text ─┬─ model.encode_text ──> visual sources (visual_sources(model, catalog): chosen once per model)
                └─ MiniLM sentence ─────> cue sources (TextCues.scores: keyword + meaning, per cue)
                                               │
                         fusion: threshold (weighted scores) or exhaustive (ranks, zscore)
                                               │
    example (--like) ─ its row ──────> example source (NearestSource over the video rows) ─┐
                                                                                           │
                         top k ──> results: frame rows read in one query -> best moment, each expert's score,
                                   the words said or written that match (their moment when they outweigh the picture)

Where the model ranks segments and some video has several, the fusion is per segment (``reelsearch.search.fusion``):
the cues count for the segments their time overlaps, a video scores its best segment, and its moments are its
segments by the same fused score, each with the confidence of its picture and cues.

A model with a querybank ranks a query of seven words or more by its scores less each video's offset (the stored
bias), a shorter one by the model's own score (``reelsearch.scoring.calibration.banked``: the bank lowers short
queries' retrieval); a confidence reads the score less the offset either way, but for four to six words the model's
own score (what separates right hits from wrong ones best: ``reelsearch.scoring.calibration.OWN_SCORE``,
``reelsearch calibrate`` fits the curves so).

With an example, the candidates — the fusion's top k + its own ids, and the example's own top RESCORED — are re-scored
by the sequence similarity of their frame rows and the example's own file is dropped (``reelsearch.search.example``).

With filters (``reelsearch.search.filters``), the catalog is the allowed videos (``reelsearch.search.subset``) and the
text cues score only them: every source yields allowed ids only, so the top k is the exact top k of the allowed
videos. A query of filters alone lists the allowed videos (:func:`listed`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reelsearch.index.catalog import Catalog, StoredVideo
from reelsearch.index.paths import unreachable
from reelsearch.index.textcues import TextCues
from reelsearch.models.calibration import search_calibration
from reelsearch.scoring.calibration import SENTENCE, banked, query_length
from reelsearch.search.cues import CueSource
from reelsearch.search.example import RESCORED, Example, candidates_with, rescore
from reelsearch.search.experts import Plan
from reelsearch.search.fusion import (
    Fused,
    first_candidates,
    fuse,
    fused_segments,
    per_segment,
    positive,
    segment_scores,
)
from reelsearch.search.results import FrameScore, Match, Moment, SearchResult
from reelsearch.search.sources import LIKE, VISUAL, InnerProduct, Source, Visual
from reelsearch.search.subset import Selection, Subset


def run_query(catalog: Catalog, visual: Visual, cue_index: TextCues | None, text: str | None,
              query: np.ndarray | None, cue_query: np.ndarray | None, p: Plan, k: int, *, frames: bool = True,
              first: int | None = None, example: Example | None = None,
              allowed: Selection | Sequence[str] | None = None, moments: int = 3) -> list[SearchResult]:
    """The ``k`` best videos of ``catalog`` for ``text`` and/or ``example`` under plan ``p``, best first.

    ``query``: the model's query embedding [1, D] (None without text); ``cue_query``: the sentence embedding of
    ``text`` for the text cues (when ``p`` has cues); ``frames``: give each result's per-frame scores; ``first``: the
    fusion's first candidate count (``threshold_fusion``); ``example``: a query by example (its source weighs
    ``p.weights["like"]``); ``allowed``: rank only these videos (a filter's selection); ``moments``: each result's
    best segments given (``SearchResult.moments``)."""
    if allowed is not None:
        catalog = Subset(catalog, allowed)
        visual = visual.on(catalog)
    if text is not None:  # the querybank's offsets for queries of seven words or more
        visual = visual.with_bias(_banked(text))
    sources: dict[str, Source] = {}
    weights: dict[str, float] = {}
    if p.visual:
        sources.update(visual.sources(query))
        weights.update(visual.weights(p.weights[VISUAL]))
    cues = {}
    if p.cues:  # the allowed videos, with a picture or without (their words find them)
        within = None if allowed is None else allowed.ids if isinstance(allowed, Selection) else list(allowed)
        scores = cue_index.scores(text, within, p.cues, query_vector=cue_query)
        cues = {c: CueSource(scores, c, catalog.known) for c in p.cues}
        sources.update(cues)
        weights.update({c: p.weights[c] for c in p.cues})
    n = k
    if example is not None:
        sources[LIKE] = example.source(catalog, visual)
        weights[LIKE] = p.weights[LIKE]
        # alone (one source: its top n is cheap) or exhaustive, the first stage keeps RESCORED; with text, the
        # fusion's top k and the example's own top RESCORED are the candidates (candidates_with)
        n = k + len(example.exclude) if len(weights) > 1 else max(RESCORED, k + len(example.exclude))
    model = visual if p.visual or p.cues else None  # a rank-fused model's kind, when text takes part
    exhaustive = model is not None and model.exhaustive
    if exhaustive and example is not None:
        n = max(RESCORED, n)

    fused = fuse(sources, weights, n, catalog, model, keep=None if p.visual or example is not None else positive,
                 first=first)
    if example is not None:
        if not exhaustive and len(weights) > 1:
            fused = candidates_with(fused, sources, weights, sources[LIKE].top(RESCORED).ids,
                                    per_segment(catalog, model))
        fused = rescore(catalog, fused, example, weights[LIKE], k, sequence=not exhaustive)
    return _results(catalog, visual, cue_index, fused, catalog.stored(fused.ids), text, query, p, cues, frames,
                    example, moments, (sources, weights))


def first_nearest(catalog: Catalog, visual: Visual, text: str | None, query: np.ndarray, p: Plan, k: int, *,
                  filtered: bool = False, example: Example | None = None) -> tuple[np.ndarray, int, bool] | None:
    """The first vector-index search ``run_query`` makes for ``text`` (``query``: its embedding) under plan ``p``, as
    (query row, n, biased), where it is one a batch of searches can share (``reelsearch.search.batching.prefetch``):
    the model's inner product over the video rows (no video has several segments: ``best_segment_source``) as the
    fusion first asks it (``first_candidates``), without filters or an example; else None."""
    if filtered or example is not None or not p.visual or not isinstance(visual, InnerProduct) or \
            catalog.several_segments():
        return None
    return visual.model.ann_query(query)[0], first_candidates(k, 1 + len(p.cues)), _banked(text)


def _banked(text: str) -> bool:
    """Whether a search for ``text`` ranks by its scores less the querybank's offsets (``calibration.banked``)."""
    return banked(query_length(text))


def listed(catalog: Catalog, ids: Sequence[str]) -> list[SearchResult]:
    """``ids`` as results in their order (a query of filters alone: score 0, no source's score — ``experts`` empty:
    nothing matched, they were listed —, the first frame as the moment)."""
    stored = catalog.stored(list(ids))
    out = [SearchResult(i, v.path, 0.0, float(v.times[0]) if len(v.times) else 0.0, 0, v.duration, experts={},
                        unavailable=unreachable(v.path), taken_at=v.taken_at, taken_from=v.taken_from)
           for i in ids if (v := stored.get(i)) is not None]
    for result in out:
        if not stored[result.id].pictured:
            result.kind = "audio"
    return out


def _results(catalog: Catalog, visual: Visual, cue_index: TextCues | None, fused: Fused,
             stored: dict[str, StoredVideo], text: str | None, query: np.ndarray | None, p: Plan,
             cues: dict[str, CueSource], frames: bool, example: Example | None, moments: int,
             fusion: tuple[dict[str, Source], dict[str, float]]) -> list[SearchResult]:
    """The fused top k (``stored``: their stored videos) as results: the best segments (``moments``, scored as the
    fusion scores a segment: a video scores by its best), the best moment from the frame rows inside the best segment
    (read for all of them in one query; each frame's score is the weighted sum of its text score and its match with
    the example), each expert's score, the text segment behind the strongest cue (its moment when it outweighs the
    picture). ``fusion``: the search's sources and weights. A file of sound alone (kind "audio": no picture, found by
    its words) has no frame strip, no confidence and its experts of the picture 0; its moment is the words said that
    match."""
    judged = [*visual.weights(1.0), *cues]  # what a confidence is the calibration of: the picture and the cues
    length = query_length(text) if text is not None else SENTENCE  # the calibration's curve for such queries
    spans = _moments(catalog, visual, fused, query, *fusion, judged, p.weights[VISUAL], length, text) \
        if query is not None and p.visual else {}
    seen = [j for j, i in enumerate(fused.ids) if i not in stored or stored[i].pictured]  # the hits with a picture
    ids = [fused.ids[j] for j in seen]
    best = None  # each pictured hit's best segment (row, bias): what a segment-ranked video's score is made of
    if visual.segmented and spans and all(i in spans for i in ids):
        best = (np.array([spans[i][0] for i in ids]), np.array([spans[i][1] for i in ids]))
    shown = {}  # each expert's own score, shown for a mixture or when text cues take part
    if p.visual and (cues or example is not None or len(visual.experts) > 1):
        own = visual.expert_scores(query, ids, {s: r[seen] for s, r in fused.rows.items()}, best)
        shown = {name: np.zeros(len(fused.ids)) for name in own}
        for name, s in own.items():
            shown[name][seen] = s
    shown.update({c: fused.rows[c] for c in cues})
    if example is not None and (p.visual or cues):
        shown[LIKE] = fused.rows[LIKE]
    picture = sum((fused.terms[s] for s in fused.terms if s not in cues), np.zeros(len(fused.ids)))
    bias = np.zeros(len(fused.ids))  # each hit's stored bias (its querybank offset, negated)
    if p.visual:
        bias[seen] = visual.bias_of(ids) if best is None else best[1]
        picture = picture - p.weights[VISUAL] * visual.ranked_bias(bias)  # the picture's match, without the bias
    confidence = _confidence(visual, fused, p, judged, length, bias, text)
    text_frames = visual.frame_scorer(query) if query is not None else None

    def frame_scores(rows: np.ndarray) -> np.ndarray:
        if example is None:
            return text_frames(rows)
        fs = p.weights[LIKE] * example.frame_scores(rows)
        return fs + p.weights[VISUAL] * text_frames(rows) if p.visual else fs

    out = []
    for j, id_ in enumerate(fused.ids):
        video = stored.get(id_)
        if video is None:  # committed away after it was ranked
            continue
        fs = frame_scores(video.frame_rows) if video.pictured else np.zeros(0)
        found_moments, frame, moment = None, 0, 0.0
        if id_ in spans:
            found_moments = spans[id_][2][:max(moments, 1)]
            first, stop = spans[id_][3]
            frame = first + int(fs[first:stop].argmax()) if stop > first else int(fs.argmax())
            found_moments = found_moments if moments > 0 else None
        elif video.pictured:
            frame = int(fs.argmax())
        if video.pictured:
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
        sure = None if confidence is None else float(confidence[j])
        if not video.pictured:  # sound alone: the words said are all there is to show
            strip, sure = None, None
            found_moments = None if match is None or moments == 0 else [
                Moment(match.start, match.end, float(fused.scores[j]))]
        result = SearchResult(id_, video.path, float(fused.scores[j]), moment, frame, video.duration,
                              strip if frames else None,
                              {name: float(s[j]) for name, s in shown.items()} if shown else None, match, sure,
                              found_moments, unreachable(video.path), video.taken_at, video.taken_from)
        if not video.pictured:
            result.kind = "audio"
        out.append(result)
    return out


def _moments(catalog: Catalog, visual: Visual, fused: Fused, query: np.ndarray, sources: dict[str, Source],
             weights: dict[str, float], judged: list[str], weight: float,
             length: str, text: str | None) -> dict[str, tuple[np.ndarray, float, list[Moment], tuple[int, int]]]:
    """{id: (its best segment's row, its bias, its segments as moments best first, the best one's frames [first,
    stop))} of the fused hits, their segments read in one query: scored as the fusion scores a segment (the model's
    segment score, the cues whose time overlaps it: ``reelsearch.search.fusion.segment_scores``), each confident as
    the calibration (its curve for queries of ``length`` and as common as ``text``) of its ``judged`` sources' part
    over the model's ``weight``; or, where the model does not rank segments (ranks, frame attention), in the order of
    their frames' best scores."""
    segs = catalog.segments(fused.ids)
    if not segs:
        return {}
    calibration = search_calibration(visual.model)
    frames_of = None if visual.segmented else visual.frame_scorer(query)
    stored = catalog.stored(list(segs)) if frames_of is not None else {}
    position = {i: j for j, i in enumerate(fused.ids)}
    scored = []  # (id, its segments, their fused scores, the scores their confidence reads: None without)
    for id_, s in segs.items():
        read = None
        if frames_of is None:
            parts = segment_scores(id_, s, sources, weights, {n: float(fused.rows[n][position[id_]]) for n in weights})
            scores = fused_segments(parts, weights)
            if calibration is not None and weight > 0:
                judged_part = sum(weights[n] * parts[n] for n in judged) / weight
                read = _judged(calibration, visual, judged_part, s.biases, length)
        elif id_ in stored:
            fs = np.asarray(frames_of(stored[id_].frame_rows), np.float64)
            scores = np.array([fs[a:a + c].max() if c else -np.inf for a, c in zip(s.firsts, s.counts, strict=True)])
        else:
            continue
        scored.append((id_, s, scores, read))
    reads = [r for *_, r in scored if r is not None]  # every hit's segments through the calibration in one call
    confident = iter(_pieces(calibration(np.concatenate(reads), length, text), [len(r) for r in reads])
                     if reads else ())
    out = {}
    for id_, s, scores, read in scored:
        sure = None if read is None else next(confident)
        order = (-scores).argsort(kind="stable")
        listed = [Moment(float(s.starts[o]), float(s.ends[o]), float(scores[o]),
                         None if sure is None else float(sure[o])) for o in order]
        b = int(order[0])
        out[id_] = (s.rows[b], float(s.biases[b]), listed, (int(s.firsts[b]), int(s.firsts[b] + s.counts[b])))
    return out


def _pieces(values: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """``values`` cut into consecutive pieces of ``sizes`` (views; ``np.split``'s, at a fraction of its cost)."""
    ends = np.cumsum(sizes).tolist()
    return [values[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def _confidence(visual: Visual, fused: Fused, p: Plan, judged: list[str], length: str,
                bias: np.ndarray, text: str | None) -> np.ndarray | None:
    """Each fused hit's calibrated confidence: the model's calibration (its curve for queries of ``length``,
    ``reelsearch.scoring.calibration.query_length``, and of the commonness of the free ``text`` in the model's
    training captions, where it knows it: ``Calibration``) of the ``judged`` sources' part of its fused
    score (the model's terms and the cues') over the model's weight, with the hit's stored ``bias`` (its querybank
    offset, negated) whether the ranking counted it or not, as ``reelsearch calibrate`` measured the model's own
    score: the cues count on the model's scale as the fusion weighs them. None without a calibration or a
    picture."""
    calibration = search_calibration(visual.model)
    weight = p.weights[VISUAL] if p.visual else 0.0
    if calibration is None or weight <= 0:
        return None
    own = sum(fused.terms[s] for s in judged) / weight
    return calibration(_judged(calibration, visual, own, bias, length), length, text)


def _judged(calibration, visual: Visual, scores: np.ndarray, bias: np.ndarray, length: str) -> np.ndarray:
    """The score a ``calibration``'s curve for ``length`` reads of hits with ranked ``scores`` and stored ``bias`` (a
    querybank offset, negated): the model's own score, less the offset where the curve reads so
    (``Calibration.less_offsets``), whether the ranking counted it or not."""
    own = scores - visual.ranked_bias(bias)
    return own + bias if calibration.less_offsets(length) else own
