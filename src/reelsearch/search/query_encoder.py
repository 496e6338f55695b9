"""Query encoding for a searcher that serves many clients: concurrent queries share one pass through the text
encoder, and recent queries' embeddings are kept in an LRU cache.

The text encoder (MiniLM and the model's projections for the default model) costs about as much for a batch of 8
short queries as for 3 single ones on one core, so batching multiplies what one serving process answers
(docs/benchmarks.md, "Serving throughput"). One thread owns the model (a ``reelsearch.search.batching.MicroBatcher``):
callers queue their texts; whenever it is free it takes every waiting query (up to ``max_batch``; waiting at most
``max_wait`` seconds for more, 0 by default: an idle server encodes a lone query at once) and encodes them together.
A float32 text encoder gives every query what it would get alone (the padding is masked: equal within float
rounding); int8 MiniLM (``Searcher(text_encoder="int8")``) quantises activations per batch, so a query's embedding
moves a little with its batch-mates (cosine 0.985-1; ``reelsearch.text.int8``). Requests for many texts together
(annotate's captions) run as their own call. Owning the model in one thread also keeps its tokenizer, which is not
safe to call from several threads at once, single-threaded.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

import numpy as np

from reelsearch.search.batching import MicroBatcher

Encode = Callable[[list[str]], np.ndarray]  # texts -> embeddings [N, D] (the model's encode_text)
#: Model calls whose time ``QueryEncoder.timings`` keeps, per batch size.
TIMED_CALLS = 2000


class QueryEncoder:
    """``one(text)``, ``batch(texts)`` and ``many(texts)`` -> the model's caption embeddings, through ``encode`` run
    by one worker thread.

    ``one`` and ``batch`` are cached (``cache_size`` most recent texts; 0 turns the cache off) and batched with
    concurrent calls (at most ``max_batch`` texts per model call, 1 turns batching off; ``max_wait`` seconds waited
    for more). ``stats`` counts cache hits, model calls and the texts they encoded; ``timings`` the milliseconds of
    the latest model calls by their number of texts.
    """

    def __init__(self, encode: Encode, *, max_batch: int = 32, cache_size: int = 1024, max_wait: float = 0.0):
        self.encode = encode
        self.cache_size = max(0, int(cache_size))
        self.stats = {"hits": 0, "calls": 0, "encoded": 0}
        self.timings: dict[int, deque[float]] = {}
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.batcher = MicroBatcher(self._run, max_batch=max_batch, max_wait=max_wait,
                                    name="reelsearch-query-encoder")

    @property
    def max_batch(self) -> int:
        return self.batcher.max_batch

    @max_batch.setter
    def max_batch(self, value: int) -> None:
        self.batcher.max_batch = max(1, int(value))

    @property
    def max_wait(self) -> float:
        return self.batcher.max_wait

    @max_wait.setter
    def max_wait(self, value: float) -> None:
        self.batcher.max_wait = max(0.0, float(value))

    @property
    def thread(self) -> threading.Thread | None:
        """The worker thread, once started."""
        return self.batcher.thread

    # -- public ---------------------------------------------------------------------------------------------
    def one(self, text: str) -> np.ndarray:
        """Embeddings [1, D] of one query (from the cache, or batched with concurrent queries)."""
        out = self.batch([text])[0]
        if isinstance(out, BaseException):
            raise out
        return out

    async def one_async(self, text: str) -> np.ndarray:
        """``one`` awaited in an event loop: from the cache, or batched with concurrent queries by the worker
        thread, which hands the embeddings to the loop (``MicroBatcher.submit_async``)."""
        out = self._cached([text])
        if out[0] is None:
            self._remember([text], out, await self.batcher.submit_async([(text, True)]))
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]

    def batch(self, texts: Sequence[str]) -> list[np.ndarray | Exception]:
        """Each text's embeddings [1, D] (from the cache, or encoded together with each other and concurrent queries:
        one model call), or the exception encoding it raised (a bad text fails alone)."""
        out = self._cached(texts)
        if any(o is None for o in out):
            self._remember(texts, out, self.batcher.submit([(t, True) for t, o in zip(texts, out) if o is None]))
        return out

    def _cached(self, texts: Sequence[str]) -> list:
        """Each text's cached embeddings, or None."""
        out: list = [None] * len(texts)
        with self._cache_lock:
            for j, text in enumerate(texts):
                hit = self._cache.get(text)
                if hit is not None:
                    self._cache.move_to_end(text)
                    self.stats["hits"] += 1
                    out[j] = hit
        return out

    def _remember(self, texts: Sequence[str], out: list, found: list) -> None:
        """Put ``found`` (the worker's results of the texts whose ``out`` is None) in ``out`` and in the cache."""
        missing = [j for j, o in enumerate(out) if o is None]
        for j, result in zip(missing, found, strict=True):
            out[j] = result
        if self.cache_size:
            with self._cache_lock:
                for j in missing:
                    if not isinstance(out[j], BaseException):
                        self._cache[texts[j]] = out[j]
                        self._cache.move_to_end(texts[j])
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)

    def many(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings [N, D] of ``texts`` in one model call of their own (not cached)."""
        out = self.batcher.submit([(tuple(texts), False)])[0]
        if isinstance(out, BaseException):
            raise out
        return out

    def clear(self) -> None:
        """Empty the cache of recent queries' embeddings."""
        with self._cache_lock:
            self._cache.clear()

    def close(self) -> None:
        """Stop the worker thread after the jobs queued before (``MicroBatcher.close``); a later call starts one."""
        self.batcher.close()

    # -- the worker -----------------------------------------------------------------------------------------
    def _run(self, items: list[tuple]) -> list[np.ndarray | BaseException]:
        """The batcher's call: every single query in one model call (each distinct text once; when it fails, each
        alone, so that a bad text fails alone), each ``many`` in its own."""
        out: list = [None] * len(items)
        singles = [j for j, (_, single) in enumerate(items) if single]
        if singles:
            texts = list(dict.fromkeys(items[j][0] for j in singles))  # the same query twice is encoded once
            try:
                encoded = self._call(texts)
                row = {t: i for i, t in enumerate(texts)}
                for j in singles:
                    i = row[items[j][0]]
                    out[j] = encoded[i:i + 1].copy()
            except Exception:  # find the culprit: each query alone
                for j in singles:
                    out[j] = self._guarded([items[j][0]])
        for j, (texts, single) in enumerate(items):
            if not single:
                out[j] = self._guarded(list(texts))
        return out

    def _guarded(self, texts: list[str]) -> np.ndarray | BaseException:
        try:
            return self._call(texts)
        except Exception as exc:  # handed to the caller, who raises it
            return exc

    def _call(self, texts: list[str]) -> np.ndarray:
        start = time.perf_counter()
        out = self.encode(texts)  # (the model's encode_text runs under torch's inference mode where it runs torch)
        self.timings.setdefault(len(texts), deque(maxlen=TIMED_CALLS)).append((time.perf_counter() - start) * 1000)
        self.stats["calls"] += 1
        self.stats["encoded"] += len(texts)
        return out
