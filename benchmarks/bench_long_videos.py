"""Long videos: decode + CNN + segmenting speed, and how well the segments find the photo changes.

    .venv/bin/python benchmarks/bench_long_videos.py [--lengths 600,3600] [--size 1280x720] [--out DIR]
                     [--skip none|nonref] [--cnn both|lite0] [--json OUT]

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

TODO (issue 32, after the catalog stores segments): video R@1 and moment accuracy with the photos' captions as
queries, the same photos indexed as files beside the videos; that needs one catalog row per segment
(see docs/extraction.md, "Segments").

Needs ../shared/data (Flickr8k images and dev list, MSR-VTT clips). The machine is shared: the load average is
printed with each result.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

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


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default="600,3600", help="video lengths in seconds, comma-separated")
    p.add_argument("--size", default="1280x720")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "reelsearch-long-videos")
    p.add_argument("--skip", default="none", choices=["none", "nonref"], help="FrameStream's skip mode")
    p.add_argument("--cnn", default="both", choices=["both", "lite0"])
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    from reelsearch.models.recipes import recipe_pipeline

    size = tuple(int(v) for v in a.size.split("x"))
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
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
