"""Cost of the speech and on-screen-text cues: wall and CPU seconds per minute of video, and what OCR's frame
selection saves.

    .venv/bin/python benchmarks/bench_cues.py [--minutes 1] [--threads 1,2] [--repeat 1] [--json OUT]
    .venv/bin/python benchmarks/bench_cues.py --change-scores        # the measurement behind the change threshold
    .venv/bin/python benchmarks/bench_cues.py --weights              # keyword vs meaning weights (Flickr8k dev, clips)

Builds (once, in a temporary folder) two generated videos of ``--minutes`` each with reelsearch.datasets.cue_clips:
real Flickr8k photos, espeak-ng speech most of the time, and on-screen text — a caption band over the pictures every
20 s and a full-frame slide held for 8 s every 20 s. ``moving``: the photos zoom slowly (every sampled frame
differs, as with a hand-held camera); ``still``: the photos are still (a tripod, a screen recording, a lecture). For
each thread count it times, after loading the models: speech (decode + VAD + Whisper tiny.en int8) and OCR at one
frame a second with and without frame selection, and both cues of a file at once on one thread each (``parallel``),
and reports wall and CPU seconds per minute of video, frames read, and how many of the script's words / text lines
were recovered. Needs ../shared/data (Flickr8k), espeak-ng and the speech and ocr extras. Note the machine load
(``uptime``) beside the numbers: the CPU is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
IMAGES = SHARED / "flickr8k" / "images"

SENTENCES = [
    "Good evening and welcome to the programme.",
    "First, preheat the oven to two hundred degrees.",
    "Then mix the flour and the sugar in a large bowl.",
    "Tomorrow expect heavy rain in the north and strong winds along the coast.",
    "Plants turn sunlight into chemical energy.",
    "And the striker scores a brilliant goal in the final minute!",
    "The old tram climbs slowly through the narrow streets.",
    "Let's move the product launch to the second week of March.",
    "Our sales grew in every region except the south.",
    "Please remember to switch off your phones during the talk.",
]
CAPTIONS = [("Welcome to Lisbon",), ("Live from the stadium",), ("Breaking news",), ("Chef Maria Lopez",)]
SLIDES = [("Quarterly revenue", "up 12% in 2024"), ("Photosynthesis", "light + water + CO2"),
          ("Agenda", "1. launch date", "2. hiring plan")]
PHOTOS = ["1679557684_50a206e4a9", "3582685410_05315a15b8", "269650644_059a84ece5", "3364715316_df8c20bac1",
          "2596619849_7b635dd310", "2659183350_730951f740", "537222436_ab406234ce", "3420469425_2980b4cd30"]


def long_clip(clip_id: str, minutes: float, zoom: float):
    """A clip of ``minutes``: speech back to back (1 s pauses), a caption every 10 s, an 8 s slide every 20 s."""
    from reelsearch.datasets.cue_clips import CueClip, OnScreenText, Utterance, speech_seconds

    duration = 60.0 * minutes
    speech, t, i = [], 0.5, 0
    while True:
        text = SENTENCES[i % len(SENTENCES)]
        length = speech_seconds(text)
        if t + length > duration - 0.5:
            break
        speech.append(Utterance(text, round(t, 2)))
        t, i = t + length + 1.0, i + 1
    texts = []
    for k, start in enumerate(range(0, int(duration) - 9, 10)):
        if k % 2 == 0:
            texts.append(OnScreenText(CAPTIONS[k // 2 % len(CAPTIONS)], start + 1.0, start + 5.0, "bottom"))
        else:
            texts.append(OnScreenText(SLIDES[k // 2 % len(SLIDES)], start + 1.0, start + 9.0, "slide"))
    n_photos = max(1, int(duration // 15))
    photos = tuple(PHOTOS[j % len(PHOTOS)] for j in range(n_photos))
    return CueClip(clip_id, photos, tuple(speech), tuple(texts), duration=duration, zoom=zoom)


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def recall_words(spoken: str, segments) -> float:
    said = words(spoken)
    heard = words(" ".join(s.text for s in segments))
    return len(said & heard) / max(len(said), 1)


def lines_read(clip, segments) -> float:
    shown = {" ".join(line.lower().split()) for t in clip.texts for line in t.lines}
    read = {" ".join(s.text.lower().split()) for s in segments}
    return sum(any(line == r or line in r for r in read) for line in shown) / max(len(shown), 1)


def timed(fn, repeat: int):
    """(wall seconds, CPU seconds of this process, result) of the fastest of ``repeat`` runs."""
    best, out = (float("inf"), 0.0), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
    return best[0], best[1], out


def bench(minutes: float, threads: list[int], repeat: int) -> list[dict]:
    from reelsearch.datasets.cue_clips import make_clip
    from reelsearch.features.cues import CueExtractor
    from reelsearch.features.ocr import TextReader
    from reelsearch.features.speech import SpeechRecognizer

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clips = [long_clip(f"{kind}", minutes, zoom) for kind, zoom in (("moving", 0.05), ("still", 0.0))]
        paths = {c.id: make_clip(c, tmp, IMAGES) for c in clips}
        for n in threads:
            speech = SpeechRecognizer(threads=n)
            speech.transcribe_wave(np.zeros(16000, "float32"))  # load the model outside the timing
            readers = {sel: TextReader(threads=n, select=sel) for sel in (True, False)}
            for r in readers.values():
                r.engine  # noqa: B018 - load the models outside the timing
            for clip in clips:
                path = paths[clip.id]
                t_speech, c_speech, segs = timed(lambda p=path, s=speech: s.extract(p)[0], repeat)
                row = {"video": clip.id, "threads": n, "minutes": minutes,
                       "speech_s_per_min": round(t_speech / minutes, 2),
                       "speech_cpu_s_per_min": round(c_speech / minutes, 2),
                       "speech_words_recalled": round(recall_words(clip.spoken, segs), 3)}
                for sel, reader in readers.items():
                    t_ocr, c_ocr, (ocr_segs, stats) = timed(lambda p=path, r=reader: r.extract(p), repeat)
                    key = "ocr_selected" if sel else "ocr_every_frame"
                    row[key] = {"s_per_min": round(t_ocr / minutes, 2), "cpu_s_per_min": round(c_ocr / minutes, 2),
                                "frames": stats["frames"],
                                "read": stats["read"], "lines_read": round(lines_read(clip, ocr_segs), 3),
                                "segments": len(ocr_segs)}
                row["ocr_saving"] = round(1 - row["ocr_selected"]["s_per_min"] / row["ocr_every_frame"]["s_per_min"],
                                          3)
                if n == 1:  # both cues of the file at once, one thread each: the two cores busy
                    both = CueExtractor(speech, readers[True], parallel=True)
                    t_both, _, _ = timed(lambda p=path, b=both: b.extract(p), repeat)
                    row["both_cues_parallel_s_per_min"] = round(t_both / minutes, 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def change_scores() -> dict:
    """The frame-change test's scores: pairs of still frames with the same content (codec noise only), the same
    frames with text appearing (caption bands, slides, small subtitles without a band), and real MSR-VTT video."""
    import itertools

    import cv2

    from reelsearch.datasets.cue_clips import CUE_SCRIPTS, make_clip
    from reelsearch.features.ocr import CHANGE_DELTA, THUMB_SHORT_SIDE, frame_change, grey_thumbnail
    from reelsearch.media.decode import decode_frames

    def subtitle(img, text, scale):
        out = img.copy()
        (tw, _), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 2)
        org = ((out.shape[1] - tw) // 2, out.shape[0] - 20)
        cv2.putText(out, text, org, cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 4, cv2.LINE_AA)
        cv2.putText(out, text, org, cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 2, cv2.LINE_AA)
        return out

    import dataclasses

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        still = [dataclasses.replace(c, zoom=0.0, audio=False) for c in CUE_SCRIPTS]
        frames = {c.id: decode_frames(make_clip(c, tmp, IMAGES), "interval:1.0", short_side=480) for c in still}
        real = [decode_frames(p, "interval:1.0", short_side=480)
                for p in sorted((SHARED / "msrvtt" / "clips").glob("*.mp4"))]
        for delta in (12, 24, 32):
            same, text, small, moving = [], [], [], []
            for c in still:
                fr = frames[c.id]
                th = [grey_thumbnail(im, THUMB_SHORT_SIDE) for im in fr.images]
                state = [tuple(i for i, x in enumerate(c.texts) if x.start <= t < x.end) for t in fr.timestamps]
                for i, j in itertools.combinations(range(len(th)), 2):
                    (same if state[i] == state[j] else text).append(frame_change(th[i], th[j], delta))
                for word, scale in (("OK", 0.8), ("Lisbon", 0.6), ("2024", 0.6), ("see you tomorrow", 0.6)):
                    small.append(frame_change(th[0], grey_thumbnail(subtitle(fr.images[0], word, scale)), delta))
            for fr in real:
                th = [grey_thumbnail(im, THUMB_SHORT_SIDE) for im in fr.images]
                moving += [frame_change(a, b, delta) for a, b in zip(th, th[1:])]
            rng = np.random.default_rng(0)  # sensor noise: the same frame twice, each with noise of sd 10 levels
            noisy = [frame_change(*(grey_thumbnail(np.clip(fr.images[0] + rng.normal(0, 10, fr.images[0].shape), 0,
                                                           255).astype(np.uint8)) for _ in range(2)), delta)
                     for fr in frames.values()]
            out[f"delta={delta}"] = {
                "same_content_max": round(max(same), 5), "noise_sd10_max": round(max(noisy), 5),
                "text_change_min": round(min(text), 5),
                "small_subtitle_min": round(min(small), 5), "real_video_consecutive_min": round(min(moving), 4),
                "real_video_consecutive_median": round(float(np.median(moving)), 4)}
        out["current"] = {"thumb_short_side": THUMB_SHORT_SIDE, "delta": CHANGE_DELTA}
    return out


WEIGHTINGS = {"keyword only": (1.0, 0.0), "meaning only": (0.0, 1.0), "1 : 1": (1.0, 1.0), "2 : 1": (2.0, 1.0),
              "1 : 2": (1.0, 2.0)}


def _rank_rows(index, queries, ids, cues) -> dict[str, np.ndarray]:
    """weighting -> rank of each query's target video (1 = first; ties count against the target)."""
    from reelsearch.scoring.fusion import score_fusion
    from reelsearch.search.cues import cue_score

    ranks = {name: [] for name in WEIGHTINGS}
    for query, target in queries:
        sc = index.scores(query, ids, cues=cues)
        t = ids.index(target)
        for name, w in WEIGHTINGS.items():
            total = np.asarray(score_fusion([cue_score(sc, cue, w, floor=0.0)[None, :] for cue in cues]))[0]
            ranks[name].append(1 + int(np.sum(np.delete(total, t) >= total[t])))
    return {name: np.asarray(r) for name, r in ranks.items()}


def _summary(ranks: np.ndarray) -> dict:
    return {"queries": len(ranks), "R@1": round(float(np.mean(ranks == 1)), 3),
            "R@5": round(float(np.mean(ranks <= 5)), 3), "MRR": round(float(np.mean(1.0 / ranks)), 3)}


def _rare_words(caption: str, df) -> str:
    """The 3 consecutive words of ``caption`` that are rarest by document frequency ``df`` (a Counter): an
    exact-words query, as a person quoting what was said."""
    tokens = re.findall(r"[a-z]+", caption.lower())
    if len(tokens) <= 3:
        return caption
    best = max(range(len(tokens) - 2), key=lambda i: sum(1.0 / (1 + df[t]) for t in tokens[i:i + 3]))
    return " ".join(tokens[best:best + 3])


def weights_quality(n_images: int = 1000) -> dict:
    """Recall and MRR per (keyword, meaning) weighting of a cue's two scores, on two sets:

    * ``captions``: Flickr8k dev, each image a "video" whose transcript is 4 of its 5 human captions, among
      ``n_images`` videos; ``paraphrase`` queries are the 5th caption (other words, same meaning), ``exact words``
      queries the 3 rarest consecutive words of the first caption (quoting what was said);
    * ``cue clips``: the CUE_SCRIPTS clips, extracted for real (speech + OCR), with their exact and paraphrased
      queries (small and easy: a check, not a ranking of weightings).
    """
    from collections import Counter

    from reelsearch.datasets import load_dataset
    from reelsearch.datasets.cue_clips import CUE_SCRIPTS, make_clips
    from reelsearch.features.cues import CueExtractor, CueResult, CueSegment
    from reelsearch.index.embedded.textcues import EmbeddedTextCues
    from reelsearch.text.sentences import sentence_encoder

    out: dict = {}
    dev = load_dataset("flickr8k", SHARED / "flickr8k").items("dev")[:n_images]
    with tempfile.TemporaryDirectory() as tmp:
        with EmbeddedTextCues(Path(tmp) / "captions", encoder=sentence_encoder) as index:
            for item in dev:
                segs = [CueSegment("speech", 2.0 * i, 2.0 * i + 2.0, c, 1.0) for i, c in enumerate(item.captions[:4])]
                index.put(item.id, {"speech": CueResult("speech", segs, recipe="captions")})
            ids = [item.id for item in dev]
            ranks = _rank_rows(index, [(item.captions[4], item.id) for item in dev], ids, ["speech"])
            out["captions, paraphrase"] = {name: _summary(r) for name, r in ranks.items()}
            df = Counter(w for it in dev for c in it.captions[:4] for w in words(c))
            ranks = _rank_rows(index, [(_rare_words(item.captions[0], df), item.id) for item in dev], ids, ["speech"])
            out["captions, exact words"] = {name: _summary(r) for name, r in ranks.items()}
        paths = make_clips(CUE_SCRIPTS, tmp, IMAGES)
        with EmbeddedTextCues(Path(tmp) / "clips", encoder=sentence_encoder) as index:
            index.update([(c.id, p, None) for c, p in zip(CUE_SCRIPTS, paths)], CueExtractor(), progress=False)
            ids = [c.id for c in CUE_SCRIPTS]
            for group in ("exact", "paraphrase"):
                queries = [(q, c.id) for c in CUE_SCRIPTS for kind, q in c.queries.items()
                           if kind != "visual" and ("paraphrase" in kind) == (group == "paraphrase")]
                ranks = _rank_rows(index, queries, ids, ["speech", "ocr"])
                out[f"cue clips, {group}"] = {name: _summary(r) for name, r in ranks.items()}
    for group, rows in out.items():
        for name, row in rows.items():
            print(f"{group:24} {name:14} {json.dumps(row)}", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (2 = both cores)")
    ap.add_argument("--repeat", type=int, default=1, help="best of this many runs")
    ap.add_argument("--change-scores", action="store_true", help="measure the frame-change test instead")
    ap.add_argument("--weights", action="store_true", help="measure keyword vs meaning weightings instead")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if not IMAGES.is_dir():
        sys.exit(f"needs the Flickr8k images in {IMAGES} (set REELSEARCH_SHARED_DATA)")
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    if args.change_scores:
        result = change_scores()
        print(json.dumps(result, indent=2))
    elif args.weights:
        result = weights_quality()
    else:
        result = bench(args.minutes, [int(x) for x in args.threads.split(",")], args.repeat)
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
