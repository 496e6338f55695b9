"""Helpers shared by the search, service and web tests (no tests here): real media files made with PyAV/OpenCV,
small real models (untrained, from the registry), and the brute-force reference the searcher is checked against."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from typer.testing import CliRunner

from reelsearch.cli.main import app
from reelsearch.features.cues import CueResult, CueSegment
from reelsearch.index.embedded.textcues import EmbeddedTextCues
from reelsearch.text.sentences import sentence_encoder

CAPTIONS = ["a red car drives on the road", "green grass in a field", "the blue sea under a blue sky",
            "white snow falls at night", "a dark room with a lamp", "a yellow flower", "people dance on a stage"]

# (file name, [(rgb colour, seconds)]) — clips whose content changes over time so the best moment matters
CLIPS = {
    "red-green-blue.mp4": [((210, 30, 30), 1.0), ((30, 190, 40), 1.0), ((30, 40, 200), 1.0)],
    "white-black.mp4": [((245, 245, 245), 1.5), ((12, 12, 12), 1.5)],
    "yellow.mp4": [((230, 210, 20), 2.0)],
}
IMAGES = {"stage.png": (140, 40, 160), "sea.jpg": (20, 90, 200)}


def write_clip(path: Path, segments, fps: int = 10, size: tuple[int, int] = (96, 64), seed: int = 0) -> Path:
    """An H.264 MP4 of coloured segments with a moving bar and some noise (real encoding with PyAV)."""
    import av

    rng = np.random.default_rng(seed)
    w, h = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"g": "5"}  # keyframes every 5 frames: real seeking
        n = 0
        for colour, seconds in segments:
            for _ in range(round(fps * seconds)):
                img = np.clip(np.array(colour, np.float32) + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
                img[:, (n * 3) % w: (n * 3) % w + 4] = 255 - np.array(colour, np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    container.mux(packet)
                n += 1
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_image(path: Path, colour, size: tuple[int, int] = (80, 60), seed: int = 1) -> Path:
    import cv2

    rng = np.random.default_rng(seed)
    w, h = size
    img = np.clip(np.array(colour, np.float32) + rng.normal(0, 10, (h, w, 3)), 0, 255).astype(np.uint8)
    cv2.imwrite(str(path), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    return path


def taken(*ymd) -> float:
    """Seconds since the epoch of a UTC date."""
    return datetime(*ymd, tzinfo=UTC).timestamp()


#: (folder, file, taken): each file's time is its date (no EXIF, no container tag); the clip is 640x360, the photo
#: 800x600, larger than the stored 96 px thumbnails.
DATED_FILES = [("holiday", "red-green-blue.mp4", taken(2023, 7, 14)),
               ("holiday", "Beach photo.jpg", taken(2023, 8, 2)), ("work", "yellow.mp4", taken(2021, 3, 1)),
               ("work/old", "white-black.mp4", taken(2019, 5, 5)), ("My Trips", "stage.png", taken(2024, 1, 20))]


def dated_library(root: Path) -> list[Path]:
    """Write DATED_FILES under ``root``, each file's time its date; return their paths."""
    paths = []
    for i, (folder, name, when) in enumerate(DATED_FILES):
        (root / folder).mkdir(parents=True, exist_ok=True)
        if name.endswith(".mp4"):
            size = (640, 360) if i == 0 else (96, 64)
            p = write_clip(root / folder / name, [((210, 30, 30), 1.0), ((30, 190, 40), 1.0), ((30, 40, 200), 1.0)],
                           size=size, seed=i)
        else:
            p = write_image(root / folder / name, (20 + 40 * i, 90, 200), size=(800, 600) if i == 1 else (80, 60),
                            seed=i)
        os.utime(p, (when, when))
        paths.append(p)
    return paths


def add_transcripts(searcher, index) -> None:
    """Speech and on-screen text for two videos (what `index` stores when those cues run), so that /search fuses them
    and /videos/{id}/transcript has segments to return."""
    videos = searcher.catalog.videos()
    with EmbeddedTextCues(index, encoder=sentence_encoder) as cues:
        for v, said, shown in [(videos[0], "a red car drives on the road", "ROUTE 66"),
                               (videos[1], "the sea is calm today", "Lisbon")]:
            words = tuple((0.2 + 0.3 * i, 0.45 + 0.3 * i, w) for i, w in enumerate(said.split()))
            cues.put(v.id, {"speech": CueResult("speech", [CueSegment("speech", 0.2, 2.5, said, 0.9, words=words)],
                                                recipe="speech:test"),
                            "ocr": CueResult("ocr", [CueSegment("ocr", 1.0, 2.0, shown, 0.8, box=(0.1, 0.7, 0.5, 0.8))],
                                             recipe="ocr:test")}, v.sha256)


def make_media(folder: Path) -> list[Path]:
    """Write CLIPS and IMAGES into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [write_clip(folder / name, segs, seed=i) for i, (name, segs) in enumerate(CLIPS.items())]
    paths += [write_image(folder / name, colour, seed=i) for i, (name, colour) in enumerate(IMAGES.items())]
    return paths


def _vocab():
    from reelsearch.models import VocabTextProcessor

    return VocabTextProcessor.build(CAPTIONS + ["a video", "clip"])


def cli_indexed(root: Path, similarity: str = "cosine") -> Path:
    """``make_media`` in ROOT/media indexed through ``reelsearch index`` into ROOT/index (no cues) with a small model
    of ``similarity`` saved in ROOT/model; the model folder."""
    make_media(root / "media")
    model_dir = small_model(similarity).save(root / "model")
    res = CliRunner().invoke(app, ["index", str(root / "media"), "--index", str(root / "index"), "--model",
                                   str(model_dir), "--quiet", "--no-speech", "--no-ocr"])
    assert res.exit_code == 0, res.output
    return model_dir


def small_model(kind: str = "cosine", seed: int = 0, dim: int = 24, max_frames: int = 64):
    """A real, untrained registry model with small sizes reading 1280-d EfficientNet-Lite0 appearance features
    (frames every 0.5 s, at most ``max_frames``).

    kind: "cosine" (mithun-expert), "order" (torabi-m1), "pairwise" (torabi-m3: frame attention),
    "moe" / "moe-rank" (two cosine experts fused by score / by rank), "moe-mixed" (cosine + order, by score).
    """
    from reelsearch.models import MixtureOfExperts, create_model

    torch.manual_seed(seed)
    text = {"projection": {"dim": dim}, "glove_init": None}
    video = {"projection": {"dim": dim}}
    features = {"video": {"appearance": {"sampling": "interval:0.5", "max_frames": max_frames}}}
    if kind == "cosine":
        text["encoder"] = {"embed_dim": 16, "hidden_size": dim}
        model = create_model("mithun-expert", _vocab(), model={"text": text, "video": video}, features=features)
    elif kind == "order":
        text["encoder"] = {"embed_dim": 16}
        model = create_model("torabi-m1", _vocab(), model={"text": text, "video": video}, features=features)
    elif kind == "pairwise":
        text["encoder"] = {"embed_dim": 16, "hidden_size": dim}
        model = create_model("torabi-m3", _vocab(), model={"text": text, "video": {**video, "attention": {"dim": 8}}},
                             features=features)
    elif kind in ("moe", "moe-rank", "moe-mixed"):
        scene = small_model("order" if kind == "moe-mixed" else "cosine", seed + 1, dim + 8, max_frames)
        experts = {"object": small_model("cosine", seed, dim, max_frames), "scene": scene}
        fusion = {"kind": "rank" if kind == "moe-rank" else "score", "weights": {"object": 1.0, "scene": 0.5}}
        return MixtureOfExperts(experts, fusion, name=f"test-{kind}").eval()
    else:
        raise ValueError(kind)
    return model.eval()


#: The index's sampling and segment policy as docs/index.md states them ("Segments: the unit of retrieval").
RATE, PENALTY, MAX_SECONDS = 1.0, 1.0, 30.0
_EPS = 1e-6  # seconds: times closer than this are the same time

_FEATURES: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}


def sample_by_time(path: Path, short_side: int | None, rate: float = RATE) -> tuple[list[np.ndarray], np.ndarray,
                                                                                    float]:
    """(RGB frames, their times [T], where the frames end) of a file sampled by time as the index documents it,
    with plain PyAV: at each target 0, 1/rate, 2/rate, ... before the frames end, the frame displayed then (the last
    decoded one whose time is at or before it; the first frame for targets before it), each frame kept once, at its
    own time. Like the index, the decoder skips frames no other frame refers to; an image is one frame at 0 s."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        image = path.suffix.lower() in (".png", ".jpg", ".jpeg")
        if not image:
            stream.codec_context.skip_frame = "NONREF"
        decoded = []  # (time, frame)
        for frame in container.decode(stream):
            decoded.append((float(frame.pts * frame.time_base) if frame.pts is not None else 0.0, frame))
            if image:
                break
    first, last = decoded[0][1], decoded[-1][1]
    w, h = first.width, first.height
    if short_side and min(w, h) > short_side:
        scale = short_side / min(w, h)
        w, h = max(1, round(w * scale)), max(1, round(h * scale))
    t0 = decoded[0][0]
    times = np.array([t - t0 for t, _ in decoded])
    if image:
        picked, end = [0], 0.0
    else:
        end = float(times[-1] + (last.duration * last.time_base if last.duration else 1.0 / float(stream.average_rate)))
        targets = np.arange(0.0, end - _EPS, 1.0 / rate)
        picked = sorted({max(0, int(np.searchsorted(times, t + _EPS, side="right")) - 1) for t in targets})
    images = [decoded[j][1].to_ndarray(width=w, height=h, format="rgb24",
                                       interpolation="AREA" if (w, h) != (first.width, first.height) else None)
              for j in picked]
    return images, times[picked], end


def frame_features(path: Path, recipe) -> tuple[np.ndarray, np.ndarray, float]:
    """(features [T, D], timestamps [T], end) of a file as the index samples it (``sample_by_time``) and the recipe's
    extractor sees it, computed here without the code under test: float16 in memory, as the index holds them."""
    from reelsearch.features.extractors import create_extractor

    key = f"{path}:{path.stat().st_mtime_ns}:{recipe.extractor}:{recipe.short_side}"
    if key not in _FEATURES:
        images, times, end = sample_by_time(path, recipe.short_side)
        feats = create_extractor(recipe.extractor).extract_frames(np.stack(images))
        _FEATURES[key] = (np.asarray(feats, np.float32).astype(np.float16).astype(np.float32), times, end)
    return _FEATURES[key]


def reference_segments(features: np.ndarray, times: np.ndarray, end: float) -> list[tuple[int, int, float, float]]:
    """The documented cut, by plain dynamic programming over every partition into runs: minimise the sum over runs
    of sum_t w_t ||f_t - mean_w||^2 (unit-length features, w_t = seconds on screen) + PENALTY per run, no run longer
    than MAX_SECONDS. Returns (first, stop, start s, end s) per segment: a change half way between two frames."""
    x = np.asarray(features, np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    n = len(x)
    stops = [float(times[t + 1]) if t + 1 < n else max(end, float(times[-1])) for t in range(n)]
    w = np.maximum(np.array(stops) - times, 1e-6)

    def cost(i: int, j: int) -> float:  # frames [i, j) as one run
        mean = (w[i:j, None] * x[i:j]).sum(0) / w[i:j].sum()
        return float((w[i:j] * ((x[i:j] - mean) ** 2).sum(1)).sum()) + PENALTY

    best, back = [0.0] + [np.inf] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            if stops[j - 1] - times[i] > MAX_SECONDS + 1e-9 and i < j - 1:
                continue
            c = best[i] + cost(i, j)
            if c < best[j]:
                best[j], back[j] = c, i
    bounds = [n]
    while bounds[-1] > 0:
        bounds.append(back[bounds[-1]])
    bounds = bounds[::-1]
    starts = [float(times[0])] + [float(times[b - 1] + times[b]) / 2 for b in bounds[1:-1]]
    ends = starts[1:] + [stops[-1]]
    return [(a, b, s, e) for a, b, s, e in zip(bounds[:-1], bounds[1:], starts, ends, strict=True)]


@dataclass
class FileReference:
    """One file's brute-force answer to one query. ``score``: the video's score as its search mode ranks it (the
    best segment's, or the whole video's for frame attention and rank / zscore fusion; a mixture's: {expert:
    score}); ``whole``: the score of all frames as one video (what annotate ranks); ``frames``: per-frame scores
    (fused as the mixture fuses); ``times``: the frames' times; ``segments``: (first, stop, start, end) per segment;
    ``segment_scores``: each segment's score (fused; for a whole-video mode the best of its frames' scores);
    ``best``: the best segment's index."""

    score: float | dict[str, float]
    whole: float | dict[str, float]
    frames: np.ndarray
    times: np.ndarray
    segments: list[tuple[int, int, float, float]]
    segment_scores: np.ndarray
    best: int


@torch.no_grad()
def reference(model, query: str, paths: list[Path]) -> list[FileReference]:
    """Brute force with the model's tensor path, file by file, as docs/index.md and docs/search.md describe search:
    frames at 1/s, cut into segments, each segment's vector the model's video encoder over its frames, a video's score
    its best segment's (no querybank here: no bias). Frame attention and rank / zscore fusion score the whole video,
    and order its segments by their frames' best scores. Per-frame scores: each frame as a one-frame video; for a
    frame-attention model, the attention weights."""
    from reelsearch.models import MixtureOfExperts

    mixture = isinstance(model, MixtureOfExperts)
    experts = model.experts if mixture else {"": model}
    whole_video = model.search_mode in ("pairwise", "rank", "zscore")
    out = []
    for p in paths:
        feats, times, end = frame_features(p, next(iter(experts.values())).recipes["appearance"])
        segments = reference_segments(feats, times, end) if len(feats) > 1 else [(0, 1, float(times[0]), end)]
        whole, per_seg, frames = {}, {}, {}
        for name, m in experts.items():
            f, _, _ = frame_features(p, m.recipes["appearance"])
            c = m.text_forward(m.text_processor([query]))
            video = m.video_forward({"feats": torch.from_numpy(f[None]), "lengths": torch.tensor([len(f)])})
            whole[name] = float(m.similarity(c, video)[0, 0])
            if m.is_pairwise:
                frames[name] = m.attention_weights(c, video)[0, 0].numpy()
                per_seg[name] = np.zeros(len(segments))  # unused: frame attention scores the whole video
            else:
                alone = m.video_forward({"feats": torch.from_numpy(f[:, None, :])})  # T one-frame videos
                frames[name] = m.similarity(c, alone)[0].numpy()
                per_seg[name] = np.array([float(m.similarity(c, m.video_forward(
                    {"feats": torch.from_numpy(f[None, a:b]), "lengths": torch.tensor([b - a])}))[0, 0])
                    for a, b, _, _ in segments])
        if mixture:
            fused_frames = model.fuse({k: v[None] for k, v in frames.items()}, axis=1)[0]
            fused_segs = sum(model.fusion.weights[k] * v for k, v in per_seg.items())
        else:
            fused_frames, fused_segs = frames[""], per_seg[""]
        if whole_video:
            fused_segs = np.array([fused_frames[a:b].max() for a, b, _, _ in segments])
        best = int(np.argmax(fused_segs))
        score = whole if whole_video else {k: float(v[best]) for k, v in per_seg.items()}
        out.append(FileReference(score if mixture else score[""], whole if mixture else whole[""],
                                 np.asarray(fused_frames), times, segments, np.asarray(fused_segs), best))
    return out


def reference_scores(model, query: str, paths: list[Path]) -> tuple[list, list[np.ndarray]]:
    """(video scores [N], per-frame scores per file) of ``reference``."""
    refs = reference(model, query, paths)
    return [r.score for r in refs], [r.frames for r in refs]


from reelsearch.service.background import ServerThread, free_port  # noqa: E402,F401  (re-exported)
