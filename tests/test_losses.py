"""Ranking losses and InfoNCE against per-triplet loops written straight from the papers' equations.

S[i, j] = S(caption i, video j). Torabi et al. 2016 eq. 4 / Mithun et al. 2018 eq. 1:
  sum_(c,v) [ sum_c' [a - S(c, v) + S(c', v)]_+  +  sum_v' [a - S(c, v) + S(c, v')]_+ ]
the first term ("annotation", Torabi eq. 5) ranks captions c' for each video v, the second ("retrieval") ranks
videos v' for each caption c. Mithun eq. 2 / SCDE eq. 11 keep only the hardest c' and v'; Mithun eq. 3 multiplies
each term by L(r) = 1 + beta / (N - r + 1).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from reelsearch.losses import (
    LOSS_PRESETS,
    InfoNCELoss,
    LossConfigError,
    RankingLoss,
    create_loss,
    list_losses,
    positive_mask_from_ids,
    rank_weights,
)
from reelsearch.similarity import cosine_similarity, order_similarity

# --------------------------------------------------------------------------------------------------- references


def _hinge(x):
    return torch.clamp(x, min=0)


def _term(pos, negs, margin, negatives, weighting, beta):
    """One (query, positive) term: its negatives' hinges, mined and weighted as the equations say."""
    if not negs:
        return pos * 0
    if negatives == "all":
        loss = sum(_hinge(margin - pos + s) for s in negs)
    else:  # hardest: argmax over negatives; with ties the (sub)gradient is shared equally among the tied ones
        top = max(s.item() for s in negs)
        tied = [s for s in negs if s.item() == top]
        hardest = tied[0].detach() + sum(s - s.detach() for s in tied) / len(tied)
        loss = _hinge(margin - pos + hardest)
    if weighting == "rank":
        n_items = len(negs) + 1  # "N is the number of compared videos" (all items of the row)
        r = 1 + sum(1 for s in negs if s.item() >= pos.item())  # rank of the positive, ties against it
        loss = loss * (1 + beta / (n_items - r + 1))
    return loss


def brute_ranking(
    S, margin, negatives="all", weighting="uniform", beta=1.0, directions="both", P=None, reduction="sum"
):
    """Reference loss from the equations, one triplet at a time. P[i][j]: caption i matches video j."""
    B = S.shape[0]
    P = [[i == j for j in range(B)] for i in range(B)] if P is None else [[bool(x) for x in r] for r in P.tolist()]
    total = S.sum() * 0
    if directions in ("both", "retrieval"):  # each caption c = i ranks videos; contrastive videos v'
        part = sum(
            _term(S[i, i], [S[i, j] for j in range(B) if not P[i][j] and j != i], margin, negatives, weighting, beta)
            for i in range(B)
        )
        total = total + (part / B if reduction == "mean" else part)
    if directions in ("both", "annotation"):  # each video v = i ranks captions; contrastive captions c'
        part = sum(
            _term(S[i, i], [S[k, i] for k in range(B) if not P[k][i] and k != i], margin, negatives, weighting, beta)
            for i in range(B)
        )
        total = total + (part / B if reduction == "mean" else part)
    return total


def brute_infonce(S, temperature, directions="both", P=None, reduction="mean"):
    B = S.shape[0]
    P = [[i == j for j in range(B)] for i in range(B)] if P is None else [[bool(x) for x in r] for r in P.tolist()]
    total = S.sum() * 0
    for direction in ("retrieval", "annotation"):
        if directions not in ("both", direction):
            continue
        part = 0
        for i in range(B):
            if direction == "retrieval":
                pos, negs = S[i, i], [S[i, j] for j in range(B) if not P[i][j] and j != i]
            else:
                pos, negs = S[i, i], [S[k, i] for k in range(B) if not P[k][i] and k != i]
            num = torch.exp(pos / temperature)
            den = num + sum(torch.exp(s / temperature) for s in negs)
            part = part - torch.log(num / den)
        total = total + (part / B if reduction == "mean" else part)
    return total


def _value_and_grad(fn, S0):
    S = S0.clone().requires_grad_()
    value = fn(S)
    (grad,) = torch.autograd.grad(value, S)
    return value.detach(), grad


def _check(loss_fn, ref_fn, S0, atol=1e-10):
    v1, g1 = _value_and_grad(loss_fn, S0)
    v2, g2 = _value_and_grad(ref_fn, S0)
    assert torch.allclose(v1, v2, atol=atol), (v1, v2)
    assert torch.allclose(g1, g2, atol=atol), (g1, g2)


CONFIGS = list(
    itertools.product(["all", "hardest"], ["uniform", "rank"], ["both", "retrieval", "annotation"], ["sum", "mean"])
)

# ------------------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("negatives,weighting,directions,reduction", CONFIGS)
def test_ranking_matches_brute_force(negatives, weighting, directions, reduction):
    g = torch.Generator().manual_seed(CONFIGS.index((negatives, weighting, directions, reduction)))
    S0 = torch.randn(6, 6, generator=g, dtype=torch.float64) * 0.3
    loss = RankingLoss(
        margin=0.2, negatives=negatives, weighting=weighting, beta=1.7, directions=directions, reduction=reduction
    )
    _check(loss, lambda S: brute_ranking(S, 0.2, negatives, weighting, 1.7, directions, reduction=reduction), S0)


@pytest.mark.parametrize("negatives,weighting", list(itertools.product(["all", "hardest"], ["uniform", "rank"])))
def test_ranking_with_ties(negatives, weighting):
    """Scores on a 1/8 grid: many exact ties among negatives and with the positive (all arithmetic is exact)."""
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        S0 = torch.randint(-3, 4, (7, 7), generator=g).to(torch.float64) / 8
        loss = RankingLoss(margin=0.25, negatives=negatives, weighting=weighting, beta=2.0)
        _check(loss, lambda S, n=negatives, w=weighting: brute_ranking(S, 0.25, n, w, 2.0), S0)


def test_hardest_tie_splits_gradient():
    S = torch.tensor([[0.5, 0.3, 0.3], [0.0, 0.9, 0.0], [0.0, 0.0, 0.9]], dtype=torch.float64, requires_grad=True)
    RankingLoss(margin=0.2, negatives="hardest", directions="retrieval")(S).backward()
    # row 0: hinge 0.2 - 0.5 + 0.3 = 0 (boundary, clamp passes it) -> tied negatives share the gradient
    assert torch.allclose(S.grad[0], torch.tensor([-1.0, 0.5, 0.5], dtype=torch.float64))
    assert torch.equal(S.grad[1:], torch.zeros(2, 3, dtype=torch.float64))


def test_rank_weight_hand_worked():
    # row: positive 0.6 at column 0; negatives 0.9 (above), 0.6 (tie: counts against), 0.1 -> r = 3, N = 4
    sims = torch.tensor([[0.6, 0.9, 0.6, 0.1], [0.1, 0.8, 0.2, 0.3]])
    pos_sims = sims[torch.arange(2), torch.tensor([0, 1])]
    neg = torch.tensor([[False, True, True, True], [True, False, True, True]])
    w = rank_weights(sims, pos_sims, neg, beta=1.0)
    assert torch.allclose(w, torch.tensor([1 + 1 / (4 - 3 + 1), 1 + 1 / 4]))  # row 1 ranks first: 1 + beta / N
    # last place: 1 + beta
    w_last = rank_weights(
        torch.tensor([[0.0, 1.0, 2.0]]), torch.tensor([0.0]), torch.tensor([[False, True, True]]), 3.0
    )
    assert torch.allclose(w_last, torch.tensor([4.0]))


def test_positive_mask_excludes_other_positives():
    # captions 0 and 2 describe the same video (columns 0 and 2 hold that video twice)
    ids = ["v0", "v1", "v0", "v3", "v4"]
    P = positive_mask_from_ids(ids)
    assert P.dtype == torch.bool and P[0, 2] and P[2, 0] and not P[0, 1] and P.diagonal().all()
    g = torch.Generator().manual_seed(4)
    S0 = torch.randn(5, 5, generator=g, dtype=torch.float64)
    for negatives, weighting, directions in itertools.product(
        ["all", "hardest"], ["uniform", "rank"], ["both", "annotation"]
    ):
        loss = RankingLoss(margin=0.2, negatives=negatives, weighting=weighting, directions=directions)
        _check(
            lambda S, lo=loss: lo(S, P),
            lambda S, n=negatives, w=weighting, d=directions: brute_ranking(S, 0.2, n, w, 1.0, d, P),
            S0,
        )
        # and it matters: without the mask the duplicate video is a (very hard) negative
        if negatives == "all":
            assert not torch.allclose(loss(S0, P), loss(S0))
    _check(lambda S: InfoNCELoss(0.1)(S, P), lambda S: brute_infonce(S, 0.1, P=P), S0)


def test_positive_mask_from_ids_rectangular_and_tensor():
    assert torch.equal(
        positive_mask_from_ids([1, 2], [2, 1, 1]), torch.tensor([[False, True, True], [True, False, False]])
    )
    t = torch.tensor([5, 6, 5])
    assert torch.equal(positive_mask_from_ids(t), positive_mask_from_ids([5, 6, 5]))


@pytest.mark.parametrize(
    "directions,reduction", list(itertools.product(["both", "retrieval", "annotation"], ["sum", "mean"]))
)
def test_infonce_matches_brute_force(directions, reduction):
    g = torch.Generator().manual_seed(5)
    S0 = torch.randn(6, 6, generator=g, dtype=torch.float64)
    _check(
        InfoNCELoss(temperature=0.3, directions=directions, reduction=reduction),
        lambda S: brute_infonce(S, 0.3, directions, reduction=reduction),
        S0,
    )


def test_infonce_learnable_temperature_gets_gradient():
    g = torch.Generator().manual_seed(6)
    S = torch.randn(5, 5, generator=g, dtype=torch.float64)
    loss = InfoNCELoss(temperature=0.2, learnable=True).double()
    assert [n for n, _ in loss.named_parameters()] == ["log_scale"]
    assert math.isclose(loss.temperature, 0.2, rel_tol=1e-6)
    loss(S).backward()
    t = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    brute_infonce(S, t).backward()
    # d/d(log 1/T) = -T d/dT
    assert torch.allclose(loss.log_scale.grad, -0.2 * t.grad, atol=1e-10)
    fixed = InfoNCELoss(temperature=0.2)
    assert list(fixed.parameters()) == [] and "log_scale" in dict(fixed.named_buffers())
    assert InfoNCELoss(temperature=1e-4, max_scale=100).temperature == pytest.approx(0.01)


# --------------------------------------------------------------------------------------------- distributed form


def _split_ranks(loss, c, v, sim, P, n_ranks):
    """Sum over simulated ranks of forward_rect with local rows and the gathered global gallery."""
    B = c.shape[0]
    total = 0
    for rows in torch.arange(B).chunk(n_ranks):
        sims_c2v = sim(c[rows], v)  # local captions x all videos
        sims_v2c = sim(c, v[rows]).T  # local videos x all captions, entries S(c_i, v_j)
        total = total + loss.forward_rect(sims_c2v, rows, sims_v2c, rows, P[rows], P.T[rows])
    return total


@pytest.mark.parametrize("name", ["vse", "annotation", "vse++", "mithun-weighted", "infonce", "torabi-pairwise"])
@pytest.mark.parametrize("sim_name", ["cosine", "order"])
def test_rectangular_sum_over_ranks_equals_global(name, sim_name):
    g = torch.Generator().manual_seed(7)
    B, D = 8, 5
    c0 = torch.rand(B, D, generator=g, dtype=torch.float64)
    v0 = torch.rand(B, D, generator=g, dtype=torch.float64)
    P = positive_mask_from_ids([0, 1, 2, 0, 4, 5, 2, 7])
    sim = cosine_similarity if sim_name == "cosine" else order_similarity
    loss = create_loss(name, reduction="sum")

    c1, v1 = c0.clone().requires_grad_(), v0.clone().requires_grad_()
    global_loss = loss(sim(c1, v1), P)
    global_loss.backward()
    c2, v2 = c0.clone().requires_grad_(), v0.clone().requires_grad_()
    ranks_loss = _split_ranks(loss, c2, v2, sim, P, n_ranks=2)
    ranks_loss.backward()
    assert torch.allclose(ranks_loss, global_loss, atol=1e-10)
    # gradients too, when the gather passes gradients back (torch.distributed.nn.all_gather)
    assert torch.allclose(c1.grad, c2.grad, atol=1e-10) and torch.allclose(v1.grad, v2.grad, atol=1e-10)

    mean_loss = create_loss(name, reduction="mean")
    per_rank = [
        mean_loss.forward_rect(sim(c0[r], v0), r, sim(c0, v0[r]).T, r, P[r], P.T[r]) for r in torch.arange(B).chunk(2)
    ]
    assert torch.allclose(sum(per_rank) / 2, mean_loss(sim(c0, v0), P), atol=1e-10)


def test_rect_direction_inputs():
    S = torch.randn(3, 5)
    ann = create_loss("annotation")
    assert torch.isfinite(ann.forward_rect(None, None, S, torch.tensor([0, 1, 2])))  # c2v not needed
    with pytest.raises(ValueError, match="needs sims_c2v"):
        create_loss("vse").forward_rect(None, None, S, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="positive indices"):
        create_loss("vse").forward_rect(S, torch.tensor([0, 1, 5]), S, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="square"):
        create_loss("vse")(S)


def test_single_item_batch_has_no_negatives():
    for name in list_losses():
        S = torch.tensor([[0.3]], requires_grad=True)
        value = create_loss(name)(S)
        value.backward()
        assert value.item() == 0.0 and torch.isfinite(S.grad).all()


# ------------------------------------------------------------------------------------------------------ presets


def test_presets_carry_paper_settings():
    assert set(list_losses()) >= {"vse", "annotation", "vse++", "mithun-weighted", "infonce"}
    vse, ann, vpp, mw = (create_loss(n) for n in ["vse", "annotation", "vse++", "mithun-weighted"])
    assert (vse.negatives, vse.weighting, vse.directions, vse.margin, vse.similarity) == (
        "all",
        "uniform",
        "both",
        0.2,
        "cosine",
    )  # Mithun eq. 1, alpha = 0.2
    assert (ann.negatives, ann.directions, ann.margin, ann.similarity) == ("all", "annotation", 0.05, "order")
    tp = create_loss("torabi-pairwise")  # Torabi eq. 4: alpha = 0.05, order similarity (eq. 3)
    assert (tp.negatives, tp.directions, tp.margin, tp.similarity) == ("all", "both", 0.05, "order")
    assert (vpp.negatives, vpp.weighting, vpp.directions, vpp.margin) == ("hardest", "uniform", "both", 0.2)
    assert (mw.negatives, mw.weighting, mw.beta, mw.margin) == ("hardest", "rank", 1.0, 0.2)
    assert isinstance(create_loss("infonce"), InfoNCELoss)
    assert all(p.citation for p in LOSS_PRESETS.values())
    assert create_loss("vse++", margin=0.1).margin == 0.1
    with pytest.raises(LossConfigError, match="unknown loss"):
        create_loss("triplet")
    with pytest.raises(LossConfigError):
        create_loss("vse", temperature=0.1)
    with pytest.raises(LossConfigError, match="unknown negatives"):
        RankingLoss(negatives="semi-hard")


def test_forward_embeddings_uses_preset_similarity():
    g = torch.Generator().manual_seed(8)
    c, v = torch.rand(4, 3, generator=g), torch.rand(4, 3, generator=g)
    ann = create_loss("annotation")
    assert torch.allclose(ann.forward_embeddings(c, v), ann(order_similarity(c, v)))
    vse = create_loss("vse")
    assert torch.allclose(vse.forward_embeddings(c, v), vse(cosine_similarity(c, v)))
