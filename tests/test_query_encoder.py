"""QueryEncoder: concurrent queries share one model call and get exactly what each alone would; the LRU cache; one
bad text fails alone; and through Searcher.search, many threads get the single-threaded answers."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from reelsearch.search.query_encoder import QueryEncoder
from test_search_support import CAPTIONS, small_model

torch.set_num_threads(1)
TEXTS = CAPTIONS + ["a red flower in the snow", "people on a dark stage", "a car"]


class Gate:
    """Wraps an encode function: its first call waits until all ``total`` jobs are submitted (in its batch or
    queued), so that the next call gets every other one (deterministic batching); every call is recorded."""

    def __init__(self, encode, encoder_ref: list, total: int):
        self.encode, self.ref, self.total, self.calls = encode, encoder_ref, total, []

    def __call__(self, texts):
        if not self.calls:
            deadline = time.monotonic() + 30
            while len(texts) + self.ref[0].batcher.pending() < self.total and time.monotonic() < deadline:
                time.sleep(0.005)
        self.calls.append(list(texts))
        return self.encode(texts)


def gated(model, total: int, **options) -> tuple[QueryEncoder, Gate]:
    ref: list = []
    gate = Gate(model.encode_text, ref, total)
    enc = QueryEncoder(gate, **options)
    ref.append(enc)
    return enc, gate


@pytest.mark.parametrize("kind", ["cosine", "moe", "order"])
def test_concurrent_queries_are_batched_and_exact(kind):
    model = small_model(kind)
    enc, gate = gated(model, total=len(TEXTS))
    with ThreadPoolExecutor(len(TEXTS)) as pool:
        got = list(pool.map(enc.one, TEXTS))
    assert len(gate.calls) <= 2 and sorted(sum(gate.calls, [])) == sorted(TEXTS)  # each text encoded once
    assert max(map(len, gate.calls)) >= len(TEXTS) // 2  # in batches
    for text, out in zip(TEXTS, got):
        alone = model.encode_text([text])
        assert out.shape == alone.shape == (1, model.dim)
        np.testing.assert_allclose(out, alone, atol=1e-5, rtol=1e-5)


def test_default_model_batches_exactly():
    """The served model (MiniLM token features + transformer): padding in a batch changes nothing."""
    from reelsearch.models import load_model

    model = load_model("default")
    enc, gate = gated(model, total=len(TEXTS))
    with ThreadPoolExecutor(len(TEXTS)) as pool:
        got = list(pool.map(enc.one, TEXTS))
    assert len(gate.calls) <= 2 and max(map(len, gate.calls)) >= len(TEXTS) // 2
    for text, out in zip(TEXTS, got):
        np.testing.assert_allclose(out, model.encode_text([text]), atol=1e-5, rtol=1e-4)


def test_cache_and_lru_eviction():
    model = small_model("cosine")
    calls = []
    enc = QueryEncoder(lambda texts: calls.append(list(texts)) or model.encode_text(texts), cache_size=2)
    a1 = enc.one("a car")
    assert enc.one("a car") is a1 and enc.stats["hits"] == 1 and calls == [["a car"]]
    enc.one("a yellow flower")
    enc.one("a car")  # refreshes "a car"
    enc.one("the sea")  # evicts "a yellow flower", the least recently used
    enc.one("a car")
    enc.one("a yellow flower")
    assert calls == [["a car"], ["a yellow flower"], ["the sea"], ["a yellow flower"]] and enc.stats["hits"] == 3
    many = enc.many(["a car", "a car"])
    assert many.shape[0] == 2 and calls[-1] == ["a car", "a car"]  # many() is one call, never cached
    off = QueryEncoder(model.encode_text, cache_size=0)
    off.one("x")
    off.one("x")
    assert off.stats == {"hits": 0, "calls": 2, "encoded": 2}


def test_a_bad_text_fails_alone():
    model = small_model("cosine")

    def encode(texts):
        if "boom" in texts:
            raise ValueError("cannot encode boom")
        return model.encode_text(texts)

    ref: list = []
    gate = Gate(encode, ref, total=4)
    enc = QueryEncoder(gate)
    ref.append(enc)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(enc.one, t) for t in ["a car", "boom", "the sea", "a yellow flower"]]
        results = [f.exception() or f.result() for f in futures]
    assert isinstance(results[1], ValueError) and "boom" in str(results[1])
    for text, out in zip(["a car", "the sea", "a yellow flower"], [results[0], results[2], results[3]]):
        np.testing.assert_allclose(out, model.encode_text([text]), atol=1e-5, rtol=1e-5)
    assert enc.one("a car") is results[0]  # the good ones were cached; the bad one was not
    with pytest.raises(ValueError):
        enc.one("boom")


def test_searcher_from_many_threads_matches_one_thread(tmp_path):
    """Searcher.search from 16 threads at once (shared encoder batches) gives the one-thread answers."""
    from reelsearch.search import Searcher
    from test_search_support import make_media

    make_media(tmp_path / "media")
    with Searcher(tmp_path / "index", small_model("moe")) as searcher:
        searcher.index([tmp_path / "media"], progress=False, cues=())
        searcher.query_encoder.cache_size = 0
        want = {q: searcher.search(q, 5) for q in TEXTS}
        start = threading.Barrier(16)

        def one(i):
            start.wait()
            return searcher.search(TEXTS[i % len(TEXTS)], 5)

        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(one, range(16)))
        for i, res in enumerate(got):
            exp = want[TEXTS[i % len(TEXTS)]]
            assert [r.id for r in res] == [r.id for r in exp]
            assert [r.score for r in res] == pytest.approx([r.score for r in exp], abs=1e-5)


def test_close_stops_the_worker_and_a_later_call_restarts_it():
    model = small_model("cosine")
    enc = QueryEncoder(model.encode_text, cache_size=0)
    enc.one("a car")
    first = enc.thread
    assert first.is_alive()
    enc.close()
    first.join(timeout=10)
    assert not first.is_alive()
    np.testing.assert_allclose(enc.one("a car"), model.encode_text(["a car"]))  # a new worker
    assert enc.thread is not first and enc.thread.is_alive()
    enc.close()
