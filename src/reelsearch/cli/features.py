"""Placeholder: filled by the command's owner."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
