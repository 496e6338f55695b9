"""Entry point of the `reelsearch` command: assembles the command modules and reports errors cleanly."""

from __future__ import annotations

import importlib
import sys

import typer

from reelsearch.errors import ReelsearchError

# Each module defines register(app). Heavy imports (torch, av, ...) stay inside the commands so that
# `reelsearch --help` is fast.
COMMAND_MODULES = ["data", "metrics", "features", "extract", "train", "mc", "search", "demo", "text"]

app = typer.Typer(
    name="reelsearch",
    help="Search video with natural language and describe video with sentences.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"reelsearch.cli.{_name}").register(app)


def main() -> None:
    """Run the CLI; a ReelsearchError becomes one line on stderr and exit status 2."""
    try:
        app()
    except ReelsearchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
