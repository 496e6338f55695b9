"""`reelsearch models`: the named architectures and the pretrained weights that ship with the package."""

from __future__ import annotations

import json

import typer

app = typer.Typer()


@app.command("models")
def models(as_json: bool = typer.Option(False, "--json", help='Print {"architectures": [...], '
                                        '"pretrained": [...]}.')) -> None:
    """List the named architectures (for `train`) and the pretrained models (for `--model` and `eval`)."""
    from reelsearch.api import describe_models, list_pretrained, models_table

    if as_json:
        typer.echo(json.dumps({"architectures": describe_models(), "pretrained": list_pretrained()}, indent=2))
    else:
        typer.echo(models_table())
