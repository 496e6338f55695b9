"""Similarity matrices against per-pair loops written from the papers' formulas (values and gradients)."""

from __future__ import annotations

import math

import pytest
import torch

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.similarity import (
    SIMILARITIES,
    _tiles,
    cosine_similarity,
    get_similarity,
    order_similarity,
)


def _loop_cosine(c: torch.Tensor, v: torch.Tensor) -> list[list[float]]:
    out = []
    for ci in c.tolist():
        row = []
        for vj in v.tolist():
            dot = sum(a * b for a, b in zip(ci, vj, strict=True))
            row.append(dot / (math.sqrt(sum(a * a for a in ci)) * math.sqrt(sum(b * b for b in vj))))
        out.append(row)
    return out


def _loop_order(c: torch.Tensor, v: torch.Tensor) -> list[list[float]]:
    """Torabi et al. 2016 eq. 3: S(c, v) = -||max(0, c - v)||^2, one pair and one coordinate at a time."""
    return [[-sum(max(0.0, a - b) ** 2 for a, b in zip(ci, vj, strict=True)) for vj in v.tolist()] for ci in c.tolist()]


def _order_pairwise_autograd(c: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Same formula with plain autograd, pair by pair (the independent reference for gradients)."""
    return torch.stack([torch.stack([-(ci - vj).clamp(min=0).pow(2).sum() for vj in v]) for ci in c])


def test_cosine_matches_loop_and_normalized_flag():
    g = torch.Generator().manual_seed(0)
    c, v = torch.randn(5, 7, generator=g, dtype=torch.float64), torch.randn(4, 7, generator=g, dtype=torch.float64)
    s = cosine_similarity(c, v)
    assert s.shape == (5, 4)
    assert torch.allclose(s, torch.tensor(_loop_cosine(c, v), dtype=torch.float64), atol=1e-12)
    cn, vn = c / c.norm(dim=1, keepdim=True), v / v.norm(dim=1, keepdim=True)
    assert torch.allclose(cosine_similarity(cn, vn, normalized=True), s, atol=1e-12)
    # normalized=True trusts the caller: un-normalised inputs give the raw dot product.
    assert torch.allclose(cosine_similarity(c, v, normalized=True), c @ v.T)


def test_cosine_zero_vector_is_zero_not_nan():
    s = cosine_similarity(torch.zeros(1, 3), torch.ones(2, 3))
    assert torch.equal(s, torch.zeros(1, 2))


@pytest.mark.parametrize("chunk_size", [1, 7, 30, 1 << 22])
def test_order_matches_loop_for_any_chunking(chunk_size):
    g = torch.Generator().manual_seed(1)
    c, v = torch.rand(9, 6, generator=g, dtype=torch.float64), torch.rand(11, 6, generator=g, dtype=torch.float64)
    s = order_similarity(c, v, chunk_size=chunk_size)
    assert s.shape == (9, 11) and s.dtype == torch.float64
    assert torch.allclose(s, torch.tensor(_loop_order(c, v), dtype=torch.float64), atol=1e-13)


def test_order_hand_worked_and_asymmetric():
    c = torch.tensor([[0.5, 0.1, 0.0]])
    v = torch.tensor([[0.2, 0.3, 0.0], [0.6, 0.2, 0.1]])
    # pair 0: violation (0.3, 0, 0) -> -0.09; pair 1: v dominates c everywhere -> 0 (perfect order)
    assert torch.allclose(order_similarity(c, v), torch.tensor([[-0.09, 0.0]]))
    # asymmetric: swapping the roles of caption and video changes the score: (0, 0.2, 0) and (0.1, 0.1, 0.1)
    assert torch.allclose(order_similarity(v, c).T, torch.tensor([[-0.04, -0.03]]))


@pytest.mark.parametrize("chunk_size", [1, 13, 1 << 22])
def test_order_gradients_match_autograd_of_formula(chunk_size):
    g = torch.Generator().manual_seed(2)
    c0, v0 = torch.rand(5, 4, generator=g, dtype=torch.float64), torch.rand(6, 4, generator=g, dtype=torch.float64)
    w = torch.randn(5, 6, generator=g, dtype=torch.float64)
    c1, v1 = c0.clone().requires_grad_(), v0.clone().requires_grad_()
    (order_similarity(c1, v1, chunk_size=chunk_size) * w).sum().backward()
    c2, v2 = c0.clone().requires_grad_(), v0.clone().requires_grad_()
    (_order_pairwise_autograd(c2, v2) * w).sum().backward()
    assert torch.allclose(c1.grad, c2.grad, atol=1e-12)
    assert torch.allclose(v1.grad, v2.grad, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: order_similarity(a, b, chunk_size=chunk_size), (c1, v1))


def test_order_gradient_only_for_inputs_that_need_it():
    c = torch.rand(3, 4, requires_grad=True)
    v = torch.rand(5, 4)
    order_similarity(c, v).sum().backward()
    assert c.grad is not None and c.grad.shape == c.shape and v.grad is None


def test_order_keeps_no_n_m_d_tensor_for_backward():
    """Memory bound: nothing of size N*M*D is saved between forward and backward, and tiles obey chunk_size."""
    n, m, d, chunk = 40, 50, 64, 5000
    saved: list[int] = []

    def pack(t):
        saved.append(t.numel())
        return t

    c = torch.rand(n, d, requires_grad=True)
    v = torch.rand(m, d, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        s = order_similarity(c, v, chunk_size=chunk)
    s.sum().backward()
    assert saved and max(saved) <= max(n, m) * d < n * m * d
    tn, tm = _tiles(n, m, d, chunk)
    assert tn * tm * d <= chunk and tn >= 1 and tm >= 1


@pytest.mark.parametrize("n,m,d,chunk", [(1000, 5000, 1024, 1 << 22), (3, 2, 10, 1), (0, 5, 4, 100), (7, 9, 1, 10**9)])
def test_tiles_bounded(n, m, d, chunk):
    tn, tm = _tiles(n, m, d, chunk)
    assert tn >= 1 and tm >= 1
    assert tn * tm * d <= max(chunk, d)  # one (caption, video) pair is the smallest possible tile


def test_empty_inputs():
    assert order_similarity(torch.zeros(0, 4), torch.rand(3, 4)).shape == (0, 3)
    assert cosine_similarity(torch.rand(2, 4), torch.zeros(0, 4)).shape == (2, 0)


def test_registry_and_errors():
    assert set(SIMILARITIES) == {"cosine", "order"}
    assert get_similarity("cosine") is cosine_similarity and get_similarity("order") is order_similarity
    with pytest.raises(ConfigError, match="unknown similarity 'dot'"):
        get_similarity("dot")
    assert issubclass(ConfigError, ReelsearchError)
    with pytest.raises(ValueError, match="embedding sizes differ"):
        order_similarity(torch.rand(2, 3), torch.rand(2, 4))
    with pytest.raises(ConfigError):
        order_similarity(torch.rand(2, 3), torch.rand(2, 3), chunk_size=0)
