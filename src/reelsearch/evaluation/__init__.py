"""Evaluation: retrieval metrics over full similarity matrices, reports, an evaluator object (the score matrices and
their fusion are ``reelsearch.scoring``)."""

from reelsearch.evaluation.evaluator import RetrievalEvaluator
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

__all__ = [
    "METRIC_KEYS",
    "RECALL_AT",
    "Positives",
    "RetrievalEvaluator",
    "format_table",
    "query_ranks",
    "rank_metrics",
    "retrieval_metrics",
    "summarize",
    "to_json",
]
