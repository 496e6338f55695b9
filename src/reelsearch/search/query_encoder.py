"""Query encoding for a searcher that serves many clients: concurrent queries share one pass through the text
encoder, and recent queries' embeddings are kept in an LRU cache.

The text encoder (a transformer over MiniLM token features for the default model) costs about as much for a batch
of 8 short queries as for 3 single ones on one core, so batching doubles what one serving process answers
(docs/benchmarks.md, "Serving throughput"). One thread owns the model: callers queue their texts; whenever it is
free it takes every waiting single query (up to ``max_batch``) and encodes them together. Nothing waits for a batch
to fill: an idle server encodes a lone query at once. A float32 text encoder gives every query exactly what it
would get alone; int8 MiniLM (``Searcher(text_encoder="int8")``) quantises activations per batch, so a query's embedding
moves a little with its batch-mates (cosine 0.985-1; ``reelsearch.text.int8``). Requests for many texts (annotate's
captions) run as their own call. Owning the model in one thread also keeps its tokenizer, which is not safe to call
from several threads at once, single-threaded.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np
import torch

Encode = Callable[[list[str]], np.ndarray]  # texts -> embeddings [N, D] (the model's encode_text)
#: How long ``close`` waits for the worker to finish the jobs queued before it.
JOIN_SECONDS = 30.0


class QueryEncoder:
    """``one(text)`` and ``many(texts)`` -> the model's caption embeddings, through ``encode`` run by one worker
    thread.

    ``one`` is cached (``cache_size`` most recent texts; 0 turns the cache off) and batched with concurrent
    calls (at most ``max_batch`` texts per model call; 1 turns batching off). ``stats`` counts cache hits, model
    calls and the texts they encoded.
    """

    def __init__(self, encode: Encode, *, max_batch: int = 32, cache_size: int = 1024):
        self.encode = encode
        self.max_batch = max(1, int(max_batch))
        self.cache_size = max(0, int(cache_size))
        self.stats = {"hits": 0, "calls": 0, "encoded": 0}
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._pid = None
        self.thread: threading.Thread | None = None  # the worker, once started

    # -- public ---------------------------------------------------------------------------------------------
    def one(self, text: str) -> np.ndarray:
        """Embeddings [1, D] of one query (from the cache, or batched with concurrent queries)."""
        with self._cache_lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                self.stats["hits"] += 1
                return hit
        out = self._submit([text], single=True)
        if self.cache_size:
            with self._cache_lock:
                self._cache[text] = out
                self._cache.move_to_end(text)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return out

    def many(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings [N, D] of ``texts`` in one model call (not cached)."""
        return self._submit(list(texts), single=False)

    def clear(self) -> None:
        """Empty the cache of recent queries' embeddings."""
        with self._cache_lock:
            self._cache.clear()

    def close(self) -> None:
        """Stop the worker thread (after the jobs already queued) and wait for it to end, so that nothing the model
        holds is released in it while the interpreter exits (a C++ library's destructor in a daemon thread at exit
        aborts the process: "terminate called without an active exception"); a later call starts a new one."""
        with self._start_lock:
            worker = None
            if self._queue is not None and self._pid == os.getpid():
                self._queue.put(None)
                worker = self.thread
            self._queue = None
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=JOIN_SECONDS)

    # -- the worker -----------------------------------------------------------------------------------------
    def _submit(self, texts: list[str], single: bool) -> np.ndarray:
        job: Future = Future()
        self._jobs().put((texts, single, job))
        return job.result()

    def _jobs(self) -> queue.SimpleQueue:
        """The queue of the worker thread, started on first use (and again in a forked child, which has none)."""
        with self._start_lock:
            if self._queue is None or self._pid != os.getpid():
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                self.thread = threading.Thread(target=self._work, args=(self._queue,), daemon=True,
                                               name="reelsearch-query-encoder")
                self.thread.start()
            return self._queue

    def _work(self, jobs: queue.SimpleQueue) -> None:
        while (first := jobs.get()) is not None:
            singles, others = [], []
            (singles if first[1] else others).append(first)
            while len(singles) < self.max_batch:  # everything already waiting, without waiting for more
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:  # closing: finish what was taken, then stop
                    jobs.put(None)
                    break
                (singles if job[1] else others).append(job)
            if singles:
                self._run_batch(singles)
            for texts, _, future in others:
                self._run(texts, [future])

    def _run_batch(self, singles: list) -> None:
        texts = list(dict.fromkeys(t[0][0] for t in singles))  # the same query twice is encoded once
        try:
            out = self._call(texts)
        except Exception:  # find the culprit: each query alone, so one bad text fails alone
            for texts_, _, future in singles:
                self._run(texts_, [future])
            return
        row = {t: i for i, t in enumerate(texts)}
        for (text,), _, future in singles:
            i = row[text]
            future.set_result(out[i:i + 1].copy())

    def _run(self, texts: list[str], futures: list[Future]) -> None:
        try:
            out = self._call(texts)
        except BaseException as exc:  # handed to the caller, who raises it
            for f in futures:
                f.set_exception(exc)
            return
        for f in futures:
            f.set_result(out)

    def _call(self, texts: list[str]) -> np.ndarray:
        with torch.no_grad():
            out = self.encode(texts)
        self.stats["calls"] += 1
        self.stats["encoded"] += len(texts)
        return out
