"""``reelsearch index`` with the default cues (speech and on-screen text) of a generated slideshow with text, for
several source trees side by side: CPU seconds (the process, every thread), wall seconds and video frames decoded.

    python benchmarks/bench_decode_once.py --trees base:/tmp/base/src,new:src --seconds 180 --out /tmp/decode-once

The slideshow (``reelsearch.datasets.cue_clips``): Flickr8k dev photos, one every 10 s, each with a caption band
from its second 1 to 9 (every third one a full-frame slide instead), a spoken sentence over each, 1280x720 H.264.
Each tree indexes it into a fresh embedded index in a process of its own (``Searcher(...).index(cues=("speech",
"ocr"))``), the trees taking turns ``--repeat`` times; results in docs/benchmarks.md ("One decode pass").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLICKR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "flickr8k"  # ../shared of the checkout


def make_slideshow(seconds: int, out: Path, zoom: float) -> Path:
    from reelsearch.datasets.cue_clips import CueClip, OnScreenText, Utterance, make_clips

    shots = max(1, seconds // 10)
    photos = tuple(p[:-4] for p in (FLICKR / "dev.txt").read_text().split()[:shots])
    texts = tuple(OnScreenText((f"Chapter {i + 1}: slide {i + 1} of {shots}", f"budget line {100 + 7 * i}"),
                               10.0 * i + 1, 10.0 * i + 9, "slide" if i % 3 == 2 else "bottom") for i in range(shots))
    speech = tuple(Utterance(f"This is part {i + 1}, about the picture on screen.", 10.0 * i + 1)
                   for i in range(shots))
    clip = CueClip(f"slideshow-{seconds}s-zoom{zoom:g}", photos, speech, texts, duration=10.0 * shots, zoom=zoom)
    return make_clips([clip], out, FLICKR / "images", size=(1280, 720))[0]


def worker(video: str, scratch: str) -> dict:
    """Index ``video`` with both cues in a fresh index under ``scratch`` (this process's tree)."""
    import reelsearch
    from reelsearch.media.timeline import FrameStream
    from reelsearch.search import Searcher

    decoded = {"frames": 0, "passes": 0}
    frames = FrameStream._frames

    def counted(self):
        decoded["passes"] += 1
        for frame in frames(self):
            decoded["frames"] += 1
            yield frame

    FrameStream._frames = counted
    with Searcher(Path(scratch) / "index", "default") as searcher:
        wall, cpu = time.perf_counter(), time.process_time()
        report = searcher.index([video], progress=False, cues=("speech", "ocr"))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        ocr = searcher.cues.segments(searcher.catalog.find(video), ["ocr"])
    assert not report.failed and not report.cues.failed, (report.failed, report.cues.failed)
    return {"tree": os.path.dirname(reelsearch.__file__), "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
            "load": round(os.getloadavg()[0], 1), "decoded_frames": decoded["frames"],
            "decode_passes": decoded["passes"], "ocr_segments": len(ocr),
            "ocr_texts": sorted({(s.text, s.start, s.end) for s in ocr}),
            "cue_seconds": {k: round(v, 1) for k, v in report.cues.seconds.items()}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trees", default="new:src", help="LABEL:SRC,... (each tree's src folder)")
    p.add_argument("--seconds", type=int, default=180)
    p.add_argument("--zoom", type=float, default=0.0, help="each shot's zoom (0: still slides)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "decode-once")
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", nargs=2, metavar=("VIDEO", "SCRATCH"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(*a.worker)))
        return
    a.out.mkdir(parents=True, exist_ok=True)
    video = make_slideshow(a.seconds, a.out, a.zoom)
    rows = []
    for _ in range(a.repeat):
        for label, src in (t.split(":", 1) for t in a.trees.split(",")):
            with tempfile.TemporaryDirectory(dir=a.out) as scratch:
                env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
                done = subprocess.run([sys.executable, __file__, "--worker", str(video), scratch], env=env,
                                      check=True, capture_output=True, text=True)
            row = {"label": label, "video_s": a.seconds, "zoom": a.zoom, **json.loads(done.stdout.splitlines()[-1])}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "ocr_texts"}), flush=True)
    same = len({json.dumps(r["ocr_texts"]) for r in rows}) == 1
    print(f"on-screen text the same in every run: {same}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
