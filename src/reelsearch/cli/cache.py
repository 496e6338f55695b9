"""`reelsearch cache ...`: what reelsearch keeps in its cache folder (``reelsearch.cache``): list it, clear it."""

from __future__ import annotations

import json

import typer

from reelsearch.cache import KINDS, ClearReport, cache_info, cache_root, clearable_items, info_table, remove_items
from reelsearch.errors import EXIT_PARTIAL_FAILURE, ReelsearchError

app = typer.Typer(name="cache", help="The cache folder ($REELSEARCH_CACHE_DIR): what it holds; clear it.",
                  invoke_without_command=True)
KIND_HELP = f"Kinds to clear (default: all): {', '.join(name for name, k in KINDS.items() if k.clearable)}."


@app.callback()
def cache(ctx: typer.Context) -> None:
    """List what reelsearch keeps in its cache folder (`cache info`), or clear it (`cache clear`)."""
    if ctx.invoked_subcommand is None:
        info(as_json=False)


@app.command("info")
def info(as_json: bool = typer.Option(False, "--json", help='Print {"root": ..., "kinds": {name: {"items", "bytes", '
                                      '"last_used", "what", "clearable"}}}.')) -> None:
    """List each kind of cached thing with its items, size and last use."""
    found = cache_info()
    typer.echo(json.dumps(found, indent=2) if as_json else info_table(found))


@app.command("clear")
def clear(
    kinds: list[str] = typer.Argument(None, help=KIND_HELP, show_default=False, metavar="[KIND]..."),
    older_than: float = typer.Option(None, "--older-than", min=0, metavar="DAYS",
                                     help="Only what was last used more than DAYS days ago."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be removed; remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (with --yes or --dry-run)."),
) -> None:
    """Remove cached things: all, or KINDS, or those unused for DAYS. An item another process is writing (a feature
    store's writer, an unfinished file) is skipped; nothing outside the cache folder is touched."""
    if as_json and not (yes or dry_run):
        raise ReelsearchError("cache clear --json asks nothing: give --yes (or --dry-run)")
    root = cache_root()
    items, busy = clearable_items(kinds or None, older_than, root)
    if not as_json:
        for item in items:
            typer.echo(f"{'would remove' if dry_run else 'remove'} {item.kind:<10} {item.bytes / 2**20:9.1f} MiB  "
                       f"{item.path}{'  (unfinished write)' if item.partial else ''}")
    if dry_run or not items:
        report = ClearReport(removed=items, dry_run=dry_run)
    else:
        if not yes:
            typer.confirm(f"Remove these {len(items)} items ({sum(i.bytes for i in items) / 2**20:.1f} MiB) from "
                          f"{root}?", abort=True)
        report = remove_items(items, root)
    report.skipped = busy + report.skipped
    for item in report.skipped:
        typer.echo(f"skipped {item.path}: in use, {item.busy}", err=True)
    for item, why in report.failed:
        typer.echo(f"error: cannot remove {item.path}: {why}", err=True)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        done = "would be removed" if dry_run else "removed"
        typer.echo(f"{len(report.removed)} items, {report.bytes / 2**20:.1f} MiB {done} from {root}")
    if report.failed:
        raise typer.Exit(EXIT_PARTIAL_FAILURE)
