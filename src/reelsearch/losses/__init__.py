"""Training losses over a batch's caption-by-video similarity matrix (rows = captions, columns = videos).

One composition — negatives ("all" | "hardest") x weighting ("uniform" | "rank") x directions ("both" |
"retrieval" | "annotation") — covers VSE, VSE++, Mithun's rank-weighted loss and Torabi's annotation loss;
:class:`InfoNCELoss` shares the interface. Named paper presets: :func:`create_loss`; the losses of a model's
``train`` section: :func:`train_losses`.
"""

from reelsearch.losses.base import DIRECTIONS, REDUCTIONS, LossConfigError, PairwiseLoss, positive_mask_from_ids
from reelsearch.losses.infonce import InfoNCELoss
from reelsearch.losses.presets import LOSS_PRESETS, LossPreset, TrainLosses, create_loss, list_losses, train_losses
from reelsearch.losses.ranking import NEGATIVES, WEIGHTINGS, RankingLoss, rank_weights

__all__ = [
    "DIRECTIONS",
    "LOSS_PRESETS",
    "NEGATIVES",
    "REDUCTIONS",
    "WEIGHTINGS",
    "InfoNCELoss",
    "LossConfigError",
    "LossPreset",
    "PairwiseLoss",
    "RankingLoss",
    "TrainLosses",
    "create_loss",
    "list_losses",
    "positive_mask_from_ids",
    "rank_weights",
    "train_losses",
]
