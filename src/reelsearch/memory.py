"""A long-running process's memory (``reelsearch serve``): large blocks handed back to the operating system when freed
(glibc's ``mallopt``), and the free pages inside the heaps once loaded (``malloc_trim``), so that it does not keep,
resident, what its loads' and searches' temporary arrays took; and what it loaded kept out of the garbage collector's
walks (``gc.freeze``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import lru_cache

#: glibc's ``M_MMAP_THRESHOLD`` and the threshold kept: 4 MiB (at 1 MiB a search's own arrays were mapped and
#: faulted in anew each time: about 600 page faults a search over 400,000 segments; none at 4 MiB).
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 4 << 20


@lru_cache(maxsize=2)
def _libc(function: str):
    """glibc's ``function`` (``mallopt``, ``malloc_trim``), or None (another C library: musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function, None) if name else None
    except OSError:
        return None


def _mallopt():
    return _libc("mallopt")


def return_large_frees() -> bool:
    """Map every allocation of MMAP_THRESHOLD or more on its own, so that freeing it returns its pages at once; whether
    this C library can. glibc otherwise raises the threshold to the largest block freed, after which such blocks come
    from its heaps (one per thread) and stay resident once freed: ``serve`` over 100,000 videos of four segments held
    51 MiB more, 650.8 MiB against 599.9 (docs/benchmarks.md, "100,000 videos of four segments each, today's code")."""
    mallopt = _mallopt()
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)


def freeze_loaded() -> None:
    """Move every object alive now (a loaded index, model and app) to the collector's permanent generation, so that
    later collections walk only what requests make: the oldest generation's walks over everything loaded had paused
    some searches for 100 ms and more (served max 160 -> 57 ms at 100,000 videos: docs/benchmarks.md, "The served
    path at 100,000 videos at the end of 2026-11-29"). Then glibc's heaps hand back their free pages: what the load's
    temporaries below the mmap threshold left there under live blocks stayed resident, 40 MiB in some starts of
    ``serve`` at 100,000 videos of four segments (docs/benchmarks.md, "serve at 100,000 videos of four segments: where
    its memory goes")."""
    gc.collect()
    gc.freeze()
    trim = _libc("malloc_trim")
    if trim is not None:  # the free pages inside the heaps, left by the load's temporaries, handed back
        trim(0)
