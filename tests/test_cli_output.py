"""What the CLI shows of the library's messages: every module logs; the CLI prints each message as a line on stderr,
and --quiet / --verbose mean the same for every command."""

from __future__ import annotations

import logging

from typer.testing import CliRunner

from reelsearch.cli.main import app
from reelsearch.cli.options import command_quiet, set_output, show_progress


def _say(log: logging.Logger) -> None:
    log.debug("the detail")
    log.info("reelsearch: exporting X to ONNX (once)")
    log.warning("a: only 3 eligible distractor(s)")
    log.error("it broke")


def test_messages_are_lines_and_the_levels_are_the_options(capsys):
    log = logging.getLogger("reelsearch.some.module")
    try:
        set_output()
        _say(log)
        assert capsys.readouterr().err == ("reelsearch: exporting X to ONNX (once)\n"
                                           "warning: a: only 3 eligible distractor(s)\nerror: it broke\n")
        assert show_progress() and not show_progress(False)
        set_output(quiet=True)
        _say(log)
        assert capsys.readouterr().err == "warning: a: only 3 eligible distractor(s)\nerror: it broke\n"
        assert not show_progress()
        set_output(verbose=True)
        _say(log)
        assert capsys.readouterr().err.startswith("the detail\nreelsearch: exporting X")
        assert command_quiet(False) and not command_quiet(True)  # a command's own --quiet: the global one
    finally:
        set_output()
    assert len([h for h in logging.getLogger("reelsearch").handlers if type(h).__name__ == "_Stderr"]) == 1


def test_quiet_and_verbose_are_options_of_every_command():
    try:
        assert CliRunner().invoke(app, ["--quiet", "models"]).exit_code == 0 and not show_progress()
        assert CliRunner().invoke(app, ["models"]).exit_code == 0 and show_progress()
        assert CliRunner().invoke(app, ["-v", "models"]).exit_code == 0
        assert logging.getLogger("reelsearch").level == logging.DEBUG
    finally:
        set_output()
