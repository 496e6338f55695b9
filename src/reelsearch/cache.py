"""reelsearch's one cache policy: where computed data that can always be recomputed is kept.

``$REELSEARCH_CACHE_DIR`` when set, else the platform's user cache folder (``~/.cache/reelsearch`` on Linux).
Inside it: ``features/`` (dataset features, one store per dataset and feature recipe), ``text/`` (token features
of captions, one store per text encoder) and ``glove/`` (the parsed GloVe table). Deleting any of it is safe.
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir


def cache_root() -> Path:
    """The cache folder ($REELSEARCH_CACHE_DIR, else the user's cache directory for reelsearch)."""
    env = os.environ.get("REELSEARCH_CACHE_DIR")
    if env:
        return Path(env).expanduser()

    return Path(user_cache_dir("reelsearch"))
