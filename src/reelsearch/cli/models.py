"""`reelsearch models`: the named architectures and the pretrained weights that ship with the package."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    """Add `models` to ``app``."""

    @app.command("models")
    def models(as_json: bool = typer.Option(False, "--json", help='Print {"architectures": [...], '
                                            '"pretrained": [...]}.')) -> None:
        """List the named architectures (for `train`) and the pretrained models (for `--model` and `eval`)."""
        from reelsearch.api import describe_models, list_pretrained

        archs, pretrained = describe_models(), list_pretrained()
        if as_json:
            typer.echo(json.dumps({"architectures": archs, "pretrained": pretrained}, indent=2))
            return
        typer.echo("architectures (reelsearch train NAME ...):")
        width = max(len(a["name"]) for a in archs)
        mods = max(len(", ".join(a["modalities"])) for a in archs)
        for a in archs:
            typer.echo(f"  {a['name']:<{width}}  {a['kind']:<7}  {', '.join(a['modalities']):<{mods}}  {a['paper']}")
        typer.echo("\npretrained (--model NAME, reelsearch eval NAME ...):")
        for p in pretrained:
            metrics = "; ".join(f"{split}: " + ", ".join(f"{k} {v}" for k, v in m.items())
                                for split, m in p.get("metrics", {}).items())
            typer.echo(f"  {p['name']}  ({p['architecture']})  {metrics}\n    {p['description']}")
