"""The one item type that flows through reelsearch, whatever the dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Item:
    """One video (or image, a one-frame video) with its captions.

    id: unique within the dataset; also the key of its features in a FeatureStore unless
        ``features_key`` says otherwise.
    path: the media file, or None when only precomputed features exist (e.g. MSR-VTT annotations
        without the videos).
    captions: every caption of this item under the chosen protocol, in file order.
    split: "train", "val", "dev", "test", ... as the dataset names it.
    start / end: seconds inside ``path`` when the item is a clip of a longer file (LSMDC), else None.
    """

    id: str
    path: Path | None
    captions: list[str]
    split: str
    features_key: str | None = None
    start: float | None = None
    end: float | None = None
    meta: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Key of this item's features in a FeatureStore."""
        return self.features_key or self.id
