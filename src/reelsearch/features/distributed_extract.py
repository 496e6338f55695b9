"""Distributed extraction: rank r extracts every WORLD_SIZE-th item of the key-sorted list, starting at item r, into
STORE/rank-<r>; rank 0 waits for the others — a gloo barrier under torchrun, else each rank's DONE marker in the store
(file rendezvous) — and merges the shards into STORE. ``reelsearch extract`` runs it when RANK / WORLD_SIZE are set;
``reelsearch extract-merge`` (:func:`merge_shards`) merges by hand. A rank that joined a gloo group leaves it as
training's ranks do (``reelsearch.process_group``), and the CLI's entry ends it by ``process_group.leave``."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from reelsearch.errors import ReelsearchError
from reelsearch.features.extract import (
    ERRORS_FILE,
    ExtractConfig,
    ExtractSummary,
    open_store,
    run_extraction,
    write_errors,
)
from reelsearch.features.jobs import Collected, shard
from reelsearch.features.store import FeatureStore
from reelsearch.io import atomic_write_json
from reelsearch.process_group import leave_group


@dataclass
class ShardRun:
    """What one rank did: its shard's summary and, on rank 0, the merge (:func:`merge_shards`'s report)."""

    root: Path
    rank: int
    world: int
    shard: ExtractSummary
    merged: dict | None = None

    @property
    def failed(self) -> int:
        """Items that failed: the whole run's on rank 0 (after the merge), the rank's own shard's elsewhere."""
        if self.merged is None:
            return self.shard.failed_items
        return len({(e.get("id"), e.get("path")) for e in self.merged["errors"]})

    def shard_line(self) -> str:
        return f"rank {self.rank}/{self.world}: " + self.shard.line(rank_dir(self.root, self.rank) / ERRORS_FILE)

    def merge_line(self) -> str:
        added = ", ".join(f"{m} {n}" for m, n in self.merged["added"].items())
        failed = self.failed
        return (f"extract: merged {self.world} shards into {self.root} ({added}); {failed} failed"
                + (f" (see {self.root / ERRORS_FILE})" if failed else ""))


def dist_env() -> tuple[int, int]:
    """(rank, world_size) from torchrun's environment (RANK / WORLD_SIZE), (0, 1) when absent."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ReelsearchError("RANK and WORLD_SIZE must be integers") from None


def extract_distributed(collected: Collected, store_root: str | Path, pipeline, config: ExtractConfig, rank: int,
                        world: int, merge_timeout: float | None = None,
                        on_shard: Callable[[ShardRun], None] | None = None) -> ShardRun:
    """Rank ``rank`` of ``world``: its share of ``collected`` into STORE/rank-<r> (``run_extraction``), then
    ``on_shard(run)``; rank 0 then waits for every rank (``merge_timeout`` seconds at most) and merges the shards."""
    root = Path(store_root)
    problems = [p for i, p in enumerate(collected.problems) if i % world == rank]
    mine = shard(collected.jobs, rank, world)
    open_store(root)  # the parent store exists before any rank folder appears inside it
    with contextlib.suppress(FileNotFoundError):
        shard_done_marker(root, rank).unlink()
    grouped = _join_process_group(merge_timeout)
    try:
        run = ShardRun(root, rank, world, run_extraction(mine, rank_dir(root, rank), pipeline, config,
                                                         problems=problems))
        write_done_marker(root, rank, run.shard)
        if on_shard is not None:
            on_shard(run)
        if grouped:
            dist.barrier()
        elif rank == 0:
            wait_for_shards(root, world, merge_timeout)
        if rank == 0:
            run.merged = merge_shards(root, world, progress=config.progress)
    except BaseException:
        if grouped:
            leave_group(barrier=False)  # the other ranks may never reach a barrier now
        raise
    if grouped:
        leave_group()  # no rank leaves before the merge is done; the CLI's entry then ends the rank (leave)
    return run


def _join_process_group(timeout: float | None) -> bool:
    """Join a gloo process group when torchrun set MASTER_ADDR/MASTER_PORT (True); else False (file rendezvous)."""
    if not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        return False
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout or 7 * 24 * 3600))
    return True


def rank_dir(store_root: str | Path, rank: int) -> Path:
    return Path(store_root) / f"rank-{rank}"


def shard_done_marker(store_root: str | Path, rank: int) -> Path:
    return rank_dir(store_root, rank) / "DONE.json"


def merge_shards(store_root: str | Path, world_size: int | None = None, progress: bool = True) -> dict:
    """Merge ``STORE/rank-*`` shards into ``STORE`` and concatenate their errors.jsonl into STORE/errors.jsonl:
    ``{"added": {feature: n}, "errors": [...], "shards": [folder, ...]}``."""
    root = Path(store_root)
    if world_size is None:
        shards = sorted(p for p in root.glob("rank-*") if p.is_dir())
    else:
        shards = [rank_dir(root, r) for r in range(world_size)]
    shards = [p for p in shards if (p / "reelsearch-store.json").exists()]
    open_store(root)
    added = FeatureStore.merge(shards, root, progress=progress) if shards else {}
    errors = []
    for p in shards:
        f = p / ERRORS_FILE
        if f.exists():
            errors.extend(json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip())
    write_errors(root / ERRORS_FILE, errors)
    return {"added": added, "errors": errors, "shards": [str(p) for p in shards]}


def run_id() -> str:
    """Identifier shared by the ranks of one manual (non-torchrun) run: REELSEARCH_RUN_ID, else empty."""
    return os.environ.get("REELSEARCH_RUN_ID", "")


def write_done_marker(store_root: str | Path, rank: int, summary: ExtractSummary) -> None:
    atomic_write_json(shard_done_marker(store_root, rank), {
        "rank": rank, "run_id": run_id(), "items": summary.total, "added": summary.added,
        "failed": summary.failed_items, "time": time.time()})


def wait_for_shards(store_root: str | Path, world_size: int, timeout: float | None) -> None:
    """Block until every rank wrote its DONE marker with this run's id (file-based rendezvous)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    missing = list(range(world_size))
    while True:
        missing = [r for r in missing if not _marker_ok(shard_done_marker(store_root, r))]
        if not missing:
            return
        if deadline is not None and time.monotonic() > deadline:
            raise ReelsearchError(f"{store_root}: ranks {missing} did not finish within {timeout:.0f} s; "
                                  f"run `reelsearch extract-merge {store_root}` once they have")
        time.sleep(0.5)


def _marker_ok(marker: Path) -> bool:
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return info.get("run_id", "") == run_id()
