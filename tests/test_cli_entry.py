"""The `reelsearch` entry (``reelsearch.cli.entry``): it reads a `search` command line as the full CLI does, as far
as asking a running server needs, and leaves every other command line to the full CLI."""

from __future__ import annotations

import typer.main

from reelsearch.cli.entry import _DEFAULTS, SEARCH_OPTIONS, search_arguments
from reelsearch.cli.main import app


def _search_command():
    return typer.main.get_command(app).commands["search"]


def test_the_search_options_are_the_commands_own():
    params = {p.name: p for p in _search_command().params}
    names = {opt: p.name for p in params.values() for opt in p.opts if opt.startswith("-")}
    assert {opt: param for opt, (param, _) in SEARCH_OPTIONS.items()} == names
    for param, default in _DEFAULTS.items():
        assert params[param].default == default, param
    for opt, (param, kind) in SEARCH_OPTIONS.items():
        assert (kind == "flag") == params[param].is_flag, opt
        assert (kind == "list") == bool(params[param].multiple), opt
        if isinstance(kind, tuple) and isinstance(kind[0], int):
            assert (params[param].min, params[param].max) == kind, opt


def test_a_search_is_read_as_the_cli_reads_it():
    got = search_arguments(["-v", "search", "a dog", "-k", "3", "--folder", "a", "--folder=b", "--json",
                            "--index=/x", "--sort", "date", "--text-encoder", "int8"])
    assert got["global"] == {"quiet": False, "verbose": True}
    assert (got["text"], got["k"], got["folder"], got["as_json"], got["index"], got["sort"], got["text_encoder"]) == \
        ("a dog", 3, ["a", "b"], True, "/x", "date", "int8")
    assert got["moments"] == 3 and not got["local"] and "like" not in got
    assert search_arguments(["search", "--like", "2"])["like"] == "2"


def test_what_is_not_a_plain_search_goes_to_the_full_cli():
    for argv in [[], ["index", "x"], ["search", "--help"], ["search", "a", "b"], ["search", "a", "-k", "0"],
                 ["search", "a", "-k", "101"], ["search", "a", "-k", "x"], ["search", "a", "--sort", "name"],
                 ["search", "a", "--text-encoder", "fast"], ["search", "a", "--nope"], ["search", "-dog"],
                 ["search", "a", "--json=1"], ["search", "a", "-k"], ["--version", "search", "a"],
                 ["search", "--", "-a"]]:
        assert search_arguments(argv) is None, argv
