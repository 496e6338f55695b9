"""What the CLI shows of the library's messages: every module logs; the CLI prints each message as a line on stderr,
and --quiet / --verbose mean the same for every command."""

from __future__ import annotations

import fcntl
import logging
import os
import pty
import struct
import subprocess
import sys
import termios
import threading

from typer.testing import CliRunner

from in_process import cli_here
from reelsearch.cli.main import app
from reelsearch.cli.options import command_quiet, set_output, show_progress


def _say(log: logging.Logger) -> None:
    log.debug("the detail")
    log.info("reelsearch: exporting X to ONNX (once)")
    log.warning("a: only 3 eligible distractor(s)")
    log.error("it broke")


def test_messages_are_lines_and_the_levels_are_the_options(capsys, monkeypatch):
    log = logging.getLogger("reelsearch.some.module")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # progress bars are a terminal's
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


def test_quiet_and_verbose_are_options_of_every_command(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # progress bars are a terminal's
    try:
        assert CliRunner().invoke(app, ["--quiet", "models"]).exit_code == 0 and not show_progress()
        assert CliRunner().invoke(app, ["models"]).exit_code == 0 and show_progress()
        assert CliRunner().invoke(app, ["-v", "models"]).exit_code == 0
        assert logging.getLogger("reelsearch").level == logging.DEBUG
    finally:
        set_output()


def test_progress_bars_only_on_a_terminal(capsys, monkeypatch):
    set_output()
    assert not show_progress()  # stderr captured: not a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert show_progress() and not show_progress(False)


def test_index_draws_its_bar_on_a_terminal_only(tmp_path):
    """`reelsearch index` with stderr not a terminal (a log, CI; here in process, stderr captured): its lines, no bar;
    with stderr a terminal (a pty, a process): the bar."""
    from test_search_support import make_media, small_model

    make_media(tmp_path / "media")
    model = small_model("cosine").save(tmp_path / "model")
    args = ["index", str(tmp_path / "media"), "--model", str(model), "--no-speech", "--no-ocr", "--index"]
    piped = cli_here(*args, tmp_path / "piped")
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
    cmd = [sys.executable, "-m", "reelsearch", *args]
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # 80 columns: room for the bar
    drawn = bytearray()
    reader = threading.Thread(target=_read_all, args=(main, drawn))
    reader.start()
    try:
        shown = subprocess.run([*cmd, str(tmp_path / "terminal")], stdout=subprocess.PIPE, stderr=terminal, timeout=300)
    finally:
        os.close(terminal)
        reader.join(30)
        os.close(main)
    assert shown.returncode == 0 and b"indexing: 100%" in drawn, bytes(drawn)


def _read_all(fd: int, into: bytearray) -> None:
    """What is written to the terminal whose other end is ``fd``, until it is closed."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the terminal's other end is closed: all read
            return
        if not chunk:
            return
        into += chunk
