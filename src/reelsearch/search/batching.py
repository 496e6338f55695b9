"""Micro-batching of the work of concurrent requests (``reelsearch serve``'s threads): the texts they encode and the
vector-index searches they make.

One worker thread per stage takes, whenever it is free, every item waiting (up to ``max_batch``) and runs them in one
call; nothing waits for a batch to fill unless ``max_wait`` says so (then at most that long after the first item),
so a lone request on an idle server runs at once, and under load the batch is whatever queued while the previous
one ran. Two stages use it: the query encoder (``reelsearch.search.query_encoder``: one model call for the batch's
texts) and the Searcher's index stage (one vector-index search for the batch's query vectors, :class:`Prefetched`,
then each request's own search, in order, under the Searcher's lock).
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")
#: How long ``close`` waits for the worker to finish the jobs queued before it.
JOIN_SECONDS = 30.0


class MicroBatcher(Generic[T, R]):
    """``submit(items)`` from any thread -> ``run(batch)``'s results of those items, ``run`` called by one worker
    thread with the items of every job waiting (at most ``max_batch`` items, unless one job has more: its items are
    never split), in the order submitted. ``run(items)`` gives (a list, or yields as each is done: each job is handed
    its results once they are all there, not at the end of the batch) a result or an exception per item: an
    exception for one item is raised to its submitter only; an exception from ``run`` itself to every job of the
    batch not yet answered. ``sizes`` counts the
    batches run by their number of items."""

    def __init__(self, run: Callable[[list[T]], Sequence[R | BaseException]], *, max_batch: int = 32,
                 max_wait: float = 0.0, name: str = "reelsearch-batcher"):
        self.run, self.name = run, name
        self.max_batch, self.max_wait = max(1, int(max_batch)), max(0.0, float(max_wait))
        self.sizes: dict[int, int] = {}
        self._start_lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._from_loop: dict[asyncio.AbstractEventLoop, _LoopJob] = {}  # what each loop submits in this iteration
        self._pid = None
        self.thread: threading.Thread | None = None  # the worker, once started

    def submit(self, items: list[T]) -> list[R | BaseException]:
        """Each item's result, or the exception raised for it (returned, not raised)."""
        if not items:
            return []
        job: Future = Future()
        self._jobs().put((items, job))
        return job.result()

    def submit_async(self, items: list[T]) -> asyncio.Future:
        """``submit`` for an event loop: a future of the loop that the worker settles (by ``call_soon_threadsafe``),
        so that no thread waits for the items. What the loop submits in one of its iterations (the requests it read
        at once) goes to the worker as one job, after that iteration: one batch, one hand-back to the loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not items:
            future.set_result([])
            return future
        waiting = self._from_loop.get(loop)
        if waiting is None:
            waiting = self._from_loop[loop] = _LoopJob(loop)
            loop.call_soon(self._flush, loop)
        waiting.add(items, future)
        return future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        job = self._from_loop.pop(loop)
        self._jobs().put((job.items, job))

    def one(self, item: T) -> R:
        """``item``'s result (its exception raised)."""
        out = self.submit([item])[0]
        if isinstance(out, BaseException):
            raise out
        return out

    def pending(self) -> int:
        """Jobs queued and not yet taken by the worker."""
        return 0 if self._queue is None else self._queue.qsize()

    def close(self) -> None:
        """Stop the worker thread (after the jobs already queued) and wait for it to end, so that nothing a model
        holds is released in it while the interpreter exits (a C++ library's destructor in a daemon thread at exit
        aborts the process); a later call starts a new one."""
        with self._start_lock:
            worker = None
            if self._queue is not None and self._pid == os.getpid():
                self._queue.put(None)
                worker = self.thread
            self._queue = None
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=JOIN_SECONDS)

    def _jobs(self) -> queue.SimpleQueue:
        """The queue of the worker thread, started on first use (and again in a forked child, which has none)."""
        with self._start_lock:
            if self._queue is None or self._pid != os.getpid():
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                self.thread = threading.Thread(target=self._work, args=(self._queue,), daemon=True, name=self.name)
                self.thread.start()
            return self._queue

    def _work(self, jobs: queue.SimpleQueue) -> None:
        while (first := jobs.get()) is not None:
            batch, closing = [first], False
            count, deadline = len(first[0]), time.monotonic() + self.max_wait
            while count < self.max_batch:  # what is waiting; for max_wait after the first, what comes
                wait = deadline - time.monotonic()
                try:
                    job = jobs.get(timeout=wait) if wait > 0 else jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:  # closing: finish what was taken, then stop
                    closing = True
                    break
                batch.append(job)
                count += len(job[0])
            self._run(batch)
            if closing:
                return

    def _run(self, batch: list) -> None:
        """Run ``batch``'s items; each job's result is handed over as soon as ``run`` has yielded its items."""
        items = [item for its, _ in batch for item in its]
        self.sizes[len(items)] = self.sizes.get(len(items), 0) + 1
        jobs, done = iter(batch), []
        its, job = next(jobs)
        try:
            for result in self.run(items):
                done.append(result)
                while job is not None and len(done) == len(its):
                    job.set_result(done)
                    done = []
                    its, job = next(jobs, (None, None))
        except BaseException as exc:  # handed to every caller still waiting, who raises it
            for _, waiting in [(its, job), *jobs]:
                if waiting is not None:
                    waiting.set_exception(exc)


class _LoopJob:
    """The jobs an event loop submitted in one iteration (``submit_async``), run as one: their results handed to
    their futures in the loop's thread by one callback (a future cancelled meanwhile is left alone; a loop that has
    closed is waited for by nobody)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.items, self.futures = loop, [], []

    def add(self, items: list, future: asyncio.Future) -> None:
        self.items.extend(items)
        self.futures.append((len(items), future))

    def set_result(self, results: list) -> None:
        self._settle(results, None)

    def set_exception(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def _settle(self, results: list | None, exc: BaseException | None) -> None:
        def done() -> None:
            start = 0
            for count, future in self.futures:
                if not future.done():
                    if exc is None:
                        future.set_result(results[start:start + count])
                    else:
                        future.set_exception(exc)
                start += count

        try:
            self.loop.call_soon_threadsafe(done)
        except RuntimeError:  # the loop is closed
            pass


class Prefetched:
    """``catalog`` with the vector index's answers for some query vectors searched together (one ``nearest_many``
    for the batch): ``nearest`` of one of them with the same ``n`` and biases is read from ``answers`` ({(vector
    bytes, n, biased): (ids, scores)}), anything else asks ``catalog``; every other attribute is the catalog's.
    ``stats`` counts the answers read ("hits") and the searches asked ("misses")."""

    def __init__(self, catalog, answers: dict[tuple[bytes, int, bool], tuple[list[str], np.ndarray]], stats: dict):
        self.catalog, self.answers, self.stats = catalog, answers, stats

    def __len__(self) -> int:
        return len(self.catalog)

    def __getattr__(self, name: str):
        return getattr(self.catalog, name)

    def nearest(self, query: np.ndarray, n: int, score_fn=None, *, biased: bool = False):
        if score_fn is None:
            found = self.answers.get((np.asarray(query, np.float32).reshape(-1).tobytes(), n, bool(biased)))
            if found is not None:
                self.stats["hits"] = self.stats.get("hits", 0) + 1
                return found[0], found[1]
        self.stats["misses"] = self.stats.get("misses", 0) + 1
        return self.catalog.nearest(query, n, score_fn, biased=biased)


def prefetch(catalog, wanted: Sequence[tuple[np.ndarray, int, bool]], stats: dict) -> Prefetched:
    """``catalog`` with the inner-product ``nearest`` of every (query vector [D], n, biased) in ``wanted`` searched
    in one ``nearest_many`` per distinct (n, biased) (the vector index answers alike alone or in a batch)."""
    answers: dict[tuple[bytes, int, bool], tuple[list[str], np.ndarray]] = {}
    total = len(catalog)
    groups: dict[tuple[int, bool], list[np.ndarray]] = {}
    for vector, n, biased in wanted:
        groups.setdefault((min(n, total), bool(biased)), []).append(np.asarray(vector, np.float32).reshape(-1))
    for (n, biased), vectors in groups.items():
        if n < 1:
            continue
        ids, scores = catalog.nearest_many(np.stack(vectors), n, biased=biased)
        for vector, i, s in zip(vectors, ids, scores, strict=True):
            answers[(vector.tobytes(), n, biased)] = (i, s)
    return Prefetched(catalog, answers, stats)
