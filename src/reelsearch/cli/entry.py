"""The `reelsearch` command's entry point: a `reelsearch search` that a running `reelsearch serve` over the same library
can answer (``reelsearch.served``) is asked before anything heavy is imported (neither typer nor the command modules:
the standard library alone), and its answer printed as a search in process prints it (``reelsearch.display``); every
other command line, and a search the server cannot answer, goes to the full CLI (``reelsearch.cli.main``), which
parses and checks it (and reports its mistakes) as always.

The arguments are read here only as far as asking needs: the global ``-q``/``-v`` and `search`'s own options
(:data:`SEARCH_OPTIONS`, kept in step with the command's by a test); anything else (``--help``, an unknown option, a
value out of range, ``--local``) leaves the command line to the full CLI.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from pathlib import Path

from reelsearch.cli.options import TEXT_ENCODERS, set_output
from reelsearch.display import MAX_K, answer_lines
from reelsearch.errors import ReelsearchError
from reelsearch.location import library_location
from reelsearch.served import NotServed, ask, live_advert, refusal

logger = logging.getLogger(__name__)

#: What `reelsearch search --json` prints of each result: the HTTP API's hit (``SearchResult.to_json``, in its order)
#: without the page's per-frame strip (``frames``) and a server's links (``thumbnail``, ``media``).
JSON_KEYS = ("id", "path", "name", "path_b64", "kind", "score", "moment", "frame", "duration", "experts", "match",
             "confidence", "moments", "unavailable", "taken_at", "taken_from")
#: ``--like`` as the HTTP API takes it: an indexed video's id, optionally @SECONDS (a file is searched in process).
_LIKE_ID = re.compile(r"(?P<id>[0-9]+)(?:@(?P<t>[0-9]+(?:\.[0-9]*)?))?")
#: `reelsearch search`'s options (``reelsearch.cli.search.search_cmd``): each name -> (its parameter, its kind: a
#: value, a repeatable value (list), a whole number between bounds, a flag).
SEARCH_OPTIONS = {
    "--index": ("index", "value"), "--db": ("db", "value"), "--media-root": ("media_root", "list"),
    "-k": ("k", (1, MAX_K)), "--top": ("k", (1, MAX_K)), "--moments": ("moments", (0, 100)),
    "--json": ("as_json", "flag"), "--sort": ("sort", ("relevance", "date")), "--model": ("model", "value"),
    "--experts": ("experts", "value"), "--weights": ("weights", "value"),
    "--text-encoder": ("text_encoder", TEXT_ENCODERS), "--like": ("like", "value"), "--after": ("after", "value"),
    "--before": ("before", "value"), "--folder": ("folder", "list"), "--kind": ("kind", "value"),
    "--duration": ("duration", "list"), "--has": ("has", "list"), "--exclude": ("exclude", "list"),
    "--phrase": ("phrase", "list"), "--local": ("local", "flag"), "--details": ("details", "flag"),
}
#: `search`'s defaults where they are not None or empty.
_DEFAULTS = {"k": 10, "moments": 3, "sort": "relevance", "text_encoder": "auto", "as_json": False, "local": False,
             "details": False}
_GLOBAL = {"-q": "quiet", "--quiet": "quiet", "-v": "verbose", "--verbose": "verbose"}
#: Whether this process has asked the server already (and searches in process: the full CLI does not ask again).
_asked = {"already": False}


def main() -> None:
    """Run `reelsearch`: a search the running server answers is printed here; everything else runs the full CLI."""
    if not _answered_by_server(sys.argv[1:]):
        from reelsearch.cli.main import main as cli_main  # noqa: PLC0415 - cli may import lazily (typer, commands)

        cli_main()


def _answered_by_server(argv: list[str]) -> bool:
    """Whether ``argv`` is a `search` that a running server answered (the answer printed)."""
    parsed = search_arguments(argv)
    if parsed is None or parsed["local"]:
        return False
    globals_, opts = parsed.pop("global"), parsed
    set_output(**globals_)
    filters = {key: opts.get(key, []) if key in ("folder", "duration", "has", "exclude", "phrase") else opts.get(key)
               for key in ("after", "before", "folder", "kind", "duration", "has", "exclude", "phrase")}
    try:
        where = library_location(opts.get("index"), opts.get("db"))
    except ReelsearchError:
        return False  # the full CLI says what is wrong
    served = served_answer(where, {"q": opts.get("text"), "k": opts["k"], "moments": opts["moments"],
                                   "experts": opts.get("experts"), "sort": opts["sort"], **filters}, opts.get("like"),
                           model=opts.get("model"), text_encoder=opts["text_encoder"], weights=opts.get("weights"),
                           media_roots=opts.get("media_root", []))
    if served is None:
        _asked["already"] = True
        return False
    try:
        print_answer(*served, as_json=opts["as_json"], details=opts["details"])
        sys.stdout.flush()
    except BrokenPipeError:  # the reader is gone (`reelsearch search ... | head -1`): it read what it wanted
        with contextlib.suppress(AttributeError, OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
    return True


def search_arguments(argv: list[str]) -> dict | None:
    """`search`'s parameters in ``argv`` (``text``, the options by parameter name, the defaults filled in; ``global``:
    ``quiet``/``verbose``), or None when ``argv`` is not a `search` read as far as :data:`SEARCH_OPTIONS` go."""
    args = list(argv)
    globals_ = {"quiet": False, "verbose": False}
    while args and args[0] in _GLOBAL:
        globals_[_GLOBAL[args.pop(0)]] = True
    if not args or args.pop(0) != "search":
        return None
    opts: dict = {**_DEFAULTS, "global": globals_}
    while args:
        arg = args.pop(0)
        if not arg.startswith("-") or arg == "-":
            if "text" in opts:
                return None
            opts["text"] = arg
            continue
        name, eq, value = arg.partition("=")
        if name not in SEARCH_OPTIONS:
            return None
        param, kind = SEARCH_OPTIONS[name]
        if kind == "flag":
            if eq:
                return None
            opts[param] = True
            continue
        if not eq:
            if not args:
                return None
            value = args.pop(0)
        if kind == "list":
            opts.setdefault(param, []).append(value)
        elif kind == "value":
            opts[param] = value
        elif isinstance(kind[0], int):  # a whole number between bounds
            if not re.fullmatch(r"[0-9]+", value) or not kind[0] <= int(value) <= kind[1]:
                return None
            opts[param] = int(value)
        elif value in kind:  # one of these
            opts[param] = value
        else:
            return None
    return opts


def asked_already() -> bool:
    """Whether this process's entry asked a running server for this search already (it could not answer)."""
    return _asked["already"]


def served_answer(where, params: dict, like: str | None, **settings) -> tuple[list[dict], bool, str | None] | None:
    """(results, no good match, the filters in words) of ``GET /search`` with ``params`` (and ``like``) from a
    ``reelsearch serve`` over the library at ``where`` that runs with ``settings`` (``served.refusal``); None when
    none runs, or it cannot answer (why: a debug line, under --verbose)."""
    advert = live_advert(where)
    if advert is None:
        return None
    why = refusal(advert, **settings)
    example = None if like is None else _LIKE_ID.fullmatch(like)
    if why is None and like is not None and (example is None or Path(like).exists()):
        why = "--like names a file"
    if why is not None:
        logger.debug("searching here, not asking the server on port %s: %s", advert["port"], why)
        return None
    query = [(key, str(v)) for key, value in params.items() if value is not None
             for v in (value if isinstance(value, list) else [value])]
    if example is not None:
        query += [("like", example["id"])] + ([("t", example["t"])] if example["t"] else [])
    try:
        answer = ask(advert, "/search", query)
    except NotServed as exc:
        logger.debug("searching here: %s", exc)
        return None
    logger.debug("answered by the reelsearch serve on port %s (process %s)", advert["port"], advert["pid"])
    return answer["results"], bool(answer["no_good_match"]), answer.get("filtered")


def print_answer(results: list[dict], weak: bool, filtered: str | None, *, as_json: bool,
                 details: bool = False) -> None:
    """Print a search's answer (``reelsearch.display.answer_lines``): ``results`` in JSON form (each narrowed to
    ``JSON_KEYS``), whether it is no good match, the filters in words; ``details``: the raw numbers too."""
    rows = [{key: value for key, value in r.items() if key in JSON_KEYS} for r in results]
    for line, err in answer_lines(rows, weak=weak, filtered=filtered, as_json=as_json, details=details):
        print(line, file=sys.stderr if err else sys.stdout)
