"""Helpers shared by the search, service and web tests (no tests here): real media files made with PyAV/OpenCV,
small real models (untrained, from the registry), and the brute-force reference the searcher is checked against."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

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


def make_media(folder: Path) -> list[Path]:
    """Write CLIPS and IMAGES into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [write_clip(folder / name, segs, seed=i) for i, (name, segs) in enumerate(CLIPS.items())]
    paths += [write_image(folder / name, colour, seed=i) for i, (name, colour) in enumerate(IMAGES.items())]
    return paths


def _vocab():
    from reelsearch.models import VocabTextProcessor

    return VocabTextProcessor.build(CAPTIONS + ["a video", "clip"])


def small_model(kind: str = "cosine", seed: int = 0, dim: int = 24):
    """A real, untrained registry model with small sizes reading 1280-d EfficientNet-Lite0 appearance features.

    kind: "cosine" (mithun-expert), "order" (torabi-m1), "pairwise" (torabi-m3: frame attention),
    "moe" / "moe-rank" (two cosine experts fused by score / by rank), "moe-mixed" (cosine + order, by score).
    """
    from reelsearch.models import MixtureOfExperts, create_model

    torch.manual_seed(seed)
    text = {"features": "vocab", "projection": {"dim": dim}, "glove_init": None}
    if kind == "cosine":
        text["encoder"] = {"embed_dim": 16, "hidden_size": dim}
        model = create_model("mithun-expert", _vocab(), model={"text": text, "video": {"projection": {"dim": dim}}})
    elif kind == "order":
        text["encoder"] = {"embed_dim": 16, "input_dim": 16}
        model = create_model("torabi-m1", _vocab(), model={"text": text, "video": {"projection": {"dim": dim}}})
    elif kind == "pairwise":
        text["encoder"] = {"embed_dim": 16, "input_dim": 16, "hidden_size": dim}
        model = create_model("torabi-m3", _vocab(), model={"text": text, "video": {"projection": {"dim": dim},
                                                                                   "attention": {"dim": 8}}})
    elif kind in ("moe", "moe-rank", "moe-mixed"):
        scene = small_model("order" if kind == "moe-mixed" else "cosine", seed + 1, dim + 8)
        experts = {"object": small_model("cosine", seed, dim), "scene": scene}
        fusion = {"kind": "rank" if kind == "moe-rank" else "score", "weights": {"object": 1.0, "scene": 0.5}}
        return MixtureOfExperts(experts, fusion, name=f"test-{kind}").eval()
    else:
        raise ValueError(kind)
    return model.eval()


_FEATURES: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def frame_features(path: Path, interval: float = 0.5, max_frames: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(EfficientNet-Lite0 features [T, 1280], timestamps [T]) of a file, decoded with the searcher's sampling."""
    from reelsearch.features.extractors import create_extractor
    from reelsearch.media.decode import SamplingPolicy, decode_frames

    key = f"{path}:{path.stat().st_mtime_ns}:{interval}:{max_frames}"
    if key not in _FEATURES:
        frames = decode_frames(path, SamplingPolicy("interval", interval, max_frames), short_side=224)
        feats = create_extractor("efficientnet-lite0").extract_frames(frames.images)
        _FEATURES[key] = (feats, np.asarray(frames.timestamps, np.float64))
    return _FEATURES[key]


@torch.no_grad()
def reference_scores(model, query: str, paths: list[Path], max_frames: int = 64) -> tuple[list, list[np.ndarray]]:
    """Brute force with the model's own API, file by file: (video scores [N], per-frame scores per file).

    Per-frame scores: each frame as a one-frame video; for a frame-attention model, the attention weights.
    """
    from reelsearch.models import MixtureOfExperts

    scores, per_frame = [], []
    for p in paths:
        feats, _ = frame_features(p, max_frames=max_frames)
        whole = {"feats": torch.from_numpy(feats[None]), "lengths": torch.tensor([len(feats)])}
        if isinstance(model, MixtureOfExperts):
            c = model.encode_captions([query])
            sims = model.expert_similarities(c, model.encode_video(whole))
            scores.append({k: float(s[0, 0]) for k, s in sims.items()})
            one_frame_videos = {"feats": torch.from_numpy(feats[:, None, :])}  # T videos of one frame each
            per_frame.append(model.similarity(c, model.encode_video(one_frame_videos), axis=1)[0].numpy())
            continue
        c = model.encode_captions([query])
        video = model.encode_video(whole)
        scores.append(float(model.similarity(c, video)[0, 0]))
        if model.is_pairwise:
            per_frame.append(model.attention_weights(c, video)[0, 0].numpy())
        else:
            per_frame.append(np.array([float(model.similarity(c, model.encode_video(
                {"feats": torch.from_numpy(feats[t:t + 1][None])}))[0, 0]) for t in range(len(feats))]))
    return scores, per_frame


from reelsearch.service.background import ServerThread, free_port  # noqa: E402,F401  (re-exported)
