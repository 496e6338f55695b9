"""`reelsearch` commands run in the test's own process, for tests of what a command does rather than of its process
(exit statuses of a real process, signals, pipes and the entry point keep real processes: tests/test_search_cli.py,
test_watch.py, test_python_api.py)."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from pathlib import Path
from unittest import mock

import torch
from typer.testing import CliRunner

from reelsearch.cli.main import main


def cli_here(*args, cache: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`reelsearch ARGS` as its process would run it, in this one: the CLI's own ``main`` (its one-line errors and exit
    statuses) on ``args``, with ``$REELSEARCH_CACHE_DIR`` at ``cache`` (if given), in ``cwd`` (if given), its stdout
    and stderr apart; as ``subprocess.run`` returns them (a process pays 3-4 s of CPU to start Python and import
    torch). Torch's thread count (``--threads``) and the reelsearch logger's level (``--quiet``) are put back
    afterwards."""
    threads, logger = torch.get_num_threads(), logging.getLogger("reelsearch")
    level, argv, code = logger.level, [str(a) for a in args], 0
    env = {} if cache is None else {"REELSEARCH_CACHE_DIR": str(cache)}
    with CliRunner().isolation(env=env) as (out, err, _), contextlib.chdir(cwd or Path.cwd()), \
            mock.patch.object(sys, "argv", ["reelsearch", *argv]):
        try:
            main()
        except SystemExit as exc:  # as Python ends a process: a message goes to stderr, with exit status 1
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            torch.set_num_threads(threads)
            logger.setLevel(level)
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["reelsearch", *argv], code, stdout, stderr)
