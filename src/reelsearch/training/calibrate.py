"""Calibrating a model's confidence on development queries (`reelsearch calibrate`); the curve and its checks are
``reelsearch.evaluation.calibration``, the model-folder part ``reelsearch.models.calibration.Calibration``.

Each caption of the split is a query over all the split's videos, scored as a search ranks a sentence (the model's
fused score less the querybank's offset: ``reelsearch.scoring.calibration.banked``), right for the video it was
written for; the short queries derived from the captions (``reelsearch.evaluation.short_queries``: each once, right
for every video a caption of which holds its words) are scored as a search ranks them (the model's own score for
one to six words). Per query length (``reelsearch.scoring.calibration.LENGTHS``: the captions are the seven words or
more) the curve is the isotonic fit of right on the score over EVERY (query, video) pair: the probability that a
video with that score is right, whatever else the library holds (a fit on a big gallery's top 10 read a small
library's best hits as rarely right). Its "no good match" thresholds, one per library size of ``LIBRARIES``, are the
confidence that ``RIGHT_BELOW`` of the right best hits of random libraries of that many development videos fall below
(``reelsearch.scoring.calibration``).

The report holds them out: the captions cut by their videos in two halves (``seed``), the short queries of each
length in two halves; fitted on one half, measured on the other (and each half in turn, for the banner): the
reliability of the top ``hits`` over all the split's videos and of every pair, and per library size of
:data:`MEASURED` (random draws of the split's videos, and all of them) how often "no good match" is said over a
right best hit, over a wrong one, and when the library holds no right video.

A negative term (``-dog``) removes the photos that may well show it (``NEGATIVE_CONFIDENCE``): per length of one to
three words, a curve from a photo's score for a term to the share of photos at that score that show it, fitted on
every photo's score for the derived short queries that at least :data:`TERM_PHOTOS` photos show (terms common enough
to exclude), held out by halves of those terms; the report says how many photos showing a held-out term it removes,
how many others, and what that does to the top 10 of the short queries of two or three words. A search reads these
curves where the calibration does not know how common the term is; where it does, a term's confidence is that of a
search for it (``Calibration.shows``, ``COMMON_NEGATIVE_CONFIDENCE``: ``benchmarks/bench_negative_common.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError
from reelsearch.evaluation.calibration import (
    HITS,
    fit_common,
    halves,
    isotonic,
    library_bests,
    reliability,
    top_hits,
)
from reelsearch.evaluation.short_queries import relevance, short_queries
from reelsearch.features.caches import DatasetSource
from reelsearch.io import atomic_write_json
from reelsearch.models import load_model
from reelsearch.models.calibration import STUDENT, Calibration
from reelsearch.models.checkpoint import derived_run
from reelsearch.scoring.calibration import (
    COMMON_RIGHT_BELOW,
    LENGTHS,
    LIBRARIES,
    NEGATIVE_CONFIDENCE,
    RIGHT_BELOW,
    SENTENCE,
    banked,
    query_length,
)
from reelsearch.scoring.commonness import Commonness
from reelsearch.training.run import model_pairs, resolve_device

REPORT_FILE = "calibration.json"
#: The text encoders a calibration is fitted on the scores of (``make_calibration``).
CALIBRATED = ("float32", STUDENT)
log = logging.getLogger(__name__)
BATCH = 512
#: The photos a development short query must be right for to count as a term (negative-term curves).
TERM_PHOTOS = 20
#: The term lengths with negative-term curves (a longer term reads the 2-3-word curve: ``Calibration.shows``).
TERM_LENGTHS = ("1", "2-3")
#: The library sizes the report measures the banner in (random draws of the split's videos; None: all of them), and
#: the draws of each size (the thresholds' sizes: ``reelsearch.scoring.calibration.LIBRARIES``).
MEASURED = (10, 20, 100, None)
DRAWS = {10: 300, 20: 100, 50: 40, 100: 20, 300: 10}
#: The split whose captions say how common a query is (``reelsearch.scoring.commonness``): the model's training data.
TRAINING_SPLIT = "train"
#: The bins of the report's reliability by commonness: a held-out query's right development videos at least this many
#: (common), between, at most the second (rare).
COMMON_BINS = (50, 5)
#: The fewest queries of a length with a commonness, of more than one value, that a commonness curve is fitted on
#: (fewer: the length's curve alone).
COMMON_QUERIES = 20


class ShortQueries:
    """The short queries of a split's captions (``reelsearch.evaluation.short_queries``), each once in the order
    first derived: ``queries``, their ``scores`` [Q, videos] as a search ranks videos, ``relevant`` [Q, videos],
    ``judged`` [Q, videos] the scores a confidence reads (default: ``scores``; ``_scores``)."""

    def __init__(self, queries: list[str], scores: np.ndarray, relevant: np.ndarray,
                 judged: np.ndarray | None = None):
        self.queries, self.scores, self.relevant = queries, scores, relevant
        self.judged = scores if judged is None else judged
        self.lengths = np.array([query_length(q) for q in queries])


def search_scores(model, pairs) -> tuple[tuple[np.ndarray, np.ndarray], ShortQueries]:
    """(the [captions x videos] scores of ``pairs`` as a search ranks a sentence and as a confidence reads it
    (``_scores``: every caption counted a sentence, as the curve of seven words or more is theirs); the short
    queries derived from the captions, scored so)."""
    video = model.encode_video(pairs.video_items(), batch_size=BATCH)
    queries = list(dict.fromkeys(q for c in pairs.captions for q in short_queries(c)))
    cap2vid = np.asarray(pairs.cap2vid)
    ranked, judged = _scores(model, queries, video, False)
    captions = _scores(model, pairs.captions, video, length=SENTENCE)  # (the captions' token features are cached)
    return captions, ShortQueries(
        queries, ranked, relevance(queries, pairs.captions, cap2vid, len(video.video)), judged)


def _scores(model, texts, video, cached: bool = True, length: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """([texts x videos] as a search ranks videos: the fused score, less the querybank's offsets of the videos for
    the texts of a length the bank normalises (``reelsearch.scoring.calibration.banked``); as a confidence reads
    them: the same since calibration version 5, whose curves read the score a query ranks by (``OWN_SCORE``: the
    lengths the bank does not normalise)); ``length``: every text's, instead of its words counted (``query_length``)."""
    text = model.encode_text(texts, BATCH, cached=cached)
    scores = np.asarray(model.fuse(model.expert_scores(text, video), axis=1), np.float64)
    bank = getattr(model, "querybank", None)
    if bank is None:
        return scores, scores
    less = scores - bank.video_offsets(video.video)[None, :]
    normalised = np.array([banked(length or query_length(t)) for t in texts], bool)[:, None]
    ranked = np.where(normalised, less, scores)
    return ranked, ranked


def fit_calibration(model, scores: np.ndarray, cap2vid: np.ndarray, source: str, hits: int = HITS,
                    seed: int = 0, short: ShortQueries | None = None, ranked: np.ndarray | None = None,
                    commonness: Commonness | None = None) -> tuple[Calibration, dict]:
    """(the Calibration fitted per length on every (query, video) pair of the captions' ``scores`` (seven words or
    more; ranked by ``ranked`` where a search ranks by other scores than a confidence reads) and of the ``short``
    queries of that length, with their commonness curves where ``commonness`` (the training captions' table) says how
    common each short query is, and its "no good match" thresholds (module docstring); the report: per length
    (``lengths``) its curve, threshold and held-out checks, and for the captions the held-out reliability of their top
    ``hits`` and how often their best hit says "no good match")."""
    relevant = cap2vid[:, None] == np.arange(scores.shape[1])[None, :]
    ranked = scores if ranked is None else ranked
    fit_videos, held_videos = halves(scores.shape[1], seed)
    fit, held = np.isin(cap2vid, fit_videos), np.isin(cap2vid, held_videos)
    # per length: (what, ranked, judged, right, fit half, held-out half, commonness: NaN where not read) of its queries
    groups = {SENTENCE: [("captions", ranked, scores, relevant, fit, held, np.full(len(scores), np.nan))]}
    if short is not None:
        shares = np.array([np.nan if commonness is None or n == SENTENCE else share_of(commonness, q)
                           for q, n in zip(short.queries, short.lengths)])
        for n in LENGTHS:
            sel = np.flatnonzero(short.lengths == n)
            if len(sel):
                a = np.isin(np.arange(len(sel)), halves(len(sel), seed)[0])
                groups.setdefault(n, []).append(("short_queries", short.scores[sel], short.judged[sel],
                                                 short.relevant[sel], a, ~a, shares[sel]))
    curves, thresholds, common, lengths, held_fits = {}, {}, {}, {}, {}
    for n, parts in groups.items():
        fitted = fit_length(parts, seed)
        curves[n], thresholds[n] = fitted.curve, fitted.thresholds[SENTENCE]
        if SENTENCE in fitted.common:
            common[n] = fitted.common[SENTENCE]
        half = fit_length([(w, r[a], j[a], y[a], a, b, c[a]) for w, r, j, y, a, b, c in parts], seed)
        other = fit_length([(w, r[b], j[b], y[b], a, b, c[b]) for w, r, j, y, a, b, c in parts], seed)
        held_fits[n] = half
        lengths[n] = {"curve": {"score": curves[n].score.tolist(), "right": curves[n].right.tolist()},
                      "thresholds": {str(size): t for size, t in thresholds[n].items()},
                      **{w: _checked(half, r[b], j[b], y[b], hits, c[b]) for w, r, j, y, _, b, c in parts}}
        lengths[n]["both_halves"] = {w: {_size(size): _banners(half, other, r, j, y, a, b, size, seed, c)
                                         for size in MEASURED} for w, r, j, y, a, b, c in parts}
    terms, term_report = _term_curves(short, seed) if short is not None else ({}, {})
    bank = getattr(model, "querybank", None)
    calibration = Calibration(curves.pop(SENTENCE), model.fingerprint(), bank.digest() if bank is not None else None,
                              source, scores.shape[1], len(scores), curves, terms, thresholds, common=common,
                              commonness=commonness if common else None)
    hit_scores, right = top_hits(ranked, relevant, hits, scores)
    held_curve = held_fits[SENTENCE].curve
    videos = scores.shape[1]
    below = calibration(hit_scores[:, 0]) < calibration.threshold(SENTENCE, videos)
    report = {
        "data": source, "queries": len(scores), "videos": scores.shape[1], "hits": hit_scores.shape[1],
        "curve": {"score": calibration.curve.score.tolist(), "right": calibration.curve.right.tolist()},
        "held_out": {"fit_queries": int(fit.sum()), "held_queries": int(held.sum()),
                     **reliability(held_curve(hit_scores[held]), right[held]),
                     "uncalibrated_score_rank1_right": float(right[held, 0].mean())},
        "no_good_match": {"threshold": calibration.threshold(SENTENCE, videos), "share_of_queries": float(below.mean()),
                          "best_right_when_below": float(right[below, 0].mean()) if below.any() else None,
                          "best_right_when_above": float(right[~below, 0].mean()) if (~below).any() else None},
        "lengths": lengths, "negative_terms": term_report,
    }
    return calibration, report


def fit_length(parts: list, seed: int) -> Calibration:
    """The curve of one length: the isotonic fit of every (query, video) pair of ``parts`` [(what, ranked, judged,
    right, fit half, held half, commonness)] pooled, and where some query has a commonness, the commonness curve over
    it (``reelsearch.evaluation.calibration.fit_common``), with its "no good match" thresholds: per library size of
    ``LIBRARIES`` (no more than the split's videos), the confidence ``RIGHT_BELOW`` (``COMMON_RIGHT_BELOW`` with a
    commonness curve) of the right best hits of random libraries of that size fall below (a Calibration of that one
    length as ``SENTENCE``, for its ``read`` and ``threshold``)."""
    judged = np.concatenate([j for _, _, j, _, _, _, _ in parts])
    right = np.concatenate([y for _, _, _, y, _, _, _ in parts])
    shares = np.concatenate([c for *_, c in parts])
    curve = isotonic(judged, right)
    known = shares[~np.isnan(shares)]
    common = {}
    if len(known) >= COMMON_QUERIES and known.min() < known.max():  # else: too few queries to tell commonness apart
        try:
            common[SENTENCE] = fit_common(curve, judged, right, shares)
        except (ValueError, np.linalg.LinAlgError) as exc:
            log.warning("no commonness curve for %d queries (%s): the length's curve alone", len(known), exc)
    fitted = Calibration(curve, "", None, common=common)
    cuts = {}
    for size in LIBRARIES:
        best = []
        for _, r, j, y, _, _, c in parts:
            value, ok, _ = library_bests(r, y, size, DRAWS[size], seed, j)
            best.append(fitted.read(value, SENTENCE, per_best(c, len(value)))[ok])
        confidence = np.concatenate(best)
        cuts[min(size, parts[0][1].shape[1])] = (
            float(np.quantile(confidence, COMMON_RIGHT_BELOW if common else RIGHT_BELOW, method="lower"))
            if len(confidence) else 0.0)
    fitted.thresholds = {SENTENCE: cuts}
    return fitted


def share_of(commonness: Commonness, query: str) -> float:
    """``commonness.log_share`` of ``query``, NaN for a query without a content word (arrays of queries' shares)."""
    share = commonness.log_share(query)
    return np.nan if share is None else share


def per_best(shares: np.ndarray, bests: int) -> np.ndarray:
    """Each query's ``shares`` repeated for the ``bests`` of ``library_bests`` (draw by draw, query by query)."""
    return np.tile(shares, bests // len(shares))


def _size(size: int | None) -> str:
    return "all" if size is None else str(size)


def _banners(half, other, ranked, judged, right, a, b, size, seed, shares) -> dict:
    """How often "no good match" is said in libraries of ``size`` videos (None: all), each half of the queries (``a``,
    ``b``) held out in turn (fit on the other: ``half``, ``other``, each :func:`fit_length`'s): over a right best hit,
    over a wrong one, and when the library holds no right video (``shares``: each query's commonness)."""
    counts = np.zeros(6, np.int64)
    size = size or ranked.shape[1]
    for fitted, rows in ((half, b), (other, a)):
        value, ok, held = library_bests(ranked[rows], right[rows], size, DRAWS.get(size, 1), seed + 1, judged[rows])
        weak = fitted.read(value, SENTENCE, per_best(shares[rows], len(value))) < fitted.threshold(SENTENCE, size)
        counts += [(weak & ok).sum(), ok.sum(), (weak & ~ok).sum(), (~ok).sum(), (weak & ~held).sum(), (~held).sum()]
    return {"right_best": int(counts[1]), "no_good_match": int(counts[0]),
            "no_good_match_over_right_best": float(counts[0] / max(counts[1], 1)),
            "wrong_best": int(counts[3]), "no_good_match_over_wrong_best": float(counts[2] / max(counts[3], 1)),
            "none_right": int(counts[5]),
            "no_good_match_when_none_right": float(counts[4] / counts[5]) if counts[5] else None}


def _term_curves(short: ShortQueries, seed: int) -> tuple[dict, dict]:
    """({length: term curve}, the held-out report) of the negative terms (module docstring)."""
    common = short.relevant.sum(axis=1) >= TERM_PHOTOS
    base = np.flatnonzero(np.isin(short.lengths, ["2-3"]))
    tops = np.argsort(-short.scores[base], axis=1, kind="stable")[:, :HITS]
    base_words = [set(short.queries[q].split()) for q in base]
    curves, report = {}, {}
    for n in TERM_LENGTHS:
        sel = np.flatnonzero(common & (short.lengths == n))
        if len(sel) < 2:
            continue
        curves[n] = isotonic(short.scores[sel], short.relevant[sel])
        a, b = halves(len(sel), seed)
        half = isotonic(short.scores[sel[a]], short.relevant[sel[a]])
        counts = np.zeros(4, np.int64)  # photos: showing the term removed, showing it, others removed, others
        top = np.zeros(4, np.int64)  # top 10 of other queries: shown left, shown, others stayed, others
        for t in sel[b]:
            gone, shown = half(short.scores[t]) >= NEGATIVE_CONFIDENCE, short.relevant[t]
            counts[:4] += [(gone & shown).sum(), shown.sum(), (gone & ~shown).sum(), (~shown).sum()]
            own = set(short.queries[t].split())
            rows = [j for j, w in enumerate(base_words) if not w & own]
            g, s = gone[tops[rows]], shown[tops[rows]]
            top += [(g & s).sum(), s.sum(), (~g & ~s).sum(), (~s).sum()]
        report[n] = {"terms": len(sel), "held_terms": len(b), "cut": NEGATIVE_CONFIDENCE,
                     "photos_showing_removed": float(counts[0] / max(counts[1], 1)),
                     "other_photos_removed": float(counts[2] / max(counts[3], 1)),
                     "top10_showing_left": int(top[0]), "top10_showing": int(top[1]),
                     "top10_others_stayed": int(top[2]), "top10_others": int(top[3])}
    return curves, report


def _checked(fitted: Calibration, ranked, judged, right, hits: int, shares) -> dict:
    """Held-out queries' check of a :func:`fit_length` over all the split's videos (``shares``: each query's
    commonness): the reliability table of their top ``hits`` and of every pair (``all_pairs_ece``), the log loss of
    every pair (``log_loss``; ``log_loss_length_curve``: of the length's curve alone, as version 5 read it), how often
    the best hit is right, and called no good match when it is (``no_good_match_over_right_best``), and per bin of
    :data:`COMMON_BINS` of the queries' right videos the top ``hits``' and every pair's mean confidence beside the
    share right (``by_commonness``)."""
    value, top = top_hits(ranked, right, hits, judged)
    confidence, every = fitted.read(value, SENTENCE, shares[:, None]), fitted.read(judged, SENTENCE, shares[:, None])
    best_right, weak = top[:, 0], confidence[:, 0] < fitted.threshold(SENTENCE, ranked.shape[1])
    many, few = right.sum(axis=1) >= COMMON_BINS[0], right.sum(axis=1) <= COMMON_BINS[1]
    bins = {f">={COMMON_BINS[0]}": many, f"{COMMON_BINS[1] + 1}-{COMMON_BINS[0] - 1}": ~many & ~few,
            f"<={COMMON_BINS[1]}": few}
    return {"queries": len(right), **reliability(confidence, top), "best_right": float(best_right.mean()),
            "all_pairs_ece": reliability(every, right)["ece"], "log_loss": log_loss(every, right),
            "log_loss_length_curve": log_loss(fitted.curve(judged), right),
            "no_good_match": float(weak.mean()),
            "no_good_match_over_right_best": float((weak & best_right).sum() / max(best_right.sum(), 1)),
            "by_commonness": {name: {"queries": int(rows.sum()), "top_confidence": float(confidence[rows].mean()),
                                     "top_right": float(top[rows].mean()),
                                     "pairs_confidence": float(every[rows].mean()),
                                     "pairs_right": float(right[rows].mean())}
                              for name, rows in bins.items() if rows.any()}}


def log_loss(confidence: np.ndarray, right: np.ndarray) -> float:
    """The mean log loss of ``confidence`` (clipped to [1e-6, 1 - 1e-6]) for ``right``."""
    p = np.clip(confidence, 1e-6, 1 - 1e-6)
    return float(-np.mean(np.where(right, np.log(p), np.log1p(-p))))


def make_calibration(checkpoint, data: str, out: str | Path, split: str = "dev", hits: int = HITS, seed: int = 0,
                     features: Path | None = None, device: str | None = None, progress: bool = True,
                     text_encoder: str = "float32", **data_options) -> dict:
    """Calibrate ``checkpoint``'s confidence on ``data``'s ``split`` and save the model with it in the run folder
    ``out`` (``out/best/``; ``out`` new, or the checkpoint's own run folder); return the report (also
    ``out/calibration.json``, beside the model, never in it). ``text_encoder``: whose scores are fitted, "float32"
    MiniLM's (the model's calibration, which int8 and static read too) or the model's "student" text encoder's (its
    own: ``model.student_text.calibration``, the model's left as it is)."""
    directory, best = derived_run(checkpoint, out)
    out = Path(out)
    if hits < 1:
        raise ConfigError(f"hits must be at least 1, got {hits}")
    if text_encoder not in CALIBRATED:
        raise ConfigError(f"a calibration is fitted on the scores of {' or '.join(CALIBRATED)} (int8 and static "
                          f"read float32's), not {text_encoder!r}")
    model = load_model(directory)
    model.use_text_encoder(text_encoder)  # (ConfigError for a model without a student)
    if model.search_mode.relative:
        raise ConfigError(f"model {model.name!r} fuses its experts by rank or normalised scores: a score means "
                          "nothing outside the videos it was ranked among, so it cannot be calibrated")
    source, _ = DatasetSource.open(data, features, **data_options)
    split = source.check_split(split)
    dev = resolve_device(device)
    model = model.to(dev)
    pairs = model_pairs(model, source, split, str(dev), progress)
    (ranked, scores), short = search_scores(model, pairs)
    commonness = None
    if TRAINING_SPLIT in source.dataset.splits() and split != TRAINING_SPLIT:
        commonness = Commonness.of([item.captions for item in source.dataset.items(TRAINING_SPLIT)])
    else:
        log.warning("%s has no split %r apart from %r: the confidence cannot say how common a query is",
                    source.label, TRAINING_SPLIT, split)
    calibration, report = fit_calibration(model, scores, np.asarray(pairs.cap2vid), f"{source.label}:{split}", hits,
                                          seed, short, ranked, commonness)
    if text_encoder == STUDENT:
        model.student_text.calibration = calibration
    else:
        model.calibration = calibration
    model.to("cpu").save(best)
    report["model"], report["text_encoder"] = str(checkpoint), text_encoder
    atomic_write_json(out / REPORT_FILE, report)
    return report


def report_text(report: dict, out: str | Path) -> str:
    """:func:`make_calibration`'s report in a few lines: the data, the held-out reliability, the threshold."""
    held, low = report["held_out"], report["no_good_match"]
    lines = [f"calibrated on {report['queries']} queries x {report['videos']} videos of {report['data']} "
             f"({report.get('text_encoder', 'float32')} text encoder): {len(report['curve']['score'])} knots",
             f"held-out ({held['held_queries']} queries, their top {report['hits']}): expected calibration error "
             f"{held['ece']:.3f}",
             "  confidence   hits  mean conf  right"]
    lines += [f"  {b['bin'][0]:.1f}-{b['bin'][1]:.1f}  {b['hits']:7d}  {b['confidence']:9.3f}  {b['right']:.3f}"
              for b in held["bins"]]
    lines.append(f"no good match (best hit below {low['threshold']:.4f}): {100 * low['share_of_queries']:.1f}% of "
                 "queries")
    lines.append("per query length (held out, all videos): words  queries  thresholds (libraries of "
                 f"{'/'.join(next(iter(report['lengths'].values()))['thresholds'])})  ECE top / all pairs  best right"
                 "  no good match over a right best")
    for n, entry in report.get("lengths", {}).items():
        for what, row in entry.items():
            if isinstance(row, dict) and "queries" in row:
                cuts = "/".join(f"{t:.4f}" for t in entry["thresholds"].values())
                lines.append(f"  {n:>3} {what:13s}  {row['queries']:6d}  {cuts}  {row['ece']:.3f} / "
                             f"{row['all_pairs_ece']:.4f}  {row['best_right']:10.3f}  "
                             f"{100 * row['no_good_match_over_right_best']:5.1f}%")
    lines.append("log loss of every held-out pair, this calibration / its length's curve alone; its top hits' mean "
                 "confidence / share right by the queries' right videos (common, between, rare)")
    for n, entry in report.get("lengths", {}).items():
        row = entry.get("short_queries")
        if row is not None and "log_loss" in row:
            lines.append(f"  {n:>3} {row['log_loss']:.5f} / {row['log_loss_length_curve']:.5f}  " + "  ".join(
                f"{name}: {b['top_confidence']:.3f} / {b['top_right']:.3f} ({b['queries']})"
                for name, b in row["by_commonness"].items()))
    lines.append('"no good match" per library size, each half held out in turn (fit on the other): over a right best '
                 "hit, a wrong one, no right video in the library")
    for n, entry in report.get("lengths", {}).items():
        for what, sizes in entry.get("both_halves", {}).items():
            lines.append(f"  {n:>3} {what:13s}  " + "  ".join(
                f"{size}: {100 * row['no_good_match_over_right_best']:4.1f}% / "
                f"{100 * row['no_good_match_over_wrong_best']:4.1f}% / "
                + (f"{100 * row['no_good_match_when_none_right']:4.1f}%" if row["none_right"] else "  -  ")
                for size, row in sizes.items()))
    for n, row in report.get("negative_terms", {}).items():
        lines.append(f"negative terms of {n} word(s) (held out, {row['held_terms']} terms): removes "
                     f"{100 * row['photos_showing_removed']:.1f}% of the photos showing them, "
                     f"{100 * row['other_photos_removed']:.2f}% of the others")
    lines.append(f"saved: {Path(out) / 'best'} (report: {Path(out) / REPORT_FILE})")
    return "\n".join(lines)
