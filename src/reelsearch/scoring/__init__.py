"""What ranking needs at run time, below the models, search and the metrics: score matrices however they are given
(``matrices``), the fusion of several spaces' or experts' scores by score or by rank (``fusion``), and the calibrated
confidence curve a model carries (``calibration``)."""

from reelsearch.scoring.calibration import NO_GOOD_MATCH, Curve
from reelsearch.scoring.fusion import MITHUN2018_WEIGHTS, average_ranks, fuse_experts, rank_fusion, score_fusion
from reelsearch.scoring.matrices import EmbeddingScores, ScoreSource

__all__ = ["MITHUN2018_WEIGHTS", "NO_GOOD_MATCH", "Curve", "EmbeddingScores", "ScoreSource", "average_ranks",
           "fuse_experts", "rank_fusion", "score_fusion"]
