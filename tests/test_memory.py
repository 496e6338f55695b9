"""A long-running process's memory (``reelsearch.memory``), as ``serve`` sets it: large freed blocks handed back to the
operating system at once; what it loaded frozen out of the collector's walks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reelsearch.memory import _mallopt

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or _mallopt() is None, reason="glibc (Linux)")


#: Run in a process of its own (a fresh heap: what a test process's earlier allocations left in its heaps would blur
#: the count): MiB more resident (RssAnon) once 8 blocks of 8 MiB were written and all but the last freed, glibc's
#: threshold first raised to 16 MiB by a block that large (as a load's arrays do), then ``return_large_frees`` or not.
HELD = """
import ctypes, sys
from pathlib import Path
from reelsearch.memory import MMAP_THRESHOLD, return_large_frees

def anon_mib():
    fields = dict(l.split(":", 1) for l in Path("/proc/self/status").read_text().splitlines() if ":" in l)
    return int(fields["RssAnon"].split()[0]) / 1024

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(16 << 20))  # glibc raises its mmap threshold to 16 MiB
if sys.argv[1] == "fixed":
    assert return_large_frees()
block = 2 * MMAP_THRESHOLD
before = anon_mib()
blocks = [libc.malloc(block) for _ in range(8)]
for b in blocks:
    ctypes.memset(b, 1, block)
for b in blocks[:-1]:
    libc.free(b)
print(anon_mib() - before)
"""


def held_mib(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", HELD, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


@glibc
def test_large_blocks_freed_leave_no_resident_memory():
    """With glibc's own (dynamic) threshold, once a 16 MiB block was mapped and freed, blocks of 8 MiB come from the
    heap and, freed below a live one, stay resident (all but the last: 56 of 64 MiB written); after
    ``return_large_frees`` each block of MMAP_THRESHOLD or more is mapped on its own and gone when freed."""
    assert held_mib("glibc") > 40
    assert held_mib("fixed") < 12  # the live 8 MiB block alone


def test_loaded_objects_are_frozen_and_later_garbage_still_collected():
    """``freeze_loaded`` (what ``serve`` calls once loaded) moves what is alive to the permanent generation; a cycle
    made after it is still collected (run in a process of its own: freezing is for the process's lifetime)."""
    code = """
import gc, weakref
from reelsearch.memory import freeze_loaded
class Node: pass
loaded = [Node() for _ in range(1000)]
for a, b in zip(loaded, loaded[1:]): a.next = b
before = gc.get_freeze_count()
freeze_loaded()
assert gc.get_freeze_count() >= before + 1000, (before, gc.get_freeze_count())
later = Node(); later.me = later; alive = weakref.ref(later); del later
gc.collect()
assert alive() is None
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


#: A heap left as a load leaves it: 64 MiB of blocks below the mmap threshold written, all freed but the last (which
#: keeps the heap from shrinking at its top); MiB resident (RssAnon) before and after ``freeze_loaded``.
TRIMMED = """
import ctypes
from pathlib import Path
from reelsearch.memory import freeze_loaded, return_large_frees

def anon_mib():
    fields = dict(l.split(":", 1) for l in Path("/proc/self/status").read_text().splitlines() if ":" in l)
    return int(fields["RssAnon"].split()[0]) / 1024

assert return_large_frees()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(1 << 20) for _ in range(64)]
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
for b in blocks[:-1]:
    libc.free(b)
before = anon_mib()
freeze_loaded()
print(before - anon_mib())
"""


@glibc
def test_freeze_loaded_hands_back_the_free_pages_inside_the_heap():
    """Freed blocks below the mmap threshold stay resident in the heap while a live block lies above them (glibc
    trims its heap only at the top); ``freeze_loaded`` (``serve``, once loaded) hands their pages back
    (``malloc_trim``): at 100,000 videos of four segments ``serve`` held 21 MiB less (docs/benchmarks.md, "serve at
    100,000 videos of four segments: where its memory goes")."""
    out = subprocess.run([sys.executable, "-c", TRIMMED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) > 48  # of the 63 MiB freed
