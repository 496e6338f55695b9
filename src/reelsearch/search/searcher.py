"""Searcher: one model + one catalog; text-to-video search with moments, and video-to-text annotation."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from reelsearch.errors import QueryError, ReelsearchError
from reelsearch.features.cues import CueExtractor
from reelsearch.index import EmbeddedMedia, MediaRoots, SqlCatalog, SyncReport, open_catalog
from reelsearch.index.media import sha256_file
from reelsearch.index.textcues import TextCues
from reelsearch.models.calibration import log_fallback, search_calibration
from reelsearch.models.embeddings import SearchMode
from reelsearch.models.query_model import QueryModel
from reelsearch.search.annotate import check_captions, rank_captions, with_picture
from reelsearch.search.batching import MicroBatcher, Prefetched, prefetch
from reelsearch.search.cue_indexing import cues_to_run, index_cues
from reelsearch.search.duplicates import DEFAULT_THRESHOLD, MIN_COVERAGE, DuplicateGroup, find_duplicates
from reelsearch.search.embed import DEFAULT_FRAMES_PER_SECOND, MediaEmbedder, stored_media
from reelsearch.search.example import Example, ExampleError, split_like
from reelsearch.search.experts import Plan, parse_weights, plan
from reelsearch.search.filters import Filter, pictured, read_box, select
from reelsearch.search.library_model import index_model, model_record, record_model
from reelsearch.search.query import first_nearest, listed, run_query
from reelsearch.search.query_encoder import QueryEncoder
from reelsearch.search.request import Answer, Request, read_request, weak
from reelsearch.search.results import SearchResult, dated
from reelsearch.search.sources import Visual, visual_sources
from reelsearch.search.subset import Selection, Subset
from reelsearch.text.sentences import sentence_encoder


class Searcher:
    """Search a library of videos with sentences, and rank sentences for a video.

    ``model``: a model directory, a training run, "default" (the bundled model), a loaded model (joint or
    mixture), or None (default): the one the index records (``reelsearch.search.library_model``), else the bundled
    one. Media are decoded and their features extracted by the model's own feature recipe. ``index``: the
    catalog (``reelsearch.index.open_catalog``): a folder (the embedded catalog; default: the user's data directory),
    a ``postgresql://`` URL (the shared catalog), or a catalog already open (the Searcher closes it);
    ``media_roots``: ``OLD=NEW`` mappings of the stored paths to this host's (``--media-root``). ``text_encoder``:
    what encodes queries (``model.use_text_encoder``; docs/search.md, "Choosing the text encoder"): "float32" MiniLM
    (as trained), "int8" MiniLM (faster on a CPU, embeddings slightly off float32 and dependent on what is batched
    with them), "static" (the model's static text encoder, ``reelsearch distill-text``: the fastest), "auto" (what
    ``serve`` runs: ``model.serving_text_encoder``), or None (default): a loaded model as it is (a name or path loads
    float32). A model
    with a querybank (``reelsearch.models.querybank``) ranks a query of seven words or more by its normalised scores, as
    ``reelsearch eval`` does, a shorter one by the model's own (``reelsearch.scoring.calibration.banked``):
    each video's offset is stored when it is indexed (the catalog's bias), each caption's is computed when
    ``annotate`` ranks it. Methods are safe to call from several threads (one lock around the model and the index).
    """

    def __init__(self, index: str | Path | SqlCatalog | None = None, model=None, *,
                 media_roots: MediaRoots | Sequence[str] | None = None, device: str | None = None,
                 weights: Mapping[str, float] | str | None = None, text_encoder: str | None = None,
                 frames_per_second: float | None = None):
        self.catalog = open_catalog(index, media_roots=media_roots)
        try:
            if frames_per_second is None:
                frames_per_second = self.catalog.settings().get("frames_per_second", DEFAULT_FRAMES_PER_SECOND)
            if model is None or isinstance(model, (str, os.PathLike)):
                model = index_model(self.catalog, None if model is None else os.fspath(model))
            self._load(model, device, weights, text_encoder, float(frames_per_second))
        except BaseException:
            self.catalog.close()
            raise

    def _load(self, model, device: str | None, weights, text_encoder: str | None, frames_per_second: float) -> None:
        #: what ``index`` records the rows were made with (``library_model.model_record``; None: unknown, a model
        #: loaded by the caller)
        self.model_source = model_record(model if isinstance(model, str) else getattr(model, "folder", None))
        if isinstance(model, str):
            model = _torch_model(model)
        self.model = model.eval()
        if text_encoder is not None:
            self.model.use_text_encoder(text_encoder)
        log_fallback(self.model)
        self._device = device
        self.embedder = MediaEmbedder(self.model, device=device, rate=frames_per_second)
        name = getattr(self.model, "name", "") or "model"
        self.model_id = f"{name}@{self.model.fingerprint()};{self.embedder.describe()}"
        self.lock = threading.RLock()
        self.query_encoder = QueryEncoder(self.model.encode_text)  # batches concurrent queries; LRU cache
        self._index_stage = MicroBatcher(self._search_batch, name="reelsearch-search")
        #: the index stage's vector-index answers read from its batch's one search ("hits") or asked alone
        self.stats: dict[str, int] = {}
        self._embed_lock = threading.Lock()  # decoding + extraction of files that are not indexed
        self.weights = parse_weights(weights)  # expert weights of every search (over experts.DEFAULT_WEIGHTS)
        self._cues: TextCues | None = None
        self._cue_queries: QueryEncoder | None = None  # MiniLM sentence embeddings of queries, for the text cues
        self._visual: Visual | None = None
        self._known_cues: list[str] | None = None  # the index's stored cues at the index stage's last plan

    def full_model(self):
        """The torch model: a searcher opened on a model's query graphs (``reelsearch.models.query_model``, a cold
        search) loads it on first need (embedding media, ``index``, a query by an unindexed file) and runs it from
        then on (the same fingerprint and text encoder, the same results)."""
        with self.lock:
            if isinstance(self.model, QueryModel):
                encoder = self.model.text_encoder_name  # (the student where auto ran it: the same scores, calibration)
                self.model = _torch_model(self.model.folder).eval()
                self.model.use_text_encoder(encoder)
                self.embedder = MediaEmbedder(self.model, device=self._device, rate=self.embedder.rate)
                self.query_encoder.encode = self.model.encode_text
                self._visual = None
            return self.model

    # -- life cycle ---------------------------------------------------------------------------------------
    def close(self) -> None:
        self._index_stage.close()
        self.query_encoder.close()
        if self._cue_queries is not None:
            self._cue_queries.close()
        with self.lock:
            if self._cues is not None:
                self._cues.close()
            self.catalog.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def frames_per_second(self) -> float:
        """Frames sampled a second of video when a file is indexed (remembered by the index; default 1)."""
        return self.embedder.rate

    @property
    def mode(self) -> SearchMode:
        """How the model says it is searched (``model.search_mode``: "ann", "scan", "rank", "zscore" or
        "pairwise")."""
        return self.model.search_mode

    @property
    def visual(self) -> Visual:
        """The model's search sources over the catalog, chosen on first use (``reelsearch.search.sources``)."""
        if self._visual is None:
            self._visual = visual_sources(self.model, self.catalog)
        return self._visual

    @property
    def experts(self) -> list[str]:
        """Names of the model's experts (one for a joint model)."""
        return list(self.model.experts)

    def stale(self) -> bool:
        """True when the index holds embeddings of another model (re-run ``index`` to replace them)."""
        return self.catalog.model_id is not None and self.catalog.model_id != self.model_id

    def _stale_error(self) -> ReelsearchError:
        return ReelsearchError(f"{self.catalog.location}: the index holds embeddings of another model "
                               f"({self.catalog.model_id}); re-run `reelsearch index` with this model")

    def warm_up(self) -> None:
        """Load what the first query would load lazily (e.g. the MiniLM text model), so it is not slow."""
        self.query_encoder.many(["warm up"])
        with self.lock:
            cues = self.cues
        if cues is not None and cues.stored_cues():
            self.cue_queries.many(["warm up"])

    @property
    def cues(self) -> TextCues | None:
        """The catalog's text cues (speech transcripts, on-screen text), once ``index`` has made them."""
        if self._cues is None:
            self._cues = self.catalog.text_cues(sentence_encoder)
        return self._cues

    @property
    def cue_queries(self) -> QueryEncoder:
        """The QueryEncoder of queries for the text cues: the sentence encoder of the text-cue index (MiniLM), in its
        own thread, batched and cached like the model's."""
        if self._cue_queries is None:
            self._cue_queries = QueryEncoder(sentence_encoder)
        return self._cue_queries

    # -- indexing -----------------------------------------------------------------------------------------
    def index(self, paths: Iterable[str | os.PathLike], progress: bool = True, *,
              cues: Sequence[str] | None = None, exclusive: bool = False) -> SyncReport:
        """Bring the index in line with ``paths`` (files or folders): add new files, re-embed changed ones, drop
        deleted ones (embeddings of another model are replaced); then extract the text ``cues`` ("speech", "ocr";
        None: every cue whose extra is installed, () none) of those files into the text-cue index, in the same
        writer lock (the on-screen text of a file the sync embeds is read in its picture decode pass:
        ``reelsearch.search.embed``). The report's ``cues`` says what the cue stage did, ``cues_off`` which cues
        did not run. ``exclusive``: drop the videos indexed from anywhere else too (the index holds exactly
        ``paths``)."""
        run, off = cues_to_run(cues)
        extractor = CueExtractor()
        self.full_model()
        with self.lock, self.catalog.writing(self.catalog.writer_wait):
            self.embedder.progress = progress  # a long file's seconds too
            self.embedder.cues = extractor if "ocr" in run else None  # on-screen text read in the picture pass
            try:
                report = self.catalog.sync(list(paths), self.embedder, model_id=self.model_id, progress=progress,
                                           exclusive=exclusive)
            finally:
                self.embedder.progress, self.embedder.cues = False, None
            record_model(self.catalog, self.model_source, self.frames_per_second)
            cue_index = self.cues
            if cue_index is None and run:
                cue_index = self._cues = self.catalog.text_cues(sentence_encoder, create=True)
            report.cues = index_cues(self.catalog, cue_index, report, run, extractor, progress=progress)
            report.cues_off = off
            return report

    # -- text -> video ------------------------------------------------------------------------------------
    def search(self, text: str | None, k: int = 10, *, frames: bool = True,
               experts: Sequence[str] | str | None = None, weights: Mapping[str, float] | str | None = None,
               like: str | os.PathLike | Example | None = None, filters: Filter | None = None,
               moments: int = 3, sort: str = "relevance") -> list[SearchResult]:
        """The ``k`` best videos for ``text``, best first (``reelsearch.search.results.SearchResult``); ``answer``
        gives them with the verdict ``no_good_match``.

        Each result: ``id``, ``path``, ``score``, ``moment`` (seconds: the best-matching frame, or the matched words
        when a text cue outweighs the picture), ``frame`` (its index), ``duration``; with ``frames`` also ``frames``
        (each frame's score: the per-frame similarity strip); ``experts`` = {name: score} (each expert's own score)
        for a mixture or when text cues take part; ``match`` = the transcript or on-screen text segment behind the
        strongest text cue (cue, start, end, text, score, how, moment, highlights); ``moments``: its best
        ``moments`` segments (start, end, score, confidence), best first, when the picture takes part (a video
        scores by its best segment, and ``moment`` lies in it).

        ``experts``: some of "visual" (the model), "speech", "ocr" (default: visual and every cue the index holds);
        ``weights``: {expert: weight} over the Searcher's and ``reelsearch.search.experts.DEFAULT_WEIGHTS``.

        ``like``: query by example (``reelsearch.search.example``): a video or image file, ``FILE@SECONDS``, an
        indexed ``VIDEO_ID`` or ``VIDEO_ID@SECONDS`` (or an :class:`Example`); ``text`` may then be None. Results
        then leave out the example's own file (same id or same content).

        ``text`` is a search box: filters in it (``after:2023-07 folder:holiday -people "exact phrase"``,
        ``reelsearch.search.filters``) and ``filters`` restrict the ranking to the videos that pass them (the exact
        top k of those); filters alone list those videos, newest first.

        Each result carries when it was taken (``taken_at``, ``taken_from``); ``sort``: "relevance" (best first) or
        "date" (the same k results, newest first).
        """
        return self._submit(text, k, frames=frames, experts=experts, weights=weights, like=like, filters=filters,
                            moments=moments, sort=sort)

    def answer(self, text: str | None, k: int = 10, **options) -> Answer:
        """``search``'s results (``options``: its own) with whether they are no good match (``no_good_match``) and
        the search's filters, the verdict reached in the same pass of the index stage (one lock, one snapshot of the
        library): what ``GET /search`` and ``reelsearch search`` show."""
        return self._submit(text, k, judge=True, **options)

    def _submit(self, text: str | None, k: int, judge: bool = False, **options):
        """``search`` (``judge``: ``answer``): the query checked and encoded in this thread (outside the lock:
        concurrent queries share one encoder pass), then planned and searched by the index stage (concurrent searches
        share one vector-index search: ``_search_batch``)."""
        q = self._checked(text, k, judge, **options)
        query = self.query_encoder.one(q.text) if q.text is not None else None
        cue_query = self.cue_queries.one(q.text) if self._asks_cues(q) else None
        negatives = [(self.query_encoder.one(term), term) for term in q.excluded]
        return self.index_stage.one(replace(q, query=query, cue_query=cue_query, negatives=negatives))

    async def answer_async(self, text: str | None, k: int = 10, **options) -> Answer:
        """``answer`` awaited in an event loop (``serve``'s ``GET /search``; ``like``: an :class:`Example` or None):
        nothing in it blocks the loop and no thread waits for it: a query not in the cache is encoded by the
        encoder's thread, the plan is made by the index stage's (as ``answer``'s), which hands the answer to the
        loop."""
        q = self._checked(text, k, True, **options)
        query = await self.query_encoder.one_async(q.text) if q.text is not None else None
        cue_query = await self.cue_queries.one_async(q.text) if self._asks_cues(q) else None
        negatives = [(await self.query_encoder.one_async(term), term) for term in q.excluded]
        found = (await self.index_stage.submit_async([replace(q, query=query, cue_query=cue_query,
                                                              negatives=negatives)]))[0]
        if isinstance(found, BaseException):
            raise found
        return found

    def _checked(self, text: str | None, k: int, judge: bool, **options) -> Request:
        """A search's query checked and read (``request.read_request``): not planned, not encoded."""
        return read_request(text, k, judge, base_weights=self.weights, example_of=self.example,
                            calibrated=search_calibration(self.model) is not None, **options)

    def _asks_cues(self, q: Request) -> bool:
        """Whether ``q``'s plan looks like asking the text cues, by the index's cues at the index stage's last plan
        (none known before the first); the stage, which plans ``q`` over the cues as they are then (no round trip of
        its own for them), encodes its cue query if it asks one and this said no."""
        known = self._known_cues
        try:
            return known is not None and q.text is not None and bool(self._plan(q, known).cues)
        except ReelsearchError:
            return False  # the index stage's plan tells

    def no_good_match(self, text: str | None, results: list[SearchResult], filters: Filter | None = None) -> bool:
        """Whether ``results`` of a search for ``text`` (a search box; ``filters``: the search's other filters) are no
        good match: their best confidence below the model's calibrated threshold for the length of the query's free
        text and the size of the library searched (``Calibration.threshold``): the videos the filters keep, when
        there are filters (a right best hit of ten photos beats fewer than one of a thousand). False without a
        calibration or a confidence."""
        calibration = search_calibration(self.model)
        if calibration is None:
            return False
        free, filt = read_box(text, filters) if text is not None else (None, filters)
        with self.lock, self.catalog.snapshot():
            videos = len(select(filt, self.catalog, self.cues).ids) if filt else len(self.catalog)
        return weak(calibration, results, free, videos)

    def _weak(self, results: list[SearchResult], free: str | None, videos: int) -> bool:
        """``no_good_match`` of ``results`` of a search for the free text ``free`` over ``videos`` videos (the index
        stage's verdict of ``answer``)."""
        calibration = search_calibration(self.model)
        return calibration is not None and weak(calibration, results, free, videos)

    @property
    def index_stage(self) -> MicroBatcher:
        """The batcher of the searches' index stage (``max_batch`` searches at a time, ``max_wait`` seconds waited
        for more: ``reelsearch serve --batch``, ``--batch-wait``)."""
        return self._index_stage

    def _search_batch(self, queries: list[Request]) -> Iterator[list[SearchResult] | Exception]:
        """The index stage of a batch of searches: under the lock, one vector-index search for the query vectors of
        those it serves (``reelsearch.search.batching.prefetch``), then each search as alone, in order, each answer
        yielded as soon as it is found; an exception for one is handed to that search only."""
        with self.lock, self.catalog.snapshot():  # its meta and count read once
            self.catalog.refresh()
            if len(self.catalog) == 0:
                yield from (Answer([], False, q.filt) if q.judge else [] for q in queries)
                return
            if self.stale():
                stale = self._stale_error()
                yield from (stale for _ in queries)
                return
            planned = [self._planned(q) for q in queries]
            catalog = self._prefetched([q for q in planned if isinstance(q, Request)])
            visual = self.visual.on(catalog)
            for q in planned:
                try:
                    found = self._search_one(q, catalog, visual) if isinstance(q, Request) else q
                except Exception as exc:  # raised to its own caller
                    found = exc
                yield found

    def _planned(self, q: Request) -> Request | Exception:
        """``q`` planned over the index's cues as they are now (under the lock, in the stage's snapshot), its cue query
        encoded if the plan asks one that was not (``_asks_cues``), or the exception that planning raised."""
        try:
            p = self._plan(q)
            cue_query = self.cue_queries.one(q.text) if p.cues and q.cue_query is None else q.cue_query
        except Exception as exc:  # raised to its own caller
            return exc
        return replace(q, plan=p, cue_query=cue_query)

    def _plan(self, q: Request, cues: list[str] | None = None) -> Plan:
        """``q``'s plan (``experts.plan``) over the index's stored cues: ``cues``, else read now (under the lock)."""
        if cues is None:
            cue_index = self.cues
            cues = self._known_cues = cue_index.stored_cues() if cue_index is not None else []
        return plan(self.model, q.names, q.weights, cues, text=q.text is not None, like=q.example is not None)

    def _prefetched(self, queries: list[Request]) -> Prefetched:
        """The catalog with the vector index's first answer for each of ``queries`` that asks one a batch can share
        (``query.first_nearest``: text ranked by the inner product over video rows, no filters, no example) searched
        in one call."""
        wanted = [found for q in queries if q.query is not None and (found := first_nearest(
            self.catalog, self.visual, q.text, q.query, q.plan, q.k, filtered=bool(q.filt), example=q.example))]
        return prefetch(self.catalog, wanted, self.stats)

    def _search_one(self, q: Request, catalog: Prefetched, visual: Visual) -> list[SearchResult] | Answer:
        selected = select(q.filt, self.catalog, self.cues) if q.filt else None
        allowed = self._allowed(selected, q.negatives) if q.filt else None
        if q.text is None and q.example is None:  # filters alone
            found = listed(self.catalog, allowed.ids[:q.k])
        else:
            found = run_query(catalog, visual, self.cues, q.text, q.query, q.cue_query, q.plan, q.k, frames=q.frames,
                              example=q.example, allowed=allowed, moments=q.moments)
        found = dated(found, q.sort)
        if not q.judge:
            return found
        videos = len(selected.ids) if selected is not None else len(self.catalog)
        return Answer(found, self._weak(found, q.text, videos), q.filt)

    def _allowed(self, allowed: Selection, negatives: list[tuple[np.ndarray, str]]) -> Selection:
        """The videos of a filter's selection (``allowed``: ``reelsearch.search.filters.select``, newest first) less
        those whose picture matches a negative term (``negatives``: its embedding, its text) well (``pictured``)."""
        if negatives and allowed.ids:
            visual = self.visual.on(Subset(self.catalog, allowed))
            allowed = allowed.without(set().union(*(pictured(visual, q, n) for q, n in negatives)))
        return allowed

    def example(self, like: str | os.PathLike) -> Example:
        """The example ``like`` names (``search``'s ``like``): ``FILE``, ``FILE@SECONDS``, ``VIDEO_ID`` or
        ``VIDEO_ID@SECONDS`` (a file first: an existing file's name is never read as an id)."""
        target, at = split_like(os.fspath(like))
        if os.path.isfile(target):
            return self.example_file(target, at)
        if not target.isdigit():
            raise ExampleError(f"{target}: no such file, and not an indexed video's id")
        return self.example_video(target, at)

    def example_file(self, path: str | os.PathLike, at: float | None = None, label: str | None = None) -> Example:
        """A file as an example (its stored embeddings when it is indexed and unchanged, else decoded and embedded
        now): the whole of it, or its moment ``at`` seconds. It leaves out the file itself and every indexed file
        with its content (SHA-256). A ReelsearchError names the file when it cannot be decoded; ``label`` names it
        in errors (an upload's name)."""
        path, label = os.fspath(path), label or os.fspath(path)
        if not os.path.isfile(path):
            raise ExampleError(f"{label}: no such file")
        with self.lock:
            media = self._stored_media(path)
            exclude = {i for i in [self.catalog.find(path)] if i is not None}
        if media is None:
            self.full_model()
            with self._embed_lock:
                media = self.embedder(path).checked(self.model.row_dim)
        digest = sha256_file(path)
        with self.lock:
            exclude.update(self.catalog.with_content(digest))
        return Example.of(media, at, exclude, label)

    def example_video(self, id_: str, at: float | None = None) -> Example:
        """An indexed video as an example, from its stored embeddings: the whole of it, or its moment ``at``
        seconds. It leaves out the video and every indexed file with its content. ExampleError for an unknown id."""
        with self.lock:
            self.catalog.refresh()
            try:
                media, record = self.catalog.media(id_), self.catalog.video(id_)
            except (KeyError, ValueError):
                raise ExampleError(f"no indexed video with id {id_}") from None
            exclude = {record.id, *self.catalog.with_content(record.sha256)}
        return Example.of(media, at, exclude, f"video {record.id}")

    # -- near-duplicates ----------------------------------------------------------------------------------
    def duplicates(self, threshold: float = DEFAULT_THRESHOLD, *, coverage: float = MIN_COVERAGE
                   ) -> list[DuplicateGroup]:
        """The groups of indexed files that are the same footage, largest first
        (``reelsearch.search.duplicates.find_duplicates``): frames match from cosine ``threshold``, the aligned run
        covers at least ``coverage`` of the shorter one's informative frames."""
        for name, value in (("threshold", threshold), ("coverage", coverage)):
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise QueryError(f"{name} must be a number in (0, 1], got {value!r}")
        with self.lock:
            self.catalog.refresh()
            if self.stale():
                raise self._stale_error()
            return find_duplicates(self.catalog, float(threshold), coverage=float(coverage),
                                   exact_cosine=not self.model.inner_product)

    # -- video -> text ------------------------------------------------------------------------------------
    def annotate(self, file: str | os.PathLike, captions: Sequence[str]) -> list[dict]:
        """``captions`` ranked for the video or image ``file``, best first: [{"caption", "score"}].

        An indexed file whose size and modification time are unchanged uses its stored embeddings; any other
        file is decoded and embedded now (it is not added to the index).
        """
        captions = check_captions(captions)
        path = os.fspath(file)
        with self.lock:
            media = self._stored_media(path)
        if media is None:
            if not os.path.isfile(path):
                raise ReelsearchError(f"{path}: no such file")
            self.full_model()
            with self._embed_lock:
                media = self.embedder(path).checked(self.model.row_dim)
        return self.annotate_media(with_picture(media, path), captions)

    def annotate_id(self, id_: str, captions: Sequence[str]) -> list[dict]:
        """``captions`` ranked for the indexed video ``id_`` (KeyError when unknown)."""
        captions = check_captions(captions)
        with self.lock:
            media = self.catalog.media(id_)
        return self.annotate_media(with_picture(media, f"video {id_}"), captions)

    def annotate_media(self, media: EmbeddedMedia, captions: Sequence[str]) -> list[dict]:
        """``captions`` ranked for an embedded video (the model's own similarity; mixtures fuse per caption)."""
        captions = check_captions(captions)
        queries = self.query_encoder.many(captions)
        with self.lock:
            return rank_captions(self.model, captions, queries, media)

    def _stored_media(self, path: str) -> EmbeddedMedia | None:
        """The stored embeddings of the indexed file ``path`` when it is unchanged (``embed.stored_media``) and of
        this model."""
        return None if self.stale() else stored_media(self.catalog, path)


def _torch_model(path):
    """The torch model at ``path``, its query graphs exported for the next cold search
    (``reelsearch.models.query_export.load_for_search``)."""
    from reelsearch.models.query_export import load_for_search  # noqa: PLC0415 - torch: only where the model's query graphs cannot serve (docs/search.md)

    return load_for_search(path)
