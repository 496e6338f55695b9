"""Distributed data parallel through torchrun: gloo on CPU, NCCL on GPU, negatives gathered across ranks.

Each rank embeds its share of the global batch; embeddings are all-gathered *with gradients* so every rank scores its
local queries against the whole global gallery (the hardest negative is the global one). Each rank's loss holds its
own rows of the global loss; gradients are summed across ranks, so one step equals a single-process step on the
global batch (up to float rounding), without a DistributedDataParallel wrapper.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from reelsearch.models.encoders.attention import FrameStates
from reelsearch.process_group import leave_group


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device: str | None = None) -> DistInfo:
    """Join the process group torchrun describes in the environment (a no-op single process otherwise)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    want_cuda = torch.cuda.is_available() if device in (None, "auto") else str(device).startswith("cuda")
    if world <= 1:
        return DistInfo(device=torch.device("cuda" if want_cuda else (device or "cpu").replace("auto", "cpu")))
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if want_cuda else "gloo")
    dev = torch.device(f"cuda:{local}") if want_cuda else torch.device("cpu")
    if want_cuda:
        torch.cuda.set_device(dev)
    return DistInfo(rank=rank, world_size=world, local_rank=local, device=dev)


def gather_with_grad(x, info: DistInfo):
    """Concatenate ``x`` from all ranks along dim 0; gradients flow back to the rank that owns each row.

    ``x`` is a tensor, or the FrameStates of a frame-attention model (padded in time to the longest rank's); it is
    gathered in float32 (a bf16-autocast forward's outputs included: not every backend reduces bfloat16).
    """
    if not info.enabled:
        return x
    from torch.distributed.nn.functional import all_gather  # noqa: PLC0415 - not in every torch build; torchrun only

    if torch.is_tensor(x):
        return torch.cat(all_gather(x.float().contiguous()), dim=0)

    t = torch.tensor([x.keys.size(1)], device=x.keys.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    pad = int(t.item()) - x.keys.size(1)
    keys, values = (torch.nn.functional.pad(a.float(), (0, 0, 0, pad)) for a in (x.keys, x.values))
    lengths = [torch.zeros_like(x.lengths) for _ in range(info.world_size)]
    dist.all_gather(lengths, x.lengths.contiguous())
    return FrameStates(torch.cat(all_gather(keys.contiguous()), 0), torch.cat(all_gather(values.contiguous()), 0),
                       torch.cat(lengths, 0))


def all_reduce_grads(params, info: DistInfo) -> None:
    """Sum parameter gradients over ranks (each rank's loss is its share of the global loss)."""
    if not info.enabled:
        return
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)


def all_reduce_scalar(value: float, info: DistInfo) -> float:
    """Sum a python float over ranks."""
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    """Leave the process group, every rank together (``reelsearch.process_group.leave_group``: a barrier, then the
    group destroyed); the process then ends by ``process_group.leave`` (the CLI's entry calls it once everything is
    written; it says why)."""
    if info.enabled:
        leave_group()
