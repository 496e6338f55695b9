"""Calibrating a model's confidence on development queries (`reelsearch calibrate`); the curve and its checks are
``reelsearch.evaluation.calibration``, the model-folder part ``reelsearch.models.parts.Calibration``.

Each caption of the split is a query over all the split's videos, scored as a search ranks them (the model's fused
score, the querybank's offset subtracted); its top ``hits`` are labelled right when the caption describes them.
The saved curve is fitted on every query; the report adds a held-out check: the split's videos cut in two halves
(``seed``), the curve fitted on the captions of one half and measured on the captions of the other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reelsearch.errors import ConfigError
from reelsearch.evaluation.calibration import HITS, halves, isotonic, reliability, top_hits
from reelsearch.features.caches import DatasetSource
from reelsearch.io import atomic_write_json
from reelsearch.models import load_model
from reelsearch.models.checkpoint import derived_run
from reelsearch.models.parts import Calibration
from reelsearch.scoring.calibration import NO_GOOD_MATCH
from reelsearch.training.run import model_pairs, resolve_device

REPORT_FILE = "calibration.json"
BATCH = 512


def search_scores(model, pairs) -> np.ndarray:
    """[captions x videos] scores of ``pairs`` as a search ranks videos: fused, minus the querybank's offsets."""
    text = model.encode_text(pairs.captions, BATCH, cached=True)
    video = model.encode_video(pairs.video_items(), batch_size=BATCH)
    scores = np.asarray(model.fuse(model.expert_scores(text, video), axis=1), np.float64)
    bank = getattr(model, "querybank", None)
    return scores if bank is None else bank.normalise(scores, model.ann_query(text), video.video)[0]


def fit_calibration(model, scores: np.ndarray, cap2vid: np.ndarray, source: str, hits: int = HITS,
                    seed: int = 0) -> tuple[Calibration, dict]:
    """(the Calibration fitted on every caption's top ``hits`` of ``scores``, the report: the curve, a held-out
    reliability table, and how often the best hit falls below ``NO_GOOD_MATCH``)."""
    relevant = cap2vid[:, None] == np.arange(scores.shape[1])[None, :]
    hit_scores, right = top_hits(scores, relevant, hits)
    bank = getattr(model, "querybank", None)
    calibration = Calibration(isotonic(hit_scores, right), model.fingerprint(),
                              bank.digest() if bank is not None else None, source, hit_scores.shape[1], len(scores))
    fit_videos, held_videos = halves(scores.shape[1], seed)
    fit, held = np.isin(cap2vid, fit_videos), np.isin(cap2vid, held_videos)
    half_curve = isotonic(hit_scores[fit], right[fit])
    held_conf = half_curve(hit_scores[held])
    best = calibration(hit_scores[:, 0])
    below = best < NO_GOOD_MATCH
    report = {
        "data": source, "queries": len(scores), "videos": scores.shape[1], "hits": hit_scores.shape[1],
        "curve": {"score": calibration.curve.score.tolist(), "right": calibration.curve.right.tolist()},
        "held_out": {"fit_queries": int(fit.sum()), "held_queries": int(held.sum()),
                     **reliability(held_conf, right[held]),
                     "uncalibrated_score_rank1_right": float(right[held, 0].mean())},
        "no_good_match": {"threshold": NO_GOOD_MATCH, "share_of_queries": float(below.mean()),
                          "best_right_when_below": float(right[below, 0].mean()) if below.any() else None,
                          "best_right_when_above": float(right[~below, 0].mean()) if (~below).any() else None},
    }
    return calibration, report


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
    scores = search_scores(model, pairs)
    model.calibration, report = fit_calibration(model, scores, np.asarray(pairs.cap2vid), f"{source.label}:{split}",
                                                hits, seed)
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
    lines.append(f"saved: {Path(out) / 'best'} (report: {Path(out) / REPORT_FILE})")
    return "\n".join(lines)
