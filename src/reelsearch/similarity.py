"""Caption-video similarity matrices: cosine and order-violation, plus a name registry.

Below both the models (their score) and the losses (a batch's matrix); :func:`order_score_fn` adapts the order
similarity to numpy score functions for exact index scans.

Every function takes captions first and videos second and returns S[i, j] = S(caption i, video j), shape [N, M].
Rows are captions and columns videos everywhere in reelsearch (losses, evaluation), so one matrix serves both
retrieval directions: a row ranks videos for a caption, a column ranks captions for a video.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from reelsearch.errors import ConfigError

__all__ = [
    "DEFAULT_CHUNK_ELEMENTS",
    "SIMILARITIES",
    "cosine_similarity",
    "get_similarity",
    "order_score_fn",
    "order_similarity",
    "order_violation",
]

#: Default size (elements) of one temporary [n, m, D] block of the order similarity: 1 Mi floats = 4 MiB fp32.
DEFAULT_CHUNK_ELEMENTS = 1 << 20

Similarity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _check_pair(c: torch.Tensor, v: torch.Tensor) -> None:
    if c.dim() != 2 or v.dim() != 2:
        raise ValueError(f"expected 2-D [N, D] and [M, D] embeddings, got shapes {tuple(c.shape)} and {tuple(v.shape)}")
    if c.shape[1] != v.shape[1]:
        raise ValueError(f"embedding sizes differ: captions D={c.shape[1]}, videos D={v.shape[1]}")


def cosine_similarity(c: torch.Tensor, v: torch.Tensor, normalized: bool = False, eps: float = 1e-8) -> torch.Tensor:
    """Cosine similarity matrix [N, M] of captions c [N, D] and videos v [M, D] (Mithun eq. 1, SCDE eq. 11).

    Pass ``normalized=True`` when both inputs are already unit L2 norm (as the joint-space encoders output);
    the result is then the plain matrix product c @ v.T, with no second normalisation. Otherwise each row is
    divided by max(||x||, eps) first (a zero vector has similarity 0 with everything).
    """
    _check_pair(c, v)
    if not normalized:
        c = F.normalize(c, dim=1, eps=eps)
        v = F.normalize(v, dim=1, eps=eps)
    return c @ v.T


def order_violation(c: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Elementwise-paired order violation ||max(0, c - v)||^2 for c [..., D], v [..., D] (broadcasting).

    The reference form of Torabi et al. 2016, eq. 3 (Appendix B.2), from Vendrov et al. 2016: the video sits
    below its caption in the partial order (a caption is an abstraction of the video), which holds when
    v >= c in every coordinate; each coordinate where the caption exceeds the video is a violation.
    """
    return (c - v).clamp_min(0).square().sum(-1)


def _tiles(n: int, m: int, d: int, chunk_size: int) -> tuple[int, int]:
    """Row/column tile sizes (tn, tm), tn * tm * d <= chunk_size (at least one pair), few rows x many columns.

    A few captions against up to 128 videos (8 x 128 x 1024 at the default size, about a core's L2 cache)
    measured fastest on CPU (see docs/losses.md).
    """
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1 (elements of one [n, m, D] block), got {chunk_size}")
    pairs = max(1, chunk_size // max(d, 1))
    tm = max(1, min(m, pairs, 128))
    tn = max(1, min(n, pairs // tm))
    return tn, tm


def _violations(cb: torch.Tensor, vb: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """max(0, c_i - v_j) for a tile, [n, m, D], written into the reusable flat buffer ``buf``."""
    n, m, d = cb.shape[0], vb.shape[0], cb.shape[1]
    viol = buf[: n * m * d].view(n, m, d)
    torch.sub(cb[:, None, :], vb[None, :, :], out=viol)
    return viol.clamp_min_(0)


class _OrderSimilarity(torch.autograd.Function):
    """-||max(0, c_i - v_j)||^2 for all (i, j), computed and differentiated tile by tile.

    Nothing of size [N, M, D] is kept for the backward pass: each tile of violations is recomputed there.
    dS_ij/dc_i = -2 max(0, c_i - v_j), dS_ij/dv_j = +2 max(0, c_i - v_j).
    """

    @staticmethod
    def forward(ctx, c: torch.Tensor, v: torch.Tensor, chunk_size: int) -> torch.Tensor:
        (n, d), m = c.shape, v.shape[0]
        dtype = c.dtype
        tn, tm = _tiles(n, m, d, chunk_size)
        out = torch.empty(n, m, dtype=dtype, device=c.device)
        buf = torch.empty(min(n, tn) * min(m, tm) * d, dtype=dtype, device=c.device)
        for i in range(0, n, tn):
            for j in range(0, m, tm):
                viol = _violations(c[i : i + tn], v[j : j + tm], buf)
                out[i : i + tn, j : j + tm] = torch.linalg.vector_norm(viol, dim=-1).square_().neg_()
        ctx.save_for_backward(c, v)
        ctx.tiles = (tn, tm)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        c, v = ctx.saved_tensors
        tn, tm = ctx.tiles
        need_c, need_v = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        gc = torch.zeros_like(c) if need_c else None
        gv = torch.zeros_like(v) if need_v else None
        (n, d), m = c.shape, v.shape[0]
        buf = torch.empty(min(n, tn) * min(m, tm) * d, dtype=c.dtype, device=c.device)
        grad = grad.to(c.dtype)
        skip_zero_tiles = grad.device.type == "cpu"
        for i in range(0, n, tn):
            for j in range(0, m, tm):
                g = grad[i : i + tn, j : j + tm]
                if skip_zero_tiles and not bool(g.any()):  # e.g. hardest-negative losses; no GPU sync per tile
                    continue
                weighted = _violations(c[i : i + tn], v[j : j + tm], buf).mul_(g[:, :, None])  # g_ij * viol_ij
                if need_c:
                    gc[i : i + tn] -= 2 * weighted.sum(1)
                if need_v:
                    gv[j : j + tm] += 2 * weighted.sum(0)
        return gc, gv, None


def order_similarity(c: torch.Tensor, v: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_ELEMENTS) -> torch.Tensor:
    """Order-violation similarity matrix S[i, j] = -||max(0, c_i - v_j)||^2, shape [N, M].

    Torabi et al. 2016, Appendix B.2, eq. 3: ``S(c, v) = -||max(0, c - v)||^2`` with c the caption embedding
    and v the video embedding (both non-negative there: absolute values of the projections), after the
    order embeddings of Vendrov et al. 2016. It is asymmetric: S(c, v) != S(v, c), so the argument order
    matters (captions first). 0 is the best score; a caption is "implied" by a video that dominates it in
    every coordinate.

    Computed in tiles of at most ``chunk_size`` elements (tile rows x tile columns x D), so memory beyond the
    [N, M] result stays bounded by one tile in both forward and backward (a custom autograd function
    recomputes tiles rather than storing them). Differentiable in c and v (first derivatives).
    """
    _check_pair(c, v)
    dtype = torch.result_type(c, v)
    return _OrderSimilarity.apply(c.to(dtype), v.to(dtype), int(chunk_size))


def order_score_fn(chunk_size: int | None = None, single_thread_queries: int = 4) -> Callable:
    """The order similarity as a score function of exact index scans, ``fn(queries [Q, D], rows [N, D]) -> [Q, N]``
    on numpy arrays (``reelsearch.index``: ``scan(q, k, score_fn)``, ``nearest(q, n, score_fn=...)``).

    Uses :func:`order_similarity` (tiled, bounded memory) without gradients. Up to ``single_thread_queries``
    queries are scored on one torch thread: the tiles of a single query are too small to share, and on a loaded
    2-core machine two threads took 715 ms where one took 15 ms (10,000 x 1024).
    torch's thread count is process-wide: it is set for the call and restored, so concurrent callers in other
    threads may briefly see one thread.
    """
    size = chunk_size or DEFAULT_CHUNK_ELEMENTS

    def score(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():  # read-only views of the index are only read here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            q = torch.from_numpy(np.ascontiguousarray(queries, np.float32))
            v = torch.from_numpy(np.ascontiguousarray(vectors, np.float32))
        before = torch.get_num_threads()
        if len(q) <= single_thread_queries:
            torch.set_num_threads(1)
        try:
            with torch.no_grad():
                return order_similarity(q, v, chunk_size=size).numpy()
        finally:
            torch.set_num_threads(before)

    return score


SIMILARITIES: dict[str, Similarity] = {
    "cosine": cosine_similarity,
    "order": order_similarity,
}


def get_similarity(name: str) -> Similarity:
    """The similarity function registered under ``name`` ("cosine" | "order"): f(captions, videos) -> [N, M]."""
    try:
        return SIMILARITIES[name]
    except KeyError:
        raise ConfigError(f"unknown similarity {name!r}; choose one of {sorted(SIMILARITIES)}") from None
