"""`reelsearch ARGS` run in the test's own process through the command's ``main`` (a ReelsearchError is one line on
stderr and exit status 2, as in a process), where the process itself is not what a test is about."""

from __future__ import annotations

import sys

from reelsearch.cli.main import main


def run_cli(monkeypatch, args: list[str]) -> int:
    """The exit status of `reelsearch ARGS`; what it printed is the caller's ``capsys``."""
    monkeypatch.setattr(sys, "argv", ["reelsearch", *args])
    try:
        main()
    except SystemExit as exc:
        return 0 if exc.code is None else exc.code
    return 0
