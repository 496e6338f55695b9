"""Entry point of the `reelsearch` command: assembles the command modules and reports errors cleanly."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

import typer
from typer.core import TyperGroup

from reelsearch.cli.options import set_output
from reelsearch.errors import EXIT_BAD_INPUT, ReelsearchError

#: The command modules, in the order `reelsearch --help` lists their commands. Each defines ``app``, a typer.Typer
#: whose module-level commands it declares with ``@app.command(...)``: a command group when the Typer has a name
#: (`reelsearch data info`), top-level commands when not (`reelsearch extract`). Heavy imports (torch, av, ...) stay
#: inside the commands so that `reelsearch --help` is fast.
COMMAND_MODULES = ["metrics", "extract", "train", "search", "demo", "text", "models", "data", "features", "cache",
                   "mc"]

#: Options that became config keys, per command: the old option -> the key to give with --set instead.
MOVED_OPTIONS = {
    "train": {"--epochs": "train.epochs", "--seed": "train.seed", "--loss": "train.loss",
              "--warmup-epochs": "train.warmup_epochs", "--precision": "train.precision"},
    "tune-cnn": {"--epochs": "tune.epochs", "--views": "tune.views", "--patience": "tune.early_stopping",
                 "--lr-cnn": "tune.lr_cnn", "--lr": "tune.lr", "--batch-size": "tune.batch_size",
                 "--seed": "tune.seed", "--from-block": "tune.from_block"},
    "adapt-text": {"--epochs": "mlm.epochs", "--mask-prob": "mlm.mask_prob", "--lr": "mlm.lr",
                   "--batch-size": "mlm.batch_size", "--seed": "mlm.seed", "--heldout": "mlm.heldout"},
}
_ARGV = "reelsearch.argv"


class _Commands(TyperGroup):
    """The command group; an option that became a config key (:data:`MOVED_OPTIONS`) names the ``--set`` to use."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        ctx.meta[_ARGV] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            done = super().invoke(ctx)
            sys.stdout.flush()  # what is still buffered goes now, while a closed pipe can be told apart
            return done
        except BrokenPipeError:  # the reader is gone (`reelsearch search ... | head -1`): it read what it wanted
            _stdout_to_devnull()
            raise typer.Exit(0) from None
        except Exception as exc:  # click's NoSuchOption (typer may run a vendored click: told by its attributes)
            hint = _moved_option_hint(exc, ctx.meta.get(_ARGV, []))
            if hint is not None:
                exc.message, exc.possibilities = hint, None
            raise


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that nothing more, the interpreter's last flush included, fails on a closed
    pipe."""
    with contextlib.suppress(AttributeError, OSError, ValueError):  # a stdout without a descriptor (a test's)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _moved_option_hint(exc: Exception, argv: list[str]) -> str | None:
    """What to say instead of "No such option" when ``exc`` is about an option that became a config key."""
    command = getattr(getattr(exc, "ctx", None), "info_name", None)
    option = getattr(exc, "option_name", None)
    key = MOVED_OPTIONS.get(command, {}).get(option)
    if key is None:
        return None
    value = "VALUE"
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    return f"No such option: {option}; use --set {key}={value}"


app = typer.Typer(
    name="reelsearch",
    cls=_Commands,
    help="Search video with natural language and describe video with sentences.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # click's plain help: wrapped to the terminal, [brackets] (reelsearch[speech]) kept
)


def _version(value: bool) -> None:
    if value:
        from reelsearch import __version__

        typer.echo(f"reelsearch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="Warnings and errors only; no progress bars."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug messages too.")) -> None:
    """Search video with natural language and describe video with sentences."""
    set_output(quiet=quiet, verbose=verbose)


for _name in COMMAND_MODULES:
    app.add_typer(importlib.import_module(f"reelsearch.cli.{_name}").app)


def main() -> None:
    """Run the CLI; a ReelsearchError becomes one line on stderr and exit status 2. A rank of a distributed run
    (``torchrun ... reelsearch train`` or ``extract``) ends here by ``os._exit`` once its command is done and
    everything written (``reelsearch.process_group`` says why)."""
    try:
        _run()
    except SystemExit as exc:
        _leave_process_group(exc.code)
        raise
    _leave_process_group(0)


def _leave_process_group(code) -> None:
    """``process_group.leave`` with the exit status of ``sys.exit(code)``, where a command left a process group (only
    distributed training and extraction import that module: no other command pays for importing torch here)."""
    process_group = sys.modules.get("reelsearch.process_group")
    if process_group is None:
        return
    if isinstance(code, str):  # what sys.exit would print, and its status
        print(code, file=sys.stderr)
    process_group.leave(code if isinstance(code, int) else 0 if code is None else 1)


def _run() -> None:
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
