"""forward_rect under real torch.distributed (2 CPU processes, gloo): the gradient of the global-batch loss.

Each rank embeds its local half of a batch with the same linear model, gathers all embeddings with the
differentiable ``torch.distributed.nn.all_gather`` (as docs/losses.md recommends) and backpropagates its
``forward_rect`` loss; summing the ranks' parameter gradients must give the single-process gradient of the
loss on the whole batch ("sum" reduction), and the ranks' losses must add up to that loss.
"""

from __future__ import annotations

import pytest
import torch

from reelsearch.losses import create_loss, positive_mask_from_ids
from reelsearch.similarity import get_similarity

WORLD, B, D_IN, D = 2, 8, 6, 4
VIDEO_IDS = [0, 1, 2, 0, 4, 5, 2, 7]  # two videos appear twice: their caption pairs are mutual positives


def _problem():
    g = torch.Generator().manual_seed(11)
    text = torch.randn(B, D_IN, generator=g, dtype=torch.float64)
    video = torch.randn(B, D_IN, generator=g, dtype=torch.float64)
    w_text = torch.randn(D_IN, D, generator=g, dtype=torch.float64)
    w_video = torch.randn(D_IN, D, generator=g, dtype=torch.float64)
    return text, video, w_text, w_video


def _embed(x, w, similarity):
    e = x @ w
    return e.abs() if similarity == "order" else e  # order embeddings are non-negative (Torabi)


def _worker(rank: int, init_file: str, out_dir: str, names: list[str]) -> None:
    import torch.distributed as dist
    import torch.distributed.nn as dist_nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        text, video, w_text0, w_video0 = _problem()
        rows = torch.arange(B).chunk(WORLD)[rank]
        results = {}
        for name in names:
            loss = create_loss(name, reduction="sum")
            sim = get_similarity(loss.similarity)
            w_text, w_video = w_text0.clone().requires_grad_(), w_video0.clone().requires_grad_()
            c_local = _embed(text[rows], w_text, loss.similarity)
            v_local = _embed(video[rows], w_video, loss.similarity)
            c_all = torch.cat(dist_nn.all_gather(c_local))
            v_all = torch.cat(dist_nn.all_gather(v_local))
            mask = positive_mask_from_ids([VIDEO_IDS[i] for i in rows.tolist()], VIDEO_IDS)
            value = loss.forward_rect(sim(c_local, v_all), rows, sim(c_all, v_local).T, rows, mask, mask)
            value.backward()
            grads = torch.cat([w_text.grad.flatten(), w_video.grad.flatten(), value.detach().reshape(1)])
            dist.all_reduce(grads)  # what DDP does (up to its division by the world size)
            results[name] = grads
        if rank == 0:
            torch.save(results, f"{out_dir}/grads.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gradients_equal_global(tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    names = ["vse", "annotation", "vse++", "mithun-weighted", "infonce", "torabi-pairwise"]
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"), str(tmp_path), names), nprocs=WORLD, join=True)
    got = torch.load(tmp_path / "grads.pt", weights_only=True)

    text, video, w_text0, w_video0 = _problem()
    positive = positive_mask_from_ids(VIDEO_IDS)
    for name in names:
        loss = create_loss(name, reduction="sum")
        sim = get_similarity(loss.similarity)
        w_text, w_video = w_text0.clone().requires_grad_(), w_video0.clone().requires_grad_()
        value = loss(sim(_embed(text, w_text, loss.similarity), _embed(video, w_video, loss.similarity)), positive)
        value.backward()
        want = torch.cat([w_text.grad.flatten(), w_video.grad.flatten(), value.detach().reshape(1)])
        assert torch.allclose(got[name], want, atol=1e-10), name
