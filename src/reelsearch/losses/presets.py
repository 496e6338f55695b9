"""Named losses with their papers' settings: ``create_loss("vse++")``, ``create_loss("annotation", margin=0.1)``.

=================  ==============================================================================================
name               what, and where the defaults come from
=================  ==============================================================================================
vse                sum of hinges over all negatives, both directions (Mithun et al. 2018 eq. 1, the VSE loss of
                   Kiros et al.; Torabi et al. 2016 eq. 4 is the same with order similarity): margin 0.2
                   (Mithun Sec. 4.2: "we empirically choose alpha as 0.2"), cosine similarity (Mithun Sec. 3.3).
torabi-pairwise    Torabi et al. 2016 eq. 4 exactly: "vse" with margin 0.05 (Torabi Sec. 4, "ranking margin
                   alpha = 0.05 (as proposed in [24])") and the order-violation similarity of eq. 3.
annotation         Torabi et al. 2016 eq. 5, the annotation ranking loss: only the first term of eq. 4, i.e. for
                   each video the contrastive captions c' (videos rank captions), margin 0.05, order similarity.
vse++              hardest negative, both directions (Mithun eq. 2 after Faghri et al.'s VSE++; Zhao et al. 2020
                   SCDE eq. 11): margin 0.2 (Mithun Sec. 4.2; SCDE Sec. 4.2 "alpha = 0.2"), cosine similarity.
mithun-weighted    Mithun eq. 3: hardest negative weighted by L(r) = 1 + beta / (N - r + 1), margin 0.2, cosine;
                   beta = 1 (not stated in the paper; the authors' released code uses 1).
infonce            symmetric InfoNCE (CLIP-style), temperature 0.05 fixed (pass learnable=True to learn it),
                   mean reduction, cosine similarity. Not from the three papers: a modern option.
=================  ==============================================================================================

All hinge presets use ``reduction="sum"`` as the papers' equations (sums over the batch) and the VSE/VSE++ code do.

:func:`train_losses` builds the losses a model's ``train`` section asks for (its preset and margin, and the warm-up
loss of its first epochs): the one place training gets its losses from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reelsearch.losses.base import LossConfigError, PairwiseLoss
from reelsearch.losses.infonce import InfoNCELoss
from reelsearch.losses.ranking import RankingLoss

__all__ = ["LOSS_PRESETS", "LossPreset", "TrainLosses", "create_loss", "list_losses", "train_losses"]


@dataclass(frozen=True)
class LossPreset:
    """A named loss: its class, its keyword defaults and the paper they come from."""

    name: str
    cls: type[PairwiseLoss]
    kwargs: dict[str, Any] = field(default_factory=dict)
    citation: str = ""

    def create(self, **overrides: Any) -> PairwiseLoss:
        return self.cls(**{**self.kwargs, **overrides})


def _ranking(name: str, citation: str, **kwargs: Any) -> LossPreset:
    return LossPreset(name, RankingLoss, kwargs, citation)


LOSS_PRESETS: dict[str, LossPreset] = {
    p.name: p
    for p in [
        _ranking(
            "vse",
            "Mithun et al. 2018 eq. 1 (VSE); Torabi et al. 2016 eq. 4",
            margin=0.2,
            negatives="all",
            weighting="uniform",
            directions="both",
            similarity="cosine",
        ),
        _ranking(
            "torabi-pairwise",
            "Torabi et al. 2016 eq. 4 with eq. 3 similarity, margin 0.05 (Sec. 4)",
            margin=0.05,
            negatives="all",
            weighting="uniform",
            directions="both",
            similarity="order",
        ),
        _ranking(
            "annotation",
            "Torabi et al. 2016 eq. 5 (annotation ranking loss), margin 0.05 (Sec. 4)",
            margin=0.05,
            negatives="all",
            weighting="uniform",
            directions="annotation",
            similarity="order",
        ),
        _ranking(
            "vse++",
            "Mithun et al. 2018 eq. 2; Zhao et al. 2020 (SCDE) eq. 11; margin 0.2",
            margin=0.2,
            negatives="hardest",
            weighting="uniform",
            directions="both",
            similarity="cosine",
        ),
        _ranking(
            "mithun-weighted",
            "Mithun et al. 2018 eq. 3, L(r) = 1 + beta/(N - r + 1), margin 0.2",
            margin=0.2,
            negatives="hardest",
            weighting="rank",
            beta=1.0,
            directions="both",
            similarity="cosine",
        ),
        LossPreset(
            "infonce",
            InfoNCELoss,
            dict(temperature=0.05, learnable=False, directions="both", reduction="mean", similarity="cosine"),
            "symmetric InfoNCE (van den Oord et al. 2018; CLIP, Radford et al. 2021)",
        ),
    ]
}


def list_losses() -> list[str]:
    """Names accepted by :func:`create_loss`."""
    return sorted(LOSS_PRESETS)


def create_loss(name: str, **overrides: Any) -> PairwiseLoss:
    """The loss preset ``name`` (see this module's table), with any constructor argument overridden."""
    try:
        preset = LOSS_PRESETS[name]
    except KeyError:
        raise LossConfigError(f"unknown loss {name!r}; choose one of {list_losses()}") from None
    try:
        return preset.create(**overrides)
    except TypeError as e:
        raise LossConfigError(f"loss {name!r}: {e}") from None


@dataclass
class TrainLosses:
    """The losses of a training run: ``main``, and ``warmup`` for its first ``warmup_epochs`` epochs."""

    main: PairwiseLoss
    warmup: PairwiseLoss | None = None
    warmup_epochs: int = 0

    def at(self, epoch: int) -> PairwiseLoss:
        """The loss of ``epoch`` (0-based)."""
        return self.warmup if self.warmup is not None and epoch < self.warmup_epochs else self.main

    def to(self, device) -> TrainLosses:
        for loss in (self.main, self.warmup):
            if loss is not None:
                loss.to(device)
        return self


def _takes_margin(name: str) -> bool:
    return "margin" in LOSS_PRESETS[name].kwargs  # InfoNCE has a temperature instead


def train_losses(train) -> TrainLosses:
    """The losses of a model config's ``train`` section (a ``reelsearch.config.TrainConfig``, not imported: its check
    looks these presets up): its ``loss`` preset with its ``margin`` (a preset without a margin keeps its own
    settings) and, when ``warmup_epochs`` is set, ``warmup_loss`` at the main loss's similarity and margin (where both
    have one)."""
    main = create_loss(train.loss, **({"margin": train.margin} if train.margin is not None
                                      and _takes_margin(train.loss) else {}))
    if not train.warmup_epochs:
        return TrainLosses(main)
    margin = getattr(main, "margin", None)
    warmup = create_loss(train.warmup_loss, similarity=main.similarity,
                         **({"margin": margin} if margin is not None and _takes_margin(train.warmup_loss) else {}))
    return TrainLosses(main, warmup, train.warmup_epochs)
