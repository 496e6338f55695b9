"""What several commands share: option handling that is not a command.

Library modules log (``logging.getLogger(__name__)``); the CLI decides what a user sees: one handler on the
``reelsearch`` logger writes each message to stderr as a line (``warning: ``/``error: `` in front of those levels).
``--quiet`` (global, or on a command that has it): warnings and errors only, and no progress bars; ``--verbose``:
debug messages too; neither: informational messages as well. Progress bars are drawn only on a terminal (stderr
redirected to a file or a pipe gets none: a log holds the lines, not the bars' redraws). The standard library alone
(typer inside the functions that need it), so that the entry (``reelsearch.cli.entry``) sets the output up before
it imports anything heavy.
"""

from __future__ import annotations

import logging
import sys

#: ``--text-encoder``'s choices: ``reelsearch.models.interface.TEXT_ENCODERS`` and auto (``model.use_text_encoder``),
#: named here so that parsing options imports no model (a test keeps the two in step).
TEXT_ENCODERS = ("auto", "float32", "int8", "static", "student")
TEXT_ENCODER_HELP = ("What encodes text: static (the model's static text encoder, `reelsearch distill-text`: the "
                     "fastest), student (the model's text tower cut short, `reelsearch distill-text --student`), "
                     "float32 MiniLM (as trained), int8 MiniLM, or auto: the fastest of static and student that the "
                     "model has and that was measured within 3 dev RSum of float32, else float32 (docs/search.md, "
                     "\"Choosing the text encoder\").")


def _one_text_encoder(value: str) -> str:
    import typer  # noqa: PLC0415 - cli may import lazily: the entry (reelsearch.cli.entry) reads this module first

    if value not in TEXT_ENCODERS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(TEXT_ENCODERS)}")
    return value


def text_encoder_option(default: str = "auto", help: str = TEXT_ENCODER_HELP):  # noqa: A002 - typer's own name
    """The ``--text-encoder`` option (one of ``TEXT_ENCODERS``)."""
    import typer  # noqa: PLC0415 - cli may import lazily: the entry (reelsearch.cli.entry) reads this module first

    return typer.Option(default, "--text-encoder", help=help, callback=_one_text_encoder,
                        metavar="[" + "|".join(TEXT_ENCODERS) + "]")


_state = {"quiet": False}


class _Lines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.ERROR:
            return f"error: {text}"
        return f"warning: {text}" if record.levelno >= logging.WARNING else text


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a message comes (a test's capture, a redirect)."""

    def __init__(self):
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


_handler = _Stderr()
_handler.setFormatter(_Lines())


def set_output(quiet: bool = False, verbose: bool = False) -> None:
    """Configure what the user sees (module docstring); called by the root command and by a command's --quiet."""
    logger = logging.getLogger("reelsearch")
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
    _state["quiet"] = quiet
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)


#: The help of a command's own --quiet (the same as the global one's).
QUIET_HELP = "Warnings and errors only; no progress bars (as `reelsearch --quiet`)."


def command_quiet(quiet: bool) -> bool:
    """A command's own ``--quiet``: applied as the global one is; returns whether progress bars are shown."""
    if quiet:
        set_output(quiet=True)
    return show_progress()


def show_progress(wanted: bool = True) -> bool:
    """Whether a progress bar is shown: ``wanted`` (a command's own choice), not ``--quiet``, and stderr a terminal."""
    return wanted and not _state["quiet"] and _stderr_is_terminal()


def _stderr_is_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads (None or 0: torch's default)."""
    if threads:
        import torch  # heavy: only a command that runs a model needs it

        torch.set_num_threads(threads)
