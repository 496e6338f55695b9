"""`reelsearch index | search | annotate | serve`: build a searchable library, query it, describe a video, serve it."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import typer

INDEX_HELP = "Index directory (default: <user data dir>/reelsearch/index)."
MODEL_HELP = "Model directory or training run (default: the one the index was built with, else the bundled model)."


def _searcher(index: Path | None, model: str | None, backend: str | None = None, uri: str | None = None,
              must_exist: bool = False, **options):
    from reelsearch.errors import ReelsearchError
    from reelsearch.search import Searcher
    from reelsearch.search.settings import index_exists, resolve

    directory, model, backend, uri = resolve(index, model, backend, uri)
    if must_exist and not index_exists(directory):
        raise ReelsearchError(f"{directory}: no index here; build one with `reelsearch index PATH --index {directory}`")
    return Searcher(directory, model, backend=backend, uri=uri, **options), model


def register(app: typer.Typer) -> None:
    """Add `index`, `search`, `annotate` and `serve` to ``app``."""

    @app.command("index")
    def index_cmd(
        paths: list[Path] = typer.Argument(..., help="Video/image files or folders (searched recursively)."),
        index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
        backend: str | None = typer.Option(None, "--backend", help="Vector index: faiss (default) or milvus."),
        uri: str | None = typer.Option(None, "--uri", help="Milvus server URI (backend milvus)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    ) -> None:
        """Add new files to the index, re-embed changed ones and drop deleted ones (exit 3 if any file failed).
        Frames are sampled and their features extracted as the model's feature recipe says."""
        from reelsearch.search.settings import write_settings

        searcher, model_name = _searcher(index, model, backend, uri)
        with searcher:
            report = searcher.index([str(p) for p in paths], progress=not quiet)
            write_settings(searcher.library.dir, model_name, searcher.library.backend, uri)
            total = len(searcher.library)
        for path, problem in report.failed:
            typer.echo(f"failed: {path}: {problem}", err=True)
        typer.echo(f"{report.summary()}; {total} in {searcher.library.dir}")
        if report.failed:
            from reelsearch.errors import EXIT_PARTIAL_FAILURE

            raise typer.Exit(EXIT_PARTIAL_FAILURE)

    @app.command("search")
    def search_cmd(
        text: str = typer.Argument(..., help="What to look for, in words."),
        index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
        k: int = typer.Option(10, "-k", "--top", min=1, max=1000, help="Number of results."),
        as_json: bool = typer.Option(False, "--json", help='Print a JSON list of {"id","path","score","moment"}.'),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
    ) -> None:
        """Find the videos that best match TEXT, with the moment (seconds) that matches best."""
        searcher, _ = _searcher(index, model, must_exist=True)
        with searcher:
            results = searcher.search(text, k, frames=False)
        if as_json:
            keys = ("id", "path", "score", "moment")
            json.dump([{key: r[key] for key in keys} for r in results], sys.stdout, ensure_ascii=False)
            sys.stdout.write("\n")
            return
        if not results:
            typer.echo("no results (is the index empty? run `reelsearch index PATH`)")
        for rank, r in enumerate(results, 1):
            typer.echo(f"{rank:3d}. {r['score']:+.4f}  {_clock(r['moment'])}  {r['path']}")

    @app.command("annotate")
    def annotate_cmd(
        file: Path = typer.Argument(..., help="A video or image."),
        captions: Path = typer.Option(..., "--captions", help="Text file of candidate captions, one per line."),
        index: Path | None = typer.Option(None, "--index", help=INDEX_HELP + " Used for the model it remembers "
                                          "and for stored embeddings of indexed files."),
        as_json: bool = typer.Option(False, "--json", help='Print a ranked JSON list of {"caption","score"}.'),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
    ) -> None:
        """Rank candidate captions for a video, best first."""
        from reelsearch.search import read_captions
        from reelsearch.search.settings import index_dir_or_default, index_exists

        lines = read_captions(captions)
        with tempfile.TemporaryDirectory(prefix="reelsearch-annotate-") as scratch:
            # without an index there are no stored embeddings: a throwaway one, so nothing is created for the user
            where = index if index_exists(index_dir_or_default(index)) else Path(scratch)
            searcher, _ = _searcher(where, model)
            with searcher:
                ranked = searcher.annotate(file, lines)
        if as_json:
            json.dump(ranked, sys.stdout, ensure_ascii=False)
            sys.stdout.write("\n")
            return
        for rank, r in enumerate(ranked, 1):
            typer.echo(f"{rank:3d}. {r['score']:+.4f}  {r['caption']}")

    @app.command("serve")
    def serve_cmd(
        index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
        threads: int = typer.Option(1, "--threads", min=1, help="torch threads per query (1 keeps latency steady "
                                    "when requests or other work share the cores; see docs/benchmarks.md)."),
    ) -> None:
        """Serve the search page, the JSON API (/docs) and the indexed videos over HTTP."""
        import torch
        import uvicorn

        torch.set_num_threads(threads)
        from reelsearch.service import create_app

        searcher, _ = _searcher(index, model, must_exist=True)
        searcher.warm_up()
        typer.echo(f"reelsearch: {len(searcher.library)} videos from {searcher.library.dir}; "
                   f"open http://{host}:{port}/", err=True)
        try:
            uvicorn.run(create_app(searcher), host=host, port=port, log_level="warning")
        finally:
            searcher.close()


def _clock(seconds: float) -> str:
    m, s = divmod(max(0.0, float(seconds)), 60)
    h, m = divmod(int(m), 60)
    return f"{h:d}:{m:02d}:{s:04.1f}" if h else f"{m:d}:{s:04.1f}"
