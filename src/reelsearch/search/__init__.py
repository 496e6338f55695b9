"""Text-to-video search and video-to-text annotation over a library index, with one model.

``Searcher(index_dir, model)`` indexes files (the model's feature recipe -> its embeddings), answers
queries with ranked videos (``SearchResult``) and their best moments, and ranks captions for a video. A query is
answered by sources (``reelsearch.search.sources``, ``reelsearch.search.cues``) and one fusion
(``reelsearch.search.fusion``): ``reelsearch.search.query.run_query``; filters in the query text
(``reelsearch.search.filters``) restrict it to some videos.
"""

from reelsearch.search.annotate import read_captions
from reelsearch.search.embed import MediaEmbedder
from reelsearch.search.filters import Filter, FilterError, parse_query
from reelsearch.search.request import MAX_QUERY_CHARS, check_query
from reelsearch.search.results import SearchResult
from reelsearch.search.searcher import QueryError, Searcher

__all__ = ["MAX_QUERY_CHARS", "Filter", "FilterError", "MediaEmbedder", "QueryError", "SearchResult", "Searcher",
           "check_query", "parse_query", "read_captions"]
