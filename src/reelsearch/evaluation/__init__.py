"""Evaluation: retrieval metrics over full similarity matrices, score/rank fusion, reports, an evaluator object."""

from reelsearch.evaluation.errors import EvaluationInputError
from reelsearch.evaluation.evaluator import RetrievalEvaluator
from reelsearch.evaluation.fusion import MITHUN2018_WEIGHTS, average_ranks, fuse_experts, rank_fusion, score_fusion
from reelsearch.evaluation.positives import Positives
from reelsearch.evaluation.ranking import (
    METRIC_KEYS,
    RECALL_AT,
    query_ranks,
    rank_metrics,
    retrieval_metrics,
    summarize,
)
from reelsearch.evaluation.report import format_table, to_json
from reelsearch.evaluation.sources import EmbeddingScores

__all__ = [
    "METRIC_KEYS",
    "MITHUN2018_WEIGHTS",
    "RECALL_AT",
    "EmbeddingScores",
    "EvaluationInputError",
    "Positives",
    "RetrievalEvaluator",
    "average_ranks",
    "format_table",
    "fuse_experts",
    "query_ranks",
    "rank_fusion",
    "rank_metrics",
    "retrieval_metrics",
    "score_fusion",
    "summarize",
    "to_json",
]
