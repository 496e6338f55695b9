"""mc_accuracy on a hand-worked example: order-violation and cosine similarity computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from reelsearch.mc import Question, answer_question, mc_accuracy
from reelsearch.similarity import cosine_similarity, order_similarity

VIDEO = [0.5, 0.5, 0.2]
CAPTIONS = {
    "c0": [0.4, 0.6, 0.1],
    "c1": [0.9, 0.1, 0.0],
    "c2": [0.2, 0.2, 0.2],
    "c3": [0.5, 0.5, 0.9],
    "c4": [1.0, 1.0, 1.0],
}
# S(c, v) = -||max(0, c - v)||^2 (Torabi eq. 3), by hand:
#   c0: max(0, [-.1, .1, -.1]) = [0, .1, 0]     -> -0.01
#   c1: max(0, [.4, -.4, -.2]) = [.4, 0, 0]     -> -0.16
#   c2: max(0, [-.3, -.3, 0])  = 0               ->  0      (the most general caption wins)
#   c3: max(0, [0, 0, .7])     = [0, 0, .7]     -> -0.49
#   c4: [.5, .5, .8]                            -> -1.14
ORDER = [-0.01, -0.16, 0.0, -0.49, -1.14]
# cos = c.v / (|c| |v|), |v| = sqrt(.54) = 0.734847:
#   c0: .52 / (0.728011 * 0.734847) = .52 / 0.534977 = 0.972005
#   c1: .50 / (0.905539 * 0.734847) = .50 / 0.665433 = 0.751391
#   c2: .24 / (0.346410 * 0.734847) = .24 / 0.254558 = 0.942809
#   c3: .68 / (1.144552 * 0.734847) = .68 / 0.841071 = 0.808494
#   c4: 1.2 / (1.732051 * 0.734847) = 1.2 / 1.272792 = 0.942809   (= c2: same direction)
COSINE = [0.972005, 0.751391, 0.942809, 0.808494, 0.942809]


def score_fn(similarity):
    def fn(item_id, candidates):
        assert item_id.startswith("clip")
        c = torch.tensor([CAPTIONS[x] for x in candidates])
        return similarity(c, torch.tensor([VIDEO]))[:, 0].tolist()

    return fn


QUESTIONS = [
    Question("clip1", tuple(CAPTIONS), 0),  # cosine right (c0), order wrong (picks c2)
    Question("clip2", tuple(CAPTIONS), 2),  # order right, cosine wrong
    Question("clip3", tuple(CAPTIONS), 4),  # both wrong
]


def test_library_similarities_match_the_hand_computation():
    c = torch.tensor(list(CAPTIONS.values()))
    v = torch.tensor([VIDEO])
    assert order_similarity(c, v)[:, 0].tolist() == pytest.approx(ORDER, abs=1e-6)
    assert cosine_similarity(c, v)[:, 0].tolist() == pytest.approx(COSINE, abs=1e-5)


def test_order_similarity_accuracy():
    acc, records = mc_accuracy(score_fn(order_similarity), QUESTIONS)
    assert acc == pytest.approx(100 / 3)
    assert [r["chosen"] for r in records] == [2, 2, 2]
    assert [r["correct"] for r in records] == [False, True, False]
    assert records[0]["scores"] == pytest.approx(ORDER, abs=1e-6)
    assert records[1] == {"id": "clip2", "candidates": list(CAPTIONS), "scores": records[1]["scores"],
                          "chosen": 2, "answer": 2, "correct": True}


def test_cosine_similarity_accuracy():
    acc, records = mc_accuracy(score_fn(cosine_similarity), QUESTIONS)
    assert acc == pytest.approx(100 / 3)
    assert [r["chosen"] for r in records] == [0, 0, 0]
    assert [r["correct"] for r in records] == [True, False, False]


def test_ties_and_nan_count_as_wrong():
    assert answer_question([1, 1, 1, 1, 1], 0) == (0, False)  # a constant scorer must not get 20%
    assert answer_question([0.5, 0.9, 0.9, 0.1, 0.0], 1) == (1, False)
    assert answer_question([0.5, 0.9, 0.8, 0.1, 0.0], 1) == (1, True)
    assert answer_question([math.nan, 0.9, 0.8, 0.1, 0.0], 1) == (-1, False)
    acc, _ = mc_accuracy(lambda _i, _c: [0.0] * 5, QUESTIONS)
    assert acc == 0.0


def test_score_fn_sees_each_question_once_in_order():
    seen = []

    def fn(item_id, candidates):
        seen.append((item_id, tuple(candidates)))
        return [5, 4, 3, 2, 1]

    acc, _ = mc_accuracy(fn, QUESTIONS)
    assert seen == [(q.id, q.candidates) for q in QUESTIONS] and acc == pytest.approx(100 / 3)
