"""Calibrating a model's confidence on development queries (`reelsearch calibrate`); the curve and its checks are
``reelsearch.evaluation.calibration``, the model-folder part ``reelsearch.models.parts.Calibration``.

Each caption of the split is a query over all the split's videos, scored as a search ranks them (the model's fused
score, the querybank's offset subtracted for queries of four words or more: ``reelsearch.scoring.calibration.banked``);
its top ``hits`` are labelled right when the caption describes them.
The saved curve is fitted on every query; the report adds a held-out check: the split's videos cut in two halves
(``seed``), the curve fitted on the captions of one half and measured on the captions of the other.

Queries of one to three words get curves of their own (``reelsearch.scoring.calibration.LENGTHS``): fitted the same
way on the short queries derived from the split's captions (``reelsearch.evaluation.short_queries``: each once, right
for every video a caption of which holds its words), held out by cutting those queries in two halves. The curve of
four words or more is fitted on the captions and the derived queries of that length together.
The report gives, per length, the held-out reliability and how often "no good match" is said over a right best hit.

A negative term (``-dog``) removes the photos that more likely show it than not: per length of one to three words, a
curve from a photo's score for a term to the share of photos at that score that show it, fitted on every photo's
score for the derived short queries that at least :data:`TERM_PHOTOS` photos show (terms common enough to exclude),
held out by halves of those terms; the report says how many photos showing a held-out term it removes, how many
others, and what that does to the top 10 of the short queries of two or three words.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError
from reelsearch.evaluation.calibration import HITS, halves, isotonic, reliability, top_hits
from reelsearch.evaluation.short_queries import relevance, short_queries
from reelsearch.features.caches import DatasetSource
from reelsearch.io import atomic_write_json
from reelsearch.models import load_model
from reelsearch.models.checkpoint import derived_run
from reelsearch.models.parts import Calibration
from reelsearch.scoring.calibration import LENGTHS, NEGATIVE_CONFIDENCE, NO_GOOD_MATCH, SENTENCE, banked, query_length
from reelsearch.training.run import model_pairs, resolve_device

REPORT_FILE = "calibration.json"
BATCH = 512
#: The photos a development short query must be right for to count as a term (negative-term curves).
TERM_PHOTOS = 20


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
    """(the [captions x videos] scores of ``pairs`` as a search ranks videos and as a confidence reads them
    (``_scores``); the short queries derived from the captions, scored so)."""
    video = model.encode_video(pairs.video_items(), batch_size=BATCH)
    queries = list(dict.fromkeys(q for c in pairs.captions for q in short_queries(c)))
    cap2vid = np.asarray(pairs.cap2vid)
    ranked, judged = _scores(model, queries, video, False)
    return _scores(model, pairs.captions, video), ShortQueries(  # (the captions' token features are cached)
        queries, ranked, relevance(queries, pairs.captions, cap2vid, len(video.video)), judged)


def _scores(model, texts, video, cached: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """([texts x videos] as a search ranks videos: the fused score, less the querybank's offsets of the videos for
    the texts of a length the bank normalises (``reelsearch.scoring.calibration.banked``); as a confidence reads
    them: less the offsets for every text)."""
    text = model.encode_text(texts, BATCH, cached=cached)
    scores = np.asarray(model.fuse(model.expert_scores(text, video), axis=1), np.float64)
    bank = getattr(model, "querybank", None)
    if bank is None:
        return scores, scores
    judged = scores - bank.video_offsets(video.video)[None, :]
    rows = np.array([banked(query_length(t)) for t in texts], bool)
    return np.where(rows[:, None], judged, scores), judged


def fit_calibration(model, scores: np.ndarray, cap2vid: np.ndarray, source: str, hits: int = HITS,
                    seed: int = 0, short: ShortQueries | None = None,
                    ranked: np.ndarray | None = None) -> tuple[Calibration, dict]:
    """(the Calibration fitted per length on the top ``hits`` of the captions' ``scores`` (four words or more; the
    hits are the top of ``ranked`` where a search ranks by other scores than a confidence reads) and of the ``short``
    queries of that length (module docstring), the report: the captions' curve, a held-out
    reliability table of the captions, how often their best hit falls below ``NO_GOOD_MATCH``, and per length
    (``lengths``) its curve and the held-out checks of captions and short queries: reliability, and how often a right
    best hit is called no good match)."""
    relevant = cap2vid[:, None] == np.arange(scores.shape[1])[None, :]
    hit_scores, right = top_hits(scores if ranked is None else ranked, relevant, hits, scores)
    fit_videos, held_videos = halves(scores.shape[1], seed)
    fit, held = np.isin(cap2vid, fit_videos), np.isin(cap2vid, held_videos)
    # per length: (hits, right) of its queries, all of them and the fit and held-out halves
    groups = {SENTENCE: [("captions", hit_scores, right, fit, held)]}
    if short is not None:
        short_hits, short_right = top_hits(short.scores, short.relevant, hits, short.judged)
        for n in LENGTHS:
            sel = np.flatnonzero(short.lengths == n)
            if len(sel):
                a, b = (np.isin(np.arange(len(sel)), h) for h in halves(len(sel), seed))
                groups.setdefault(n, []).append(("short_queries", short_hits[sel], short_right[sel], a, b))
    curves, lengths = {}, {}
    for n, parts in groups.items():
        curves[n] = _pooled([(h, r) for _, h, r, _, _ in parts])
        half, other = (_pooled([(h[a], r[a]) for _, h, r, a, _ in parts]),
                       _pooled([(h[b], r[b]) for _, h, r, _, b in parts]))
        lengths[n] = {"curve": {"score": curves[n].score.tolist(), "right": curves[n].right.tolist()},
                      **{what: _checked(half(h[b]), r[b]) for what, h, r, _, b in parts}}
        banners = {what: _banners(half(h[b]), r[b]) + _banners(other(h[a]), r[a]) for what, h, r, a, b in parts}
        if len(parts) > 1:  # four words or more: captions and derived queries folded
            banners["together"] = sum(banners.values())
        lengths[n]["both_halves"] = {what: {"right_best": int(c[1]), "no_good_match": int(c[0]),
                                            "no_good_match_over_right_best": float(c[0] / max(c[1], 1))}
                                     for what, c in banners.items()}
    terms, term_report = _term_curves(short, seed) if short is not None else ({}, {})
    bank = getattr(model, "querybank", None)
    calibration = Calibration(curves.pop(SENTENCE), model.fingerprint(), bank.digest() if bank is not None else None,
                              source, hit_scores.shape[1], len(scores), curves, terms)
    held_conf = _pooled([(h[a], r[a]) for _, h, r, a, _ in groups[SENTENCE]])(hit_scores[held])
    below = calibration(hit_scores[:, 0]) < NO_GOOD_MATCH
    report = {
        "data": source, "queries": len(scores), "videos": scores.shape[1], "hits": hit_scores.shape[1],
        "curve": {"score": calibration.curve.score.tolist(), "right": calibration.curve.right.tolist()},
        "held_out": {"fit_queries": int(fit.sum()), "held_queries": int(held.sum()),
                     **reliability(held_conf, right[held]),
                     "uncalibrated_score_rank1_right": float(right[held, 0].mean())},
        "no_good_match": {"threshold": NO_GOOD_MATCH, "share_of_queries": float(below.mean()),
                          "best_right_when_below": float(right[below, 0].mean()) if below.any() else None,
                          "best_right_when_above": float(right[~below, 0].mean()) if (~below).any() else None},
        "lengths": lengths, "negative_terms": term_report,
    }
    return calibration, report


def _term_curves(short: ShortQueries, seed: int) -> tuple[dict, dict]:
    """({length: term curve}, the held-out report) of the negative terms (module docstring)."""
    common = short.relevant.sum(axis=1) >= TERM_PHOTOS
    base = np.flatnonzero(np.isin(short.lengths, ["2-3"]))
    tops = np.argsort(-short.scores[base], axis=1, kind="stable")[:, :HITS]
    base_words = [set(short.queries[q].split()) for q in base]
    curves, report = {}, {}
    for n in LENGTHS[:-1]:
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


def _pooled(parts: list[tuple[np.ndarray, np.ndarray]]):
    """The isotonic fit of several (hit scores, right) groups' hits together."""
    return isotonic(np.concatenate([h.ravel() for h, _ in parts]), np.concatenate([r.ravel() for _, r in parts]))


def _banners(confidence: np.ndarray, right: np.ndarray) -> np.ndarray:
    """[right best hits called no good match, right best hits] of held-out hits' ``confidence`` [Q, k]."""
    best = right[:, 0]
    return np.array([((confidence[:, 0] < NO_GOOD_MATCH) & best).sum(), best.sum()], np.int64)


def _checked(confidence: np.ndarray, right: np.ndarray) -> dict:
    """Held-out hits' check: the reliability table of ``confidence`` [Q, k] against ``right`` [Q, k], and how often
    the best hit is right, and called no good match when it is (``no_good_match_over_right_best``)."""
    best_right = right[:, 0]
    banner = (confidence[:, 0] < NO_GOOD_MATCH) & best_right
    return {"queries": len(right), **reliability(confidence, right), "best_right": float(best_right.mean()),
            "no_good_match": float((confidence[:, 0] < NO_GOOD_MATCH).mean()),
            "no_good_match_over_right_best": float(banner.sum() / max(best_right.sum(), 1))}


def make_calibration(checkpoint, data: str, out: str | Path, split: str = "dev", hits: int = HITS, seed: int = 0,
                     features: Path | None = None, device: str | None = None, progress: bool = True,
                     **data_options) -> dict:
    """Calibrate ``checkpoint``'s confidence on ``data``'s ``split`` and save the model with it in the run folder
    ``out`` (``out/best/``; ``out`` new, or the checkpoint's own run folder); return the report (also
    ``out/calibration.json``, beside the model, never in it)."""
    directory, best = derived_run(checkpoint, out)
    out = Path(out)
    if hits < 1:
        raise ConfigError(f"hits must be at least 1, got {hits}")
    model = load_model(directory)
    if model.search_mode.relative:
        raise ConfigError(f"model {model.name!r} fuses its experts by rank or normalised scores: a score means "
                          "nothing outside the videos it was ranked among, so it cannot be calibrated")
    source, _ = DatasetSource.open(data, features, **data_options)
    split = source.check_split(split)
    dev = resolve_device(device)
    model = model.to(dev)
    pairs = model_pairs(model, source, split, str(dev), progress)
    (ranked, scores), short = search_scores(model, pairs)
    model.calibration, report = fit_calibration(model, scores, np.asarray(pairs.cap2vid), f"{source.label}:{split}",
                                                hits, seed, short, ranked)
    model.to("cpu").save(best)
    report["model"] = str(checkpoint)
    atomic_write_json(out / REPORT_FILE, report)
    return report


def report_text(report: dict, out: str | Path) -> str:
    """:func:`make_calibration`'s report in a few lines: the data, the held-out reliability, the threshold."""
    held, low = report["held_out"], report["no_good_match"]
    lines = [f"calibrated on {report['queries']} queries x top {report['hits']} of {report['data']} "
             f"({report['videos']} videos): {len(report['curve']['score'])} knots",
             f"held-out ({held['held_queries']} queries): expected calibration error {held['ece']:.3f}",
             "  confidence   hits  mean conf  right"]
    lines += [f"  {b['bin'][0]:.1f}-{b['bin'][1]:.1f}  {b['hits']:7d}  {b['confidence']:9.3f}  {b['right']:.3f}"
              for b in held["bins"]]
    lines.append(f"no good match (best hit below {low['threshold']}): {100 * low['share_of_queries']:.1f}% of queries")
    lines.append("per query length (held out): words  queries  ECE    best right  no good match over a right best")
    for n, entry in report.get("lengths", {}).items():
        for what, row in entry.items():
            if what not in ("curve", "both_halves"):
                lines.append(f"  {n:>3} {what:13s}  {row['queries']:6d}  {row['ece']:.3f}  {row['best_right']:10.3f}  "
                             f"{100 * row['no_good_match_over_right_best']:5.1f}%")
    lines.append("no good match over a right best, each half held out in turn (fit on the other):")
    for n, entry in report.get("lengths", {}).items():
        for what, row in entry.get("both_halves", {}).items():
            lines.append(f"  {n:>3} {what:13s}  {row['no_good_match']:4d} of {row['right_best']:5d}  "
                         f"{100 * row['no_good_match_over_right_best']:5.1f}%")
    for n, row in report.get("negative_terms", {}).items():
        lines.append(f"negative terms of {n} word(s) (held out, {row['held_terms']} terms): removes "
                     f"{100 * row['photos_showing_removed']:.1f}% of the photos showing them, "
                     f"{100 * row['other_photos_removed']:.2f}% of the others")
    lines.append(f"saved: {Path(out) / 'best'} (report: {Path(out) / REPORT_FILE})")
    return "\n".join(lines)
