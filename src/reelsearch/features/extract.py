"""Batch feature extraction: decode in parallel workers, run extractors in batches, write a FeatureStore.

Resumable (a key already stored for a modality is skipped for it), atomic (the FeatureStore commits every
``commit_every`` items; a killed run loses at most the uncommitted ones), and one bad item never stops the rest:
its error goes to ``STORE/errors.jsonl``. Videos are decoded once per item for all frame modalities.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib
import inspect
import json
import multiprocessing
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reelsearch.errors import ReelsearchError
from reelsearch.features.extractors import EXTRACTORS, create_extractor
from reelsearch.features.jobs import Job
from reelsearch.features.store import FeatureStore, FeatureStoreError
from reelsearch.io import atomic_write_text
from reelsearch.media.decode import SamplingPolicy, decode_audio, decode_frames

ERRORS_FILE = "errors.jsonl"


@dataclass
class ExtractConfig:
    """How one extraction run works (what it extracts is the pipeline's recipes; see ``reelsearch extract --help``)."""

    workers: int = 2
    executor: str = "thread"  # "thread" | "process"
    batch_size: int | None = None  # frames per model forward pass (None: the extractor's default)
    call_frames: int = 64  # frames of several items gathered into one extractor call
    device: str | None = None
    commit_every: int = 256
    decode_threads: int = 0
    progress: bool = True


@dataclass
class ExtractSummary:
    """Counts of one run: per modality items added and already done; failed items; seconds."""

    total: int = 0
    added: dict[str, int] = field(default_factory=dict)
    already: dict[str, int] = field(default_factory=dict)
    absent: dict[str, int] = field(default_factory=dict)  # e.g. audio of a video without sound, motion of an image
    errors: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed_items(self) -> int:
        return len({(e.get("id"), e.get("path")) for e in self.errors})

    def line(self, errors_path: Path | None = None) -> str:
        parts = [f"{m} +{self.added.get(m, 0)} (done before {self.already.get(m, 0)}"
                 + (f", none {self.absent[m]}" if self.absent.get(m) else "") + ")" for m in self.added]
        rate = self.total / self.seconds if self.seconds > 0 else 0.0
        failed = f"{self.failed_items} failed" + (f" (see {errors_path})" if self.failed_items and errors_path else "")
        return f"extract: {self.total} items; {'; '.join(parts)}; {failed}; {self.seconds:.1f} s ({rate:.1f} items/s)"


@dataclass
class Decoded:
    """What a worker decoded for one job: frames and/or audio, or an error per modality group."""

    job: Job
    frames: object = None  # media.decode.Frames
    audio: np.ndarray | None = None
    audio_rate: int = 0
    frame_error: str | None = None
    audio_error: str | None = None


def decode_job(job: Job, need_frames: bool, audio_rate: int | None, policy: SamplingPolicy,
               short_side: int | None, threads: int = 0, with_next: bool = False) -> Decoded:
    """Decode what the pending modalities of ``job`` need (runs in a worker thread or process)."""
    out = Decoded(job, audio_rate=audio_rate or 0)
    if job.path is None:
        out.frame_error = out.audio_error = "no media file for this item"
        return out
    if need_frames:
        try:
            out.frames = decode_frames(job.path, policy, short_side=short_side, start=job.start, end=job.end,
                                       threads=threads, with_next=with_next)
        except ReelsearchError as exc:
            out.frame_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - any decoder failure is this item's error
            out.frame_error = f"{job.shown}: {type(exc).__name__}: {exc}"
    if audio_rate:
        try:
            out.audio = decode_audio(job.path, audio_rate, start=job.start, end=job.end)
        except ReelsearchError as exc:
            out.audio_error = str(exc)
        except Exception as exc:  # noqa: BLE001
            out.audio_error = f"{job.shown}: {type(exc).__name__}: {exc}"
    return out


def motion_of_pairs(extractor, frames) -> np.ndarray:
    """One motion row per sampled frame: the extractor on (frame, the frame decoded right after it)."""
    pairs = zip(frames.images, frames.next_images, strict=True)
    rows = [np.asarray(extractor.extract_frames(np.stack([a, b])))[:1] for a, b in pairs]
    return np.concatenate(rows)


def make_extractor(name: str, device: str | None = None, batch_size: int | None = None, **extra):
    """create_extractor(name, **extra) with ``device`` / ``batch_size`` passed when its constructor takes them."""
    options = dict(extra)
    try:
        module, factory = EXTRACTORS[name].split(":")
        params = inspect.signature(getattr(importlib.import_module(module), factory)).parameters
        if device is not None and "device" in params:
            options["device"] = device
        if batch_size is not None and "batch_size" in params:
            options["batch_size"] = batch_size
    except (KeyError, ValueError, TypeError):
        pass
    return create_extractor(name, **options)


class _FrameBatcher:
    """Collects per-frame extractor inputs of several items (same frame size) and runs them in one call."""

    def __init__(self, extractor, batch_size: int, emit):
        self.extractor, self.batch_size, self.emit = extractor, batch_size, emit
        self.groups: dict[tuple, list] = {}

    def add(self, job: Job, frames, meta: dict) -> None:
        shape = frames.images.shape[1:]
        group = self.groups.setdefault(shape, [])
        group.append((job, frames.images, meta))
        if sum(len(x[1]) for x in group) >= self.batch_size:
            self.flush(shape)
        elif sum(len(x[1]) for g in self.groups.values() for x in g) > 4 * self.batch_size:
            self.flush(max(self.groups, key=lambda s: len(self.groups[s])))

    def flush(self, shape=None) -> None:
        for s in [shape] if shape is not None else list(self.groups):
            group = self.groups.pop(s, [])
            if group:
                self._run(group)

    def _run(self, group) -> None:
        try:
            feats = np.asarray(self.extractor.extract_frames(np.concatenate([x[1] for x in group])))
            if len(feats) != sum(len(x[1]) for x in group):
                raise ValueError("extractor output is not one row per frame")
        except Exception:  # noqa: BLE001 - isolate the failing item: run them one by one
            for job, images, meta in group:
                self.emit(job, lambda images=images: self.extractor.extract_frames(images), meta)
            return
        start = 0
        for job, images, meta in group:
            part = feats[start : start + len(images)]
            start += len(images)
            self.emit(job, lambda part=part: part, meta)


def run_extraction(jobs: list[Job], store_root: str | Path, pipeline, config: ExtractConfig | None = None,
                   problems: list[dict] | None = None) -> ExtractSummary:
    """Extract every feature of ``pipeline`` (a ``FeaturePipeline``: its recipes name the features) for ``jobs``
    into the FeatureStore at ``store_root``, each feature stored with its recipe; errors go to errors.jsonl.

    Resumable: a key already stored for a feature is skipped for it. A store whose feature was made by another
    recipe is refused (ConfigError) before any work.
    """
    config = config or ExtractConfig()
    t0 = time.perf_counter()
    store = open_store(store_root)
    summary = ExtractSummary(total=len(jobs))
    summary.errors.extend(problems or [])
    names = list(pipeline.recipes)
    for name in names:
        store.check_recipe(name, pipeline.recipes[name])
    errors_path = Path(store_root) / ERRORS_FILE
    try:
        # resumption: which keys still need which feature (read before loading any model)
        pending: list[tuple[Job, list[str]]] = []
        for name in names:
            summary.added[name] = summary.already[name] = 0
        for job in jobs:
            todo = [n for n in names if not store.has(n, job.key)]
            for n in names:
                if n not in todo:
                    summary.already[n] += 1
            if todo:
                pending.append((job, todo))
        if pending:
            _run_pending(pending, store, pipeline, config, summary, tqdm)
    finally:
        summary.seconds = time.perf_counter() - t0
        write_errors(errors_path, summary.errors)
    return summary


def open_store(root):
    """The FeatureStore at ``root``, created when missing (retrying while several ranks create it at once)."""
    for attempt in range(20):  # several ranks may create the same root at once
        try:
            return FeatureStore(root)
        except FeatureStoreError:
            if attempt == 19:
                raise
            time.sleep(0.1)


def write_errors(path: Path, errors: list[dict]) -> None:
    """``errors`` as JSON lines at ``path`` (STORE/errors.jsonl; atomic), or nothing when there are none and none
    were there."""
    if errors or path.exists():
        atomic_write_text(path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors))


def _run_pending(pending, store, pipeline, config: ExtractConfig, summary: ExtractSummary, tqdm) -> None:
    names = list(pipeline.recipes)
    with contextlib.ExitStack() as stack:
        writers = {n: stack.enter_context(store.writer(n, pipeline.recipes[n].dim, dtype=pipeline.recipes[n].dtype,
                                                       commit_every=config.commit_every,
                                                       recipe=pipeline.recipes[n])) for n in names}

        def fail(job: Job, name: str, error: str) -> None:
            summary.errors.append({"id": job.key, "path": job.shown, "modality": name, "error": error})

        def emit_for(name):
            def emit(job: Job, compute, meta: dict) -> None:
                try:
                    feats = compute()
                    if feats is None:
                        summary.absent[name] = summary.absent.get(name, 0) + 1
                        return
                    writers[name].add(job.key, np.asarray(feats, dtype=np.float32), meta)
                    summary.added[name] += 1
                except Exception as exc:  # noqa: BLE001 - one item's failure stays that item's
                    ex_name = type(pipeline.extractor(name)).__name__
                    fail(job, name, str(exc) if isinstance(exc, ReelsearchError) else
                         f"{job.shown}: {ex_name}: {exc}")
            return emit

        bar = tqdm(total=len(pending), unit="item", desc="extract", disable=not config.progress, file=sys.stderr,
                   dynamic_ncols=True, smoothing=0.05)
        # per-frame CNNs run on frames of several items at once; an item counts as done when they are stored
        batched = [n for n in pipeline.frame_names if pipeline.recipes[n].motion_input is None
                   and getattr(pipeline.extractor(n), "per_frame", False)]
        waiting: dict[str, int] = {}

        def done_one(job: Job) -> None:
            waiting[job.key] -= 1
            if not waiting[job.key]:
                bar.update(1)

        batchers = {}
        for n in batched:
            emit_n = emit_for(n)

            def emit_and_count(job, compute, meta, emit_n=emit_n):
                emit_n(job, compute, meta)
                done_one(job)

            batchers[n] = _FrameBatcher(pipeline.extractor(n), max(1, config.call_frames, config.batch_size or 0),
                                        emit_and_count)
        emits = {n: emit_for(n) for n in names if n not in batchers}

        for job, todo, decoded in _decoded_stream(pending, pipeline, config):
            waiting[job.key] = 1
            meta = _frame_meta(job, decoded, pipeline)
            for n in todo:
                if n in batchers and decoded.frame_error is None:
                    waiting[job.key] += 1
                    batchers[n].add(job, decoded.frames, meta)
                elif n in batchers:
                    fail(job, n, decoded.frame_error)
                else:
                    emits[n](job, lambda n=n, d=decoded: pipeline.compute(n, d), meta if n in pipeline.frame_names
                             else _audio_meta(job, decoded))
            done_one(job)
        for b in batchers.values():
            b.flush()
        bar.close()


def _frame_meta(job: Job, decoded: Decoded, pipeline) -> dict | None:
    frames = decoded.frames
    if frames is None:
        return None
    meta = {"path": job.shown, "timestamps": np.round(frames.timestamps, 4).tolist(),
            "duration": round(frames.duration, 4), "fps": round(frames.fps, 4), "width": frames.width,
            "height": frames.height, "sampling": str(pipeline.policy), "image": frames.is_image}
    if job.start is not None or job.end is not None:
        meta.update(start=job.start, end=job.end)
    return meta


def _audio_meta(job: Job, decoded: Decoded) -> dict | None:
    if decoded.audio is None:
        return None
    return {"path": job.shown, "sample_rate": decoded.audio_rate,
            "duration": round(len(decoded.audio) / max(1, decoded.audio_rate), 4)}


def _decoded_stream(pending, pipeline, config: ExtractConfig):
    """Yield (job, todo, Decoded) in job order, decoding ahead in ``config.workers`` threads or processes."""

    def args(job, todo):
        names = list(todo)
        need_frames = any(n in pipeline.frame_names for n in names)
        rate = pipeline.audio_rate if any(n in pipeline.audio_names for n in names) else None
        pairs = any(pipeline.recipes[n].motion_input == "pairs" for n in names)
        return (job, need_frames, rate, pipeline.policy, pipeline.short_side, config.decode_threads, pairs)

    if config.workers <= 0:
        for job, todo in pending:
            yield job, todo, decode_job(*args(job, todo))
        return
    if config.executor == "process":
        ctx = multiprocessing.get_context("forkserver" if sys.platform != "win32" else "spawn")
        pool = cf.ProcessPoolExecutor(config.workers, mp_context=ctx)
    elif config.executor == "thread":
        pool = cf.ThreadPoolExecutor(config.workers, thread_name_prefix="decode")
    else:
        raise ReelsearchError(f"unknown executor {config.executor!r}; use thread or process")
    ahead = 3 * config.workers + 2  # decoded items in flight (the batcher gathers images, not this window)
    window: deque = deque()
    it = iter(pending)
    try:
        for job, todo in it:
            window.append((job, todo, pool.submit(decode_job, *args(job, todo))))
            if len(window) >= ahead:
                break
        while window:
            job, todo, fut = window.popleft()
            nxt = next(it, None)
            if nxt is not None:
                window.append((nxt[0], nxt[1], pool.submit(decode_job, *args(*nxt))))
            try:
                result = fut.result()
            except Exception as exc:  # noqa: BLE001 - a crashed worker process fails this item only
                result = Decoded(job, frame_error=f"{job.shown}: decoder crashed: {exc}",
                                 audio_error=f"{job.shown}: decoder crashed: {exc}")
            yield job, todo, result
    finally:
        for _, _, fut in window:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
