"""A search as asked: its query checked and read (the search box's filters, the experts, the weights, the example) into
a :class:`Request`, which the Searcher encodes and its index stage plans and answers (``reelsearch.search.searcher``);
the :class:`Answer` with its verdict (``weak``: no good match)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from reelsearch.errors import EMPTY_QUERY, QueryError
from reelsearch.scoring.calibration import SENTENCE, query_length
from reelsearch.search.example import Example
from reelsearch.search.experts import Plan, parse_experts, parse_weights
from reelsearch.search.filters import Filter, read_box
from reelsearch.search.results import SORTS, SearchResult, no_good_match

#: Longest query accepted (characters).
MAX_QUERY_CHARS = 1000


def check_query(text: str) -> str:
    """``text`` stripped; QueryError when empty or longer than MAX_QUERY_CHARS."""
    if not isinstance(text, str) or not text.strip():
        raise QueryError(EMPTY_QUERY)
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"the query has {len(text)} characters; at most {MAX_QUERY_CHARS} are accepted")
    return text.strip()


@dataclass(frozen=True)
class Request:
    """One search as the index stage runs it: checked (``read_request``), encoded by the Searcher, planned by the
    stage."""

    text: str | None
    query: np.ndarray | None
    cue_query: np.ndarray | None
    negatives: list[tuple[np.ndarray, str]]
    filt: Filter
    plan: Plan | None  # None: not planned yet (the index stage plans it)
    k: int
    frames: bool
    example: Example | None
    moments: int
    sort: str
    judge: bool = False  # ``answer``: whether they are no good match, too
    names: Sequence[str] | None = None  # the experts asked for (``parse_experts``)
    weights: Mapping[str, float] | None = None  # the search's expert weights
    excluded: list[str] = field(default_factory=list)  # the negative terms to encode (a calibrated model)


def read_request(text: str | None, k: int, judge: bool, *, base_weights: Mapping[str, float],
                 example_of: Callable[[str | os.PathLike], Example], calibrated: bool, frames: bool = True,
                 experts=None, weights=None, like=None, filters: Filter | None = None, moments: int = 3,
                 sort: str = "relevance") -> Request:
    """A search's query checked and read (its box, experts, weights over ``base_weights``, example: ``example_of``
    ``like`` unless it is one): not planned, not encoded. ``calibrated``: the model has a calibration (else negative
    terms are words only)."""
    if sort not in SORTS:
        raise QueryError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
    if text is not None or (like is None and not filters):
        text = check_query(text)
    if not isinstance(k, int) or k < 1:
        raise QueryError(f"k must be a positive integer, got {k!r}")
    text, filt = read_box(text, filters)
    names = parse_experts(experts)
    w = {**base_weights, **parse_weights(weights)}
    example = like if like is None or isinstance(like, Example) else example_of(like)
    if text is None and example is None and not filt:
        raise QueryError(EMPTY_QUERY)
    return Request(text, None, None, [], filt, None, k, frames, example, moments, sort, judge, names, w,
                   list(filt.exclude) if calibrated else [])


class Answer(NamedTuple):
    """A search's results, whether they are no good match (``Searcher.no_good_match``), and its filters (those of the
    search box and those given beside it)."""

    results: list[SearchResult]
    no_good_match: bool
    filters: Filter


def weak(calibration, results: list[SearchResult], free: str | None, videos: int) -> bool:
    """Whether ``results`` of a search for the free text ``free`` over ``videos`` videos are no good match: their best
    confidence below ``calibration``'s threshold for such a query's length and such a library
    (``Calibration.threshold``)."""
    length = query_length(free) if free is not None else SENTENCE
    return no_good_match(results, calibration.threshold(length, videos))
