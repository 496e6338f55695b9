"""Micro-batching in serve: concurrent searches share one encoder call and one vector-index search (the Searcher's
index stage) and get what each would get alone — over HTTP with filters, query by example, filters alone, sorting,
bad requests among them; a search that fails in a batch fails alone; the batcher runs what queued, at once, and
answers an event loop (``GET /search``'s ``Searcher.answer_async``) as it answers a thread."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch

from reelsearch.search import Searcher
from reelsearch.search.batching import MicroBatcher
from reelsearch.search.experts import ExpertError
from reelsearch.search.filters import Filter
from reelsearch.service import create_app
from test_search_support import CAPTIONS, ServerThread, add_transcripts, dated_library, small_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("batching")
    dated_library(root / "media")
    with Searcher(root / "index", small_model("cosine")) as searcher:
        searcher.index([root / "media"], progress=False, cues=())
    return root


def gate(batcher: MicroBatcher, total: int) -> list[int]:
    """Make ``batcher``'s first call wait until ``total`` items are taken or queued (so that the next call takes the
    rest); returns the sizes of its calls."""
    run, sizes = batcher.run, []

    def gated(items):
        if not sizes:
            deadline = time.monotonic() + 30
            while len(items) + batcher.pending() < total and time.monotonic() < deadline:
                time.sleep(0.005)
        sizes.append(len(items))
        return run(items)

    batcher.run = gated
    return sizes


def _same(got: httpx.Response, want: httpx.Response) -> None:
    assert got.status_code == want.status_code
    a, b = got.json(), want.json()
    if got.status_code != 200:
        assert a == b
        return
    assert [r["id"] for r in a["results"]] == [r["id"] for r in b["results"]]
    for x, y in zip(a["results"], b["results"]):
        assert x["score"] == pytest.approx(y["score"], abs=1e-5)
        assert x["moment"] == pytest.approx(y["moment"], abs=1e-6)
        assert [f["score"] for f in x.get("frames") or []] == pytest.approx([f["score"] for f in y.get("frames") or []],
                                                                            abs=1e-5)


def test_concurrent_http_searches_match_sequential_ones(library):
    with Searcher(library / "index", small_model("cosine")) as searcher:
        searcher.query_encoder.cache_size = 0
        some = next(r.id for r in searcher.search("a red car", 5) if (r.duration or 0) > 2)
        requests = [{"q": c, "k": 3} for c in CAPTIONS] + [
            {"q": "a red car folder:holiday", "k": 3}, {"q": "green grass -snow", "k": 4},
            {"q": "the sea", "after": "2022-01"}, {"like": some, "k": 3}, {"like": some, "t": 1.0, "q": "a flower"},
            {"folder": "work", "k": 5}, {"q": "a dark room", "sort": "date"}, {"q": "people dance", "moments": 0},
            {"like": "999999"}, {"q": "a car", "experts": "speech"}, {"q": "a car", "after": "2023-13"}]
        with ServerThread(create_app(searcher)) as server, httpx.Client(base_url=server.url, timeout=60) as client:
            want = [client.get("/search", params=r) for r in requests]
            assert [w.status_code for w in want].count(200) == len(requests) - 3
            # the unknown video and the malformed date fail before the stage; the expert the index lacks in the
            # stage's plan (GET /search's searches are planned there: Searcher.answer_async)
            staged = len(requests) - 2
            batches = gate(searcher.index_stage, staged)
            hits = searcher.stats.get("hits", 0)
            start = threading.Barrier(len(requests))

            def ask(params):
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    start.wait()
                    return own.get("/search", params=params)

            with ThreadPoolExecutor(len(requests)) as pool:
                got = list(pool.map(ask, requests))
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        assert sum(batches) == staged and max(batches) >= staged // 2  # in batches
        # the plain text searches' vector-index answers came from their batch's one search
        assert searcher.stats["hits"] - hits >= len(CAPTIONS) + 2


def test_a_search_that_fails_in_a_batch_fails_alone(library, monkeypatch):
    with Searcher(library / "index", small_model("cosine")) as searcher:
        want = {c: searcher.search(c, 3) for c in CAPTIONS}
        run_one = searcher._search_one

        def failing(q, catalog, visual):
            if q.text == CAPTIONS[2]:
                raise RuntimeError("boom")
            return run_one(q, catalog, visual)

        monkeypatch.setattr(searcher, "_search_one", failing)
        batches = gate(searcher.index_stage, len(CAPTIONS))
        with ThreadPoolExecutor(len(CAPTIONS)) as pool:
            futures = [pool.submit(searcher.search, c, 3) for c in CAPTIONS]
            results = [f.exception() or f.result() for f in futures]
        assert max(batches) >= len(CAPTIONS) // 2
        assert isinstance(results[2], RuntimeError)
        for c, got in zip(CAPTIONS, results):
            if c != CAPTIONS[2]:
                assert [r.id for r in got] == [r.id for r in want[c]]
                assert [r.score for r in got] == pytest.approx([r.score for r in want[c]], abs=1e-5)


def test_the_batcher_runs_what_queued_at_once_and_waits_only_when_told():
    calls: list[list[int]] = []
    hold, release = threading.Event(), threading.Event()

    def run(items):
        calls.append(list(items))
        if hold.is_set() and len(calls) == 1:  # the first call of the concurrent phase: busy until released
            release.wait(10)
        return [i * 2 if i >= 0 else ValueError(f"bad {i}") for i in items]

    batcher = MicroBatcher(run, max_batch=4)
    t0 = time.monotonic()
    assert batcher.one(1) == 2 and time.monotonic() - t0 < 2  # alone: at once, no timer
    calls.clear()
    hold.set()
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(batcher.one, 0)
        while not calls:
            time.sleep(0.001)
        rest = [pool.submit(batcher.submit, [i]) for i in (1, 2, 3, -4, 5, 6)]
        while batcher.pending() < 6:
            time.sleep(0.001)
        release.set()
        assert first.result() == 0
        out = [f.result()[0] for f in rest]
    assert out[:3] == [2, 4, 6] and isinstance(out[3], ValueError) and out[4:] == [10, 12]  # a bad item alone
    assert calls[1:] == [[1, 2, 3, -4], [5, 6]]  # what queued meanwhile, max_batch at a time
    batcher.close()
    waiting = MicroBatcher(lambda items: [len(items)] * len(items), max_batch=8, max_wait=0.3)
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(waiting.one, "a")
        time.sleep(0.05)
        b = pool.submit(waiting.one, "b")
        assert a.result() == b.result() == 2  # the second came within max_wait: one batch
    waiting.close()


def test_batched_minilm_matches_lone_queries():
    """The served model's MiniLM with attention masks: a short query padded in a batch of long ones gets its own
    embedding (within float rounding)."""
    from reelsearch.models import load_model

    model = load_model("default")
    texts = ["dog", "a man rides a red bicycle down a steep hill in the rain while people watch from a bridge",
             "two children", "a cat sleeps"]
    together = model.encode_text(texts)
    for i, text in enumerate(texts):
        alone = model.encode_text([text])[0]
        cos = float(together[i] @ alone / (np.linalg.norm(together[i]) * np.linalg.norm(alone)))
        assert cos > 0.99999
        np.testing.assert_allclose(together[i], alone, atol=1e-4)


def test_the_batcher_answers_an_event_loop():
    """``submit_async``: the worker settles the loop's futures, an exception per item returned; what the loop
    submits in one iteration runs as one batch; a future cancelled before its answer does not stop the worker."""
    batcher = MicroBatcher(lambda items: [i * 2 if i >= 0 else ValueError(f"bad {i}") for i in items], max_batch=8)

    async def main():
        gone = batcher.submit_async([7])
        gone.cancel()
        got = await asyncio.gather(*[batcher.submit_async([i]) for i in (1, 2, -3)], batcher.submit_async([4, 5]),
                                   batcher.submit_async([]))
        return got, await batcher.submit_async([6])

    try:
        got, last = asyncio.run(main())
    finally:
        batcher.close()
    assert got[:2] == [[2], [4]] and isinstance(got[2][0], ValueError) and got[3:] == [[8, 10], []]
    assert last == [12] and batcher.sizes == {6: 1, 1: 1}  # 7 (cancelled), 1, 2, -3, 4, 5 together; then 6


def test_answer_async_is_answer_with_the_plan_made_by_the_index_stage(library, tmp_path):
    """``Searcher.answer_async`` (``GET /search``, in the event loop) answers as ``answer``: text, filters, filters
    alone, sorting, concurrent ones batched; the plan, which reads the index's cues, is made by the index stage: an
    expert the index lacks fails there, alone, and transcripts added after the first searches take part in the
    next one (its cue query encoded by the stage, since the last plan saw no cue)."""
    shutil.copytree(library / "index", tmp_path / "index")
    cases = [("a red car", {}), ("green grass -snow", {"k": 4}), (None, {"filters": Filter.of([("folder", "work")])}),
             ("the sea", {"sort": "date", "moments": 0}), ("a red car folder:holiday", {"k": 3})]

    def same(a, b):
        assert [r.to_json() for r in a.results] == [r.to_json() for r in b.results]
        assert (a.no_good_match, a.filters) == (b.no_good_match, b.filters)

    with Searcher(tmp_path / "index", small_model("cosine")) as searcher:
        async def concurrent():
            return await asyncio.gather(*[searcher.answer_async(t, **kw) for t, kw in cases],
                                        searcher.answer_async("a car", experts="speech"), return_exceptions=True)

        *got, lacking = asyncio.run(concurrent())
        for (text, options), answer in zip(cases, got, strict=True):
            same(answer, searcher.answer(text, **options))
        assert isinstance(lacking, ExpertError) and "no speech cue" in str(lacking)
        add_transcripts(searcher, tmp_path / "index")
        spoken = asyncio.run(searcher.answer_async("a red car drives on the road", 3))
        assert {"speech", "ocr"} <= set(spoken.results[0].experts or {}) and spoken.results[0].match is not None
        same(spoken, searcher.answer("a red car drives on the road", 3))
