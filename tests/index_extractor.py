"""A stand-in frame extractor and a pipeline of given extractors for tests/test_extract_pipeline.py, light to import
(no torch): its killed run is a process importing this (2 s of CPU less than importing the test module)."""

from __future__ import annotations

import time

import numpy as np

from test_media_decode import read_index


class IndexExtractor:
    """A frame 'extractor' that reads back the painted frame index: one row [index, mean] per frame; counts calls."""

    modality, input, dim, per_frame = "appearance", "frames", 2, True

    def __init__(self, delay: float = 0.0):
        self.frames_seen = 0
        self.delay = delay

    def extract_frames(self, frames):
        time.sleep(self.delay * len(frames))
        self.frames_seen += len(frames)
        return np.array([[read_index(f), f.mean()] for f in frames], np.float32)


def pipeline_of(extractors: dict, sampling: str = "interval:0.5", max_frames: int | None = 64,
                short_side: int | None = 256):
    """A FeaturePipeline running the given extractor objects (recipes named after them, frames as given)."""
    from reelsearch.config.recipe import ModalityRecipe
    from reelsearch.features.pipeline import FeaturePipeline

    recipes = {}
    for m, ex in extractors.items():
        frames = getattr(ex, "input", "frames") == "frames"
        recipes[m] = ModalityRecipe(getattr(ex, "name", type(ex).__name__), int(ex.dim),
                                    sampling=sampling if frames else None, max_frames=max_frames if frames else None,
                                    short_side=short_side if frames else None,
                                    motion_input="pairs" if m == "motion" else None)
    return FeaturePipeline(recipes, extractors=extractors)
