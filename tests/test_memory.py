"""A long-running process's memory (``reelsearch.memory``), as ``serve`` sets it: large freed blocks handed back to the
operating system at once; what it loaded frozen out of the collector's walks."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from reelsearch.memory import MMAP_THRESHOLD, _mallopt, return_large_frees

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or _mallopt() is None, reason="glibc (Linux)")


def anon_mib() -> float:
    """This process's anonymous resident memory (RssAnon), MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["RssAnon"].split()[0]) / 1024


def held_after_frees(block: int, count: int) -> float:
    """MiB more resident once ``count`` blocks of ``block`` bytes were written and all but the last freed."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = anon_mib()
    blocks = [libc.malloc(block) for _ in range(count)]
    for b in blocks:
        ctypes.memset(b, 1, block)
    for b in blocks[:-1]:
        libc.free(b)
    held = anon_mib() - before
    libc.free(blocks[-1])
    return held


@glibc
def test_large_blocks_freed_leave_no_resident_memory():
    """With glibc's own (dynamic) threshold, once a 16 MiB block was mapped and freed, blocks of 8 MiB come from the
    heap and, freed below a live one, stay resident (all but the last); after ``return_large_frees`` each block of
    MMAP_THRESHOLD or more is mapped on its own and gone when freed; smaller ones stay the heap's, as before."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(16 << 20))  # glibc raises its threshold to 16 MiB (unless already set in this process)
    assert return_large_frees()
    assert held_after_frees(2 * MMAP_THRESHOLD, count=8) < 12  # the live 8 MiB block alone, of 64 MiB written
    assert held_after_frees(MMAP_THRESHOLD // 2, count=32) > 24  # of 64 MiB written


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
