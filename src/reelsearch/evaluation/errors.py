"""The error raised for bad evaluation inputs (scores or ground truth)."""

from __future__ import annotations

from reelsearch.errors import ReelsearchError


class EvaluationInputError(ReelsearchError, ValueError):
    """Bad scores or ground truth given to the metrics.

    ``subject`` says which input is at fault: ``"positives"`` (the ground truth) or ``"scores"`` (the similarity
    matrix), so that a caller reading them from files can name the right file.
    """

    def __init__(self, problem: str, subject: str):
        self.problem = problem
        self.subject = subject
        super().__init__(problem)
