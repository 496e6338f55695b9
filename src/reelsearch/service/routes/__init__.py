"""The JSON API, one router per resource, each route a few lines over the app's Searcher; ``create_app`` includes
:data:`ROUTERS` in this order (the order of the OpenAPI schema's paths)."""

from reelsearch.service.routes import annotate, duplicates, health, search, videos

ROUTERS = (health.router, search.router, annotate.router, duplicates.router, videos.router)

__all__ = ["ROUTERS"]
