"""`reelsearch index | search | annotate | serve`: build a searchable library, query it, describe a video, serve it."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import typer

INDEX_HELP = "Index directory (default: <user data dir>/reelsearch/index)."
MODEL_HELP = "Model directory or training run (default: the one the index was built with, else the bundled model)."
#: What `reelsearch search --json` prints of each result (``SearchResult.to_json``), in this order.
JSON_KEYS = ("id", "path", "path_b64", "score", "moment", "experts", "match")
INT8_HELP = ("Encode text with int8 MiniLM (about 1.4x faster on a CPU; embeddings slightly off float32) or "
             "float32 (default: as trained; see docs/search.md).")


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
        wait: float = typer.Option(-1, "--wait", help="Seconds to wait while another `reelsearch index` updates "
                                   "the same index (default: as long as it takes; 0: fail at once)."),
        speech: bool = typer.Option(True, "--speech/--no-speech", help="Transcribe speech (Whisper tiny.en) for "
                                    "search by what is said; on when reelsearch[speech] is installed."),
        ocr: bool = typer.Option(True, "--ocr/--no-ocr", help="Read on-screen text (PP-OCR) for search by what is "
                                 "written; on when reelsearch[ocr] is installed."),
    ) -> None:
        """Add new files to the index, re-embed changed ones and drop deleted ones; frames are sampled and their
        features extracted as the model's feature recipe says; then what is said (speech) and written (on-screen
        text) in them is extracted for search too.

        Exit status: 0 all done, 2 bad input, 3 some files or cues failed (listed on stderr; the rest are indexed)."""
        from reelsearch.index.paths import display_path
        from reelsearch.search.cue_indexing import cues_to_run
        from reelsearch.search.settings import write_settings

        available, off = cues_to_run(None)
        wanted = [c for c, on in (("speech", speech), ("ocr", ocr)) if on]
        for cue in wanted:
            if cue in off:
                typer.echo(f"note: the {cue} cue is off ({off[cue]})", err=True)
        searcher, model_name = _searcher(index, model, backend, uri)
        with searcher:
            searcher.library.writer_wait = None if wait < 0 else wait
            report = searcher.index([str(p) for p in paths], progress=not quiet,
                                    cues=[c for c in available if c in wanted])
            write_settings(searcher.library.dir, model_name, searcher.library.backend, uri)
            total = len(searcher.library)
            cue_failures = [(searcher.library.video(vid).path, cue, problem)
                            for vid, cue, problem in (report.cues.failed if report.cues else [])]
        for path, problem in report.failed:
            typer.echo(f"failed: {display_path(path, one_line=True)}: {problem}", err=True)
        for path, cue, problem in cue_failures:
            shown = display_path(path, one_line=True)
            problem = display_path(problem, one_line=True).removeprefix(f"{shown}: ")
            typer.echo(f"failed: {shown}: {cue}: {problem}", err=True)
        typer.echo(f"{report.summary()}; {total} in {searcher.library.dir}")
        if report.failed or cue_failures:
            from reelsearch.errors import EXIT_PARTIAL_FAILURE

            raise typer.Exit(EXIT_PARTIAL_FAILURE)

    @app.command("search")
    def search_cmd(
        text: str = typer.Argument(..., help="What to look for, in words."),
        index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
        k: int = typer.Option(10, "-k", "--top", min=1, max=1000, help="Number of results."),
        as_json: bool = typer.Option(False, "--json", help='Print a JSON list of {"id","path","path_b64","score",'
                                     '"moment","experts","match"} (path_b64: the exact bytes of the file name, '
                                     'base64; experts: each expert\'s score; match: the words said or written that '
                                     'matched, with their time).'),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
        experts: str | None = typer.Option(None, "--experts", help="Experts to fuse, comma-separated, among visual "
                                           "(the model), speech, ocr (default: all the index holds)."),
        weights: str | None = typer.Option(None, "--weights", help="Expert weights, e.g. speech=0.5,ocr=0.3 "
                                           "(defaults measured: see docs/speech-and-text.md)."),
        int8_text: bool = typer.Option(False, "--int8-text/--float32-text", help=INT8_HELP),
    ) -> None:
        """Find the videos that best match TEXT — by what they show, what is said and what is written in them —
        with the moment (seconds) that matches best."""
        searcher, _ = _searcher(index, model, must_exist=True, int8_text=int8_text)
        with searcher:
            results = searcher.search(text, k, frames=False, experts=experts, weights=weights)
        from reelsearch.index.paths import display_path

        if as_json:
            out = [{key: value for key, value in r.to_json().items() if key in JSON_KEYS} for r in results]
            json.dump(out, sys.stdout, ensure_ascii=False)
            sys.stdout.write("\n")
            return
        if not results:
            typer.echo("no results (is the index empty? run `reelsearch index PATH`)")
        for rank, r in enumerate(results, 1):
            typer.echo(f"{rank:3d}. {r.score:+.4f}  {_clock(r.moment)}  {display_path(r.path, one_line=True)}")
            if r.match is not None:
                typer.echo(f"     {match_line(r.match)}")

    @app.command("annotate")
    def annotate_cmd(
        file: Path = typer.Argument(..., help="A video or image."),
        captions: Path = typer.Option(..., "--captions", help="Text file of candidate captions, one per line."),
        index: Path | None = typer.Option(None, "--index", help=INDEX_HELP + " Used for the model it remembers "
                                          "and for stored embeddings of indexed files."),
        as_json: bool = typer.Option(False, "--json", help='Print a ranked JSON list of {"caption","score"}.'),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
        int8_text: bool = typer.Option(False, "--int8-text/--float32-text", help=INT8_HELP),
    ) -> None:
        """Rank candidate captions for a video, best first."""
        from reelsearch.search import read_captions
        from reelsearch.search.settings import index_dir_or_default, index_exists

        lines = read_captions(captions)
        with tempfile.TemporaryDirectory(prefix="reelsearch-annotate-") as scratch:
            # without an index there are no stored embeddings: a throwaway one, so nothing is created for the user
            where = index if index_exists(index_dir_or_default(index)) else Path(scratch)
            searcher, _ = _searcher(where, model, int8_text=int8_text)
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
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (beyond this machine an API key "
                                 "is required, or --insecure-no-auth)."),
        port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
        workers: int = typer.Option(1, "--workers", min=1, max=64, help="Worker processes, each with its own model "
                                    "over the one index (see docs/search.md for how many)."),
        api_key: str | None = typer.Option(None, "--api-key", envvar="REELSEARCH_API_KEY", show_envvar=True,
                                           help="Require this key (X-API-Key header, Bearer token, or the page's "
                                           "cookie) on every API route."),
        insecure_no_auth: bool = typer.Option(False, "--insecure-no-auth", help="Serve a non-loopback --host "
                                              "without a key (anyone who reaches the port can read every file)."),
        access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="One line per request on "
                                        "stderr: client, method, path, status, milliseconds."),
        threads: int = typer.Option(1, "--threads", min=1, help="torch threads per worker (1 keeps latency steady "
                                    "when requests or other work share the cores; see docs/benchmarks.md)."),
        batch: int = typer.Option(32, "--batch", min=1, max=1024, help="Most queries of concurrent requests "
                                  "encoded together (1: each alone)."),
        query_cache: int = typer.Option(1024, "--query-cache", min=0, help="Recent queries whose embeddings each "
                                        "worker keeps (0: none)."),
        weights: str | None = typer.Option(None, "--weights", help="Expert weights of every search, e.g. "
                                           "speech=0.5,ocr=0.3 (defaults: see docs/speech-and-text.md)."),
        int8_text: bool = typer.Option(False, "--int8-text/--float32-text", help=INT8_HELP),
    ) -> None:
        """Serve the search page, the JSON API (/docs) and the indexed videos over HTTP."""
        from reelsearch.errors import ReelsearchError
        from reelsearch.search.settings import index_exists, resolve
        from reelsearch.service.server import exposure_check, run

        warning = exposure_check(host, api_key, insecure_no_auth)
        if warning:
            typer.echo(warning, err=True)
        from reelsearch.search.experts import parse_weights

        parse_weights(weights)  # a bad value: exit 2 before anything starts
        directory, model, backend, uri = resolve(index, model, None, None)
        if not index_exists(directory):
            raise ReelsearchError(f"{directory}: no index here; build one with `reelsearch index PATH --index "
                                  f"{directory}`")
        settings = {"index": str(directory), "model": model, "backend": backend, "uri": uri, "threads": threads,
                    "access_log": access_log, "batch": batch, "query_cache": query_cache, "weights": weights,
                    "int8_text": int8_text}
        run(settings, host, port, workers=workers, api_key=api_key)


def match_line(match) -> str:
    """A result's matched words (``SearchResult.match``) on one line: ``said at 0:01.2: First, [preheat] the
    [oven] ...``."""
    from reelsearch.index.paths import display_path

    text, out, last = match.text, [], 0
    for a, b in match.highlights:
        out += [text[last:a], "[", text[a:b], "]"]
        last = b
    verb = "said" if match.cue == "speech" else "written"
    return f"{verb} at {_clock(match.moment)}: " + display_path("".join(out) + text[last:], one_line=True)


def _clock(seconds: float) -> str:
    m, s = divmod(max(0.0, float(seconds)), 60)
    h, m = divmod(int(m), 60)
    return f"{h:d}:{m:02d}:{s:04.1f}" if h else f"{m:d}:{s:04.1f}"
