"""Every command answers --help, readable at 80 columns."""

import os
import re
import subprocess
import sys

import typer.main
from typer.testing import CliRunner

from reelsearch.cli.main import app


def _commands(group, prefix=()):
    import typer.main

    click_group = typer.main.get_command(group) if not hasattr(group, "commands") else group
    for name, cmd in click_group.commands.items():
        path = prefix + (name,)
        yield path
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, path)


def test_every_command_has_help():
    runner = CliRunner()
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0 and "Usage" in res.output
    for path in _commands(app):
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "Usage" in res.output


def test_help_fits_80_columns_and_keeps_what_it_says():
    """At 80 columns every command's help is wrapped, nothing cut (no "…") and nothing in brackets lost: the extras
    `index --help` names (reelsearch[speech], reelsearch[ocr]) show."""
    runner = CliRunner()
    for path in [(), *_commands(app)]:
        res = runner.invoke(app, [*path, "--help"], terminal_width=80)
        assert res.exit_code == 0, (path, res.output)
        assert all(len(line) <= 80 for line in res.output.splitlines()), (path, res.output)
        assert "…" not in res.output and "╭" not in res.output, (path, res.output)
    # a command's summary in the list may end in "..." but never inside brackets ("(Bogolin et al." once did)
    listing = runner.invoke(app, ["--help"], terminal_width=80).output.split("Commands:")[1]
    summaries = re.findall(r"^  \S+ +(.*(?:\n {4,}.*)*)", listing, flags=re.M)
    assert len(summaries) == len(typer.main.get_command(app).commands), listing
    assert all(s.count("(") == s.count(")") for s in summaries), listing
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "reelsearch", "index", "--help"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and "reelsearch[speech]" in proc.stdout and "reelsearch[ocr]" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80, proc.stdout


def test_search_json_help_wraps_between_field_names():
    """`search --help` at 80 columns names every key of `--json`'s hits whole, quoted (wrapped between names, never
    inside one)."""
    from reelsearch.cli.entry import JSON_KEYS

    res = CliRunner().invoke(app, ["search", "--help"], terminal_width=80)
    assert res.exit_code == 0, res.output
    listed = re.search(r"hits\s+\{(.*?)\}", res.output, flags=re.S).group(1)
    assert [name.strip() for name in listed.split(",")] == [f'"{key}"' for key in JSON_KEYS], res.output


def test_options_that_became_config_keys_name_real_keys():
    """Every old option the CLI maps to a --set key is gone from its command, and the key is one the command's
    config has (a renamed key would otherwise send users to an unknown key)."""
    import typer.main

    from reelsearch.cli.main import MOVED_OPTIONS
    from reelsearch.config import MLMConfig, TrainConfig, TuneConfig
    from reelsearch.config.typed import to_dict

    keys = {"train": to_dict(TrainConfig()), "tune": to_dict(TuneConfig()), "mlm": to_dict(MLMConfig())}
    commands = typer.main.get_command(app).commands
    for command, moved in MOVED_OPTIONS.items():
        options = {o for p in commands[command].params for o in p.opts}
        assert "--set" in options, command
        for option, key in moved.items():
            section, name = key.split(".", 1)
            assert option not in options and name in keys[section], (command, option, key)
