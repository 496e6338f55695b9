"""Leaving a torch process group, and ending the rank that left it: what ``torchrun ... reelsearch train`` and
``torchrun ... reelsearch extract`` share.

A rank leaves by :func:`leave_group` (every rank together: a barrier first, as PyTorch advises, then
``destroy_process_group``), and its process then ends by :func:`leave` once every file is written (the CLI's entry,
``reelsearch.cli.main``, calls it with the command's exit status; a script of its own calls it last).

Why: gloo's C++ threads wind down after ``destroy_process_group`` while the interpreter's finalisation destroys
objects that still hold gloo work (autograd's, the all-gather's): a known PyTorch teardown race that can abort a rank
at interpreter exit ("terminate called without an active exception", SIGABRT) after its work was written, so that a
successful run exits non-zero (seen twice in a row in tests/test_train.py's two-process steps). ``os._exit`` skips that
finalisation (and the ``atexit`` handlers).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

import torch.distributed as dist

#: Whether this process left a process group (``leave_group``): it then ends by ``leave``.
_group = {"left": False}


def leave_group(barrier: bool = True) -> None:
    """Leave this process's process group, if it is in one: a barrier first (``barrier=False``: not, as when this
    rank failed and the others may not reach one), then ``destroy_process_group``; the process then ends by
    :func:`leave`."""
    if not dist.is_initialized():
        return
    if barrier:
        dist.barrier()
    dist.destroy_process_group()
    _group["left"] = True


def leave(code: int) -> None:
    """End this process now with exit status ``code`` (its output and log handlers flushed) when it left a process
    group (:func:`leave_group`); return otherwise (a single process ends as usual). Call it only when every file is
    written and closed."""
    if not _group["left"]:
        return
    for handler in logging.getLogger().handlers + logging.getLogger("reelsearch").handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to write
            stream.flush()
    os._exit(code)
