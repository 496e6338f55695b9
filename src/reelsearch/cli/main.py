"""Entry point of the `reelsearch` command: assembles the command modules and reports errors cleanly."""

from __future__ import annotations

import importlib
import sys

import typer

from reelsearch.errors import EXIT_BAD_INPUT, ReelsearchError

# Each module defines register(app). Heavy imports (torch, av, ...) stay inside the commands so that
# `reelsearch --help` is fast.
COMMAND_MODULES = ["data", "metrics", "features", "extract", "train", "mc", "search", "demo", "text", "models"]

app = typer.Typer(
    name="reelsearch",
    help="Search video with natural language and describe video with sentences.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)



def _version(value: bool) -> None:
    if value:
        from reelsearch import __version__

        typer.echo(f"reelsearch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Search video with natural language and describe video with sentences."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"reelsearch.cli.{_name}").register(app)


def main() -> None:
    """Run the CLI; a ReelsearchError becomes one line on stderr and exit status 2."""
    try:
        app()
    except ReelsearchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except ImportError as exc:  # an optional dependency missing: name its extra instead of a traceback
        from reelsearch.extras import extra_error

        clear = extra_error(exc)
        if clear is None:
            raise
        print(f"error: {clear}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
