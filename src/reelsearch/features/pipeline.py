"""FeaturePipeline: media -> features, exactly as a feature recipe says. The one path for every command.

``reelsearch extract``, training's feature cache, ``eval``, ``mc eval`` (through the cache), ``index``, ``search``,
``serve`` and ``annotate`` all decode and extract through a pipeline built from the model's (or the command's)
recipes, so a model sees at search time the inputs it was trained on:

* frames are decoded once per item with the recipes' sampling policy, frame cap and decode size (every frame
  feature of one pipeline must agree on these), the frame after each sampled one too when a motion recipe reads
  frame pairs; audio is decoded at the rate its extractor wants;
* each feature's extractor is created from its recipe (name + options) and checked: its output size must be the
  recipe's ``dim`` and its weights' identity the recipe's ``weights``;
* outputs are rounded to the recipe's storage dtype, as a FeatureStore would hold them.

A recipe whose extractor does not exist here (I3D, Places-365, ...) fails at construction with what to import.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reelsearch.config.recipe import ModalityRecipe
from reelsearch.errors import ConfigError, MediaError, ReelsearchError
from reelsearch.features.extract import decode_job, make_extractor, motion_of_pairs
from reelsearch.features.jobs import Job
from reelsearch.media.decode import escaped_path, parse_policy


@dataclass
class MediaFeatures:
    """What a pipeline made of one media file: features {name: float32 [T, D]} and the decoded frames' facts."""

    features: dict[str, np.ndarray]
    timestamps: np.ndarray
    duration: float | None
    is_image: bool
    images: np.ndarray | None = None  # the sampled frames, uint8 [T, H, W, 3] (thumbnails)
    absent: list[str] = field(default_factory=list)  # features the media has no input for (audio of a silent clip)


def round_to(features: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``features`` as stored in ``dtype`` (float16 rounding), so stored and fresh features agree."""
    out = np.asarray(features, np.float32)
    return out.astype(np.float16).astype(np.float32) if dtype == "float16" else out


def unavailable_message(name: str, recipe: ModalityRecipe) -> str:
    """Why features of ``recipe`` cannot be computed here, and what to do instead."""
    return (f"the {name!r} features come from {recipe.extractor!r} ({recipe.dim}-d), which reelsearch cannot run "
            f"here (no such extractor or weights); import precomputed ones: `reelsearch features import SRC --out "
            f"STORE --modality {name.split('@')[0]} --extractor {recipe.extractor}` and pass --features STORE")


class FeaturePipeline:
    """Decode + extract per recipe. ``recipes``: {feature name: ModalityRecipe}; ``extractors``: ready extractor
    objects to use instead of creating them by name (tests, notebooks; their weights are not checked)."""

    def __init__(self, recipes: Mapping[str, ModalityRecipe], device: str | None = None,
                 batch_size: int | None = None, extractors: Mapping[str, object] | None = None):
        self.recipes = dict(recipes)
        if not self.recipes:
            raise ConfigError("a feature pipeline needs at least one recipe")
        self.device, self.batch_size = device, batch_size
        self._extractors = dict(extractors or {})
        for name, recipe in self.recipes.items():
            if name not in self._extractors and not recipe.available:
                raise ReelsearchError(unavailable_message(name, recipe))
        frames = {n: r for n, r in self.recipes.items() if r.sampling is not None}
        specs = {r.decode_spec for r in frames.values()}
        if len(specs) > 1:
            detail = "; ".join(f"{n}: {r.sampling}, at most {r.max_frames}, short side {r.short_side}"
                               for n, r in frames.items())
            raise ConfigError(f"these features decode frames differently and cannot share one decode ({detail}); "
                              "extract them separately")
        self.frame_names = list(frames)
        self.audio_names = [n for n, r in self.recipes.items() if r.sampling is None]
        first = next(iter(frames.values()), None)
        self.policy = parse_policy(first.sampling, first.max_frames) if first else None
        self.short_side = first.short_side if first else None
        self.with_next = any(r.motion_input == "pairs" for r in frames.values())
        self._lock = threading.Lock()

    @classmethod
    def from_extractors(cls, extractors: Mapping[str, str], options: Mapping[str, dict] | None = None, *,
                        sampling: str = "interval:0.5", max_frames: int | None = 64, short_side: int | None = 256,
                        motion_input: str = "pairs", dtype: str = "float16", device: str | None = None,
                        batch_size: int | None = None) -> FeaturePipeline:
        """The pipeline of named extractors (``{modality: extractor name}``, with ``options`` per modality) and the
        given frame sampling, as ``reelsearch extract`` builds it from its options: each extractor is created once,
        and its recipe records its name, options, output size and weights' identity."""
        options = options or {}
        recipes, made = {}, {}
        for m, name in extractors.items():
            ex = made[m] = make_extractor(name, device, batch_size, **options.get(m, {}))
            frames = getattr(ex, "input", "frames") == "frames"
            recipes[m] = ModalityRecipe(
                name, int(ex.dim), getattr(ex, "weights_id", None), options.get(m, {}),
                sampling=sampling if frames else None, max_frames=max_frames if frames else None,
                short_side=short_side if frames else None,
                motion_input=motion_input if getattr(ex, "modality", "") == "motion" else None, dtype=dtype)
        return cls(recipes, device=device, batch_size=batch_size, extractors=made)

    def describe(self) -> str:
        """What determines the features (part of an index's model id)."""
        return ";".join(f"{n}={r.key}" for n, r in sorted(self.recipes.items()))

    # ---------------------------------------------------------------- extractors
    def extractor(self, name: str):
        """The (lazily created, shared) extractor of feature ``name``, checked against its recipe."""
        with self._lock:
            if name not in self._extractors:
                self._extractors[name] = self._create(name)
            return self._extractors[name]

    def _create(self, name: str):
        recipe = self.recipes[name]
        ex = make_extractor(recipe.extractor, self.device, self.batch_size, **recipe.options)
        if int(ex.dim) != recipe.dim:
            raise ConfigError(f"feature {name!r}: extractor {recipe.extractor!r} gives {ex.dim}-d features, the recipe "
                              f"says {recipe.dim}")
        found = getattr(ex, "weights_id", None)
        if recipe.weights and found != recipe.weights:
            raise ConfigError(f"feature {name!r}: the installed {recipe.extractor} weights ({found}) are not the ones "
                              f"the recipe names ({recipe.weights}); install the package version the model was "
                              "trained with, or re-train")
        want_audio = recipe.sampling is None
        if (getattr(ex, "input", "frames") == "audio") != want_audio:
            raise ConfigError(f"feature {name!r}: {recipe.extractor} reads {ex.input}, but the recipe "
                              f"{'has no' if want_audio else 'has a'} frame sampling")
        return ex

    @property
    def audio_rate(self) -> int | None:
        """The sample rate audio is decoded at (the first audio extractor's), or None without audio features."""
        if not self.audio_names:
            return None
        return int(getattr(self.extractor(self.audio_names[0]), "sample_rate", 22050))

    # ---------------------------------------------------------------- decode + compute
    def decode(self, job, names: list[str] | None = None, threads: int = 0):
        """Decode what ``names`` (default: all) need of ``job`` (a ``features.jobs.Job``): a ``Decoded``."""
        names = list(self.recipes) if names is None else names
        need_frames = any(n in self.frame_names for n in names)
        rate = self.audio_rate if any(n in self.audio_names for n in names) else None
        pairs = self.with_next and any(self.recipes[n].motion_input == "pairs" for n in names)
        return decode_job(job, need_frames, rate, self.policy, self.short_side, threads, pairs)

    def compute(self, name: str, decoded) -> np.ndarray | None:
        """Features of ``name`` from a ``Decoded`` item (float32, not yet rounded); None when the media has no
        input for it (audio of a silent video, motion of an image). Decode errors raise ReelsearchError."""
        recipe = self.recipes[name]
        ex = self.extractor(name)
        if recipe.sampling is None:
            if decoded.audio_error is not None:
                raise ReelsearchError(decoded.audio_error)
            if decoded.audio is None or decoded.audio.size == 0:
                return None
            return np.asarray(ex.extract_audio(decoded.audio, decoded.audio_rate), np.float32)
        if decoded.frame_error is not None:
            raise ReelsearchError(decoded.frame_error)
        frames = decoded.frames
        if recipe.motion_input is not None:
            if frames.is_image or len(frames) < 2:
                return None
            if recipe.motion_input == "pairs" and frames.next_images is not None:
                return np.asarray(motion_of_pairs(ex, frames), np.float32)
        return np.asarray(ex.extract_frames(frames.images), np.float32)

    def extract(self, path: str | Path, start: float | None = None, end: float | None = None) -> MediaFeatures:
        """Every feature of one media file, rounded to the recipes' dtypes. A file that cannot be decoded, or that
        lacks an input a feature needs, raises a MediaError naming it."""
        job = Job(escaped_path(Path(path).stem), Path(path), start, end)
        decoded = self.decode(job)
        feats, absent = {}, []
        for name in self.recipes:
            out = self.compute(name, decoded)
            if out is None:
                absent.append(name)
                continue
            feats[name] = round_to(out, self.recipes[name].dtype)
        if absent:
            raise MediaError(job.shown, f"has no input for the {', '.join(absent)} features (e.g. no audio track, "
                                        "or a still image for motion)")
        frames = decoded.frames
        if frames is None:
            return MediaFeatures(feats, np.zeros(1), None, False)
        duration = float(frames.duration) if frames.duration and np.isfinite(frames.duration) else None
        return MediaFeatures(feats, np.asarray(frames.timestamps, np.float64), duration, bool(frames.is_image),
                             frames.images)
