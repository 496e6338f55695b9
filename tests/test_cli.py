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
