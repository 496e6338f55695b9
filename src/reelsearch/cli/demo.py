"""`reelsearch demo`: the main job a new user runs (filled in by the lead)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add `demo` to ``app``."""

    @app.command("demo")
    def demo(
        shared: Path = typer.Option(Path("../shared"), help="Folder holding data/ (the shared datasets)."),
        dir: Path | None = typer.Option(None, "--dir", help="A folder of your own videos or images."),
    ) -> None:
        """Run the end-to-end example."""
        typer.echo("demo: not yet assembled")
