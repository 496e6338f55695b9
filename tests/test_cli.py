"""Every command answers --help."""

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
