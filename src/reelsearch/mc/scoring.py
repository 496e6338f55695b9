"""Multiple-choice accuracy: each question's video is given the candidate with the highest similarity.

Torabi et al. 2016, section 5.1 ("Testing"): "for each test query, first we compute order similarity (Equation 3
in Appendix B.2) for all 5 answer choices and then video is assigned to description with highest score"; accuracy
is the percentage of correctly answered questions. A tie for the highest score counts as wrong (a model that
gives every candidate the same score must not score 20%), and so does a NaN score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from reelsearch.errors import ReelsearchError
from reelsearch.mc.mcfile import N_CHOICES, Question

ScoreFn = Callable[[str, list[str]], Sequence[float]]


def answer_question(scores: Sequence[float], answer: int) -> tuple[int, bool]:
    """(chosen index = first highest score, whether it is right: the answer's score beats every other strictly)."""
    vals = [float(s) for s in scores]
    if len(vals) != N_CHOICES:
        raise ReelsearchError(f"expected {N_CHOICES} scores, got {len(vals)}")
    if any(math.isnan(v) for v in vals):
        return -1, False
    best = max(vals)
    chosen = vals.index(best)
    correct = chosen == answer and sum(v == best for v in vals) == 1
    return chosen, correct


def mc_accuracy(score_fn: ScoreFn, questions: Sequence[Question]) -> tuple[float, list[dict]]:
    """Accuracy in percent over ``questions`` and one record per question.

    ``score_fn(item_id, candidates)`` returns the five candidates' similarities to the item's video. Records:
    ``{"id", "candidates", "scores", "chosen", "answer", "correct"}`` (0-based indices; ``chosen`` is -1 when a
    score is NaN).
    """
    if not questions:
        raise ReelsearchError("no questions to evaluate")
    records = []
    right = 0
    for q in questions:
        scores = [float(s) for s in score_fn(q.id, list(q.candidates))]
        chosen, correct = answer_question(scores, q.answer)
        right += correct
        records.append({"id": q.id, "candidates": list(q.candidates), "scores": scores, "chosen": chosen,
                        "answer": q.answer, "correct": correct})
    return 100.0 * right / len(questions), records
