"""HTTP service: the FastAPI app (JSON API + the search page) over one Searcher."""

from reelsearch.service.app import create_app

__all__ = ["create_app"]
