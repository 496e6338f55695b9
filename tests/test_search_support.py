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


_FEATURES: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def frame_features(path: Path, recipe) -> tuple[np.ndarray, np.ndarray]:
    """(features [T, D], timestamps [T]) of a file as ``recipe`` (a ModalityRecipe) says, computed here without the
    FeaturePipeline: decode with its sampling and size, its extractor, float16 rounding when it stores float16."""
    from reelsearch.features.extractors import create_extractor
    from reelsearch.media.decode import decode_frames, parse_policy

    key = f"{path}:{path.stat().st_mtime_ns}:{recipe.key}:{recipe.dtype}"
    if key not in _FEATURES:
        frames = decode_frames(path, parse_policy(recipe.sampling, recipe.max_frames), short_side=recipe.short_side)
        feats = create_extractor(recipe.extractor).extract_frames(frames.images)
        if recipe.dtype == "float16":
            feats = feats.astype(np.float16).astype(np.float32)
        _FEATURES[key] = (feats, np.asarray(frames.timestamps, np.float64))
    return _FEATURES[key]


@torch.no_grad()
def reference_scores(model, query: str, paths: list[Path]) -> tuple[list, list[np.ndarray]]:
    """Brute force with the model's tensor path, file by file: (video scores [N], per-frame scores per file).

    Per-frame scores: each frame as a one-frame video; for a frame-attention model, the attention weights. A mixture's
    video scores are {expert: score}; its per-frame scores are fused as its fusion says.
    """
    from reelsearch.models import MixtureOfExperts

    scores, per_frame = [], []
    experts = model.experts if isinstance(model, MixtureOfExperts) else {"": model}
    for p in paths:
        video, frames = {}, {}
        for name, m in experts.items():
            feats, _ = frame_features(p, m.recipes["appearance"])
            c = m.text_forward(m.text_processor([query]))
            whole = m.video_forward({"feats": torch.from_numpy(feats[None]), "lengths": torch.tensor([len(feats)])})
            video[name] = float(m.similarity(c, whole)[0, 0])
            if m.is_pairwise:
                frames[name] = m.attention_weights(c, whole)[0, 0].numpy()
            else:
                alone = m.video_forward({"feats": torch.from_numpy(feats[:, None, :])})  # T one-frame videos
                frames[name] = m.similarity(c, alone)[0].numpy()
        if isinstance(model, MixtureOfExperts):
            scores.append(video)
            per_frame.append(model.fuse({k: f[None] for k, f in frames.items()}, axis=1)[0])
        else:
            scores.append(video[""])
            per_frame.append(frames[""])
    return scores, per_frame


from reelsearch.service.background import ServerThread, free_port  # noqa: E402,F401  (re-exported)
