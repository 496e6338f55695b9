"""`reelsearch index | search | annotate | serve`: build a searchable library, query it, describe a video, serve it."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Literal

import typer

from reelsearch.cli.entry import JSON_KEYS, asked_already, print_answer, served_answer
from reelsearch.cli.options import QUIET_HELP, command_quiet, text_encoder_option
from reelsearch.display import MAX_K
from reelsearch.errors import EXIT_BAD_INPUT, EXIT_PARTIAL_FAILURE
from reelsearch.location import library_location

logger = logging.getLogger(__name__)

INDEX_HELP = "Index directory (default: <user data dir>/reelsearch/index)."
DB_HELP = ("A PostgreSQL catalog instead of an index directory: postgresql://USER@HOST[:PORT]/DATABASE (password "
           "from the URL or PGPASSWORD / ~/.pgpass; default: $REELSEARCH_DB when --index is not given).")
MEDIA_ROOT_HELP = ("OLD=NEW: files stored under the folder OLD (as the indexing host saw them) are read under NEW "
                   "on this host (repeatable; see docs/deploy.md).")
MODEL_HELP = ("Model directory, training run or hf:NAME_OR_DIR (a CLIP/SigLIP checkpoint; default: the one the index "
              "was built with, else the bundled model).")
POLL_HELP = "With --watch: scan the folders every POLL seconds instead of inotify (network shares)."
SETTLE_HELP = ("With --watch: seconds a file's size and time must stay unchanged before it is indexed (a file being "
               "copied is waited for).")
LOCAL_HELP = ("Search in this process even when a `reelsearch serve` over the same library and model runs (by default "
              "it is asked: the same results, faster; see docs/search.md).")
RAY_HELP = ("Index with cooperating workers on a Ray cluster (the ray extra; needs --db): ADDRESS as ray.init takes "
            "it: auto (the running cluster), local (a new one on this machine), HOST:PORT (docs/deploy.md).")


app = typer.Typer()


@app.command("index")
def index_cmd(
    paths: list[Path] | None = typer.Argument(None, help="Video/image files or folders (searched recursively)."),
    index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
    model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    media_root: list[str] = typer.Option([], "--media-root", help=MEDIA_ROOT_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
    wait: float = typer.Option(-1, "--wait", help="Seconds to wait while another `reelsearch index` updates "
                               "the same index (default: as long as it takes; 0: fail at once)."),
    speech: bool = typer.Option(True, "--speech/--no-speech", help="Transcribe speech (Whisper tiny.en) for "
                                "search by what is said; on when reelsearch[speech] is installed."),
    ocr: bool = typer.Option(True, "--ocr/--no-ocr", help="Read on-screen text (PP-OCR) for search by what is "
                             "written; on when reelsearch[ocr] is installed."),
    check: bool = typer.Option(False, "--check", help="Check the index's files for damage (an integrity check) "
                               "and say what to do; nothing is indexed."),
    repair: bool = typer.Option(False, "--repair", help="Rebuild a damaged index from what is still readable, "
                                "then index PATHS (re-indexing the videos that were lost)."),
    from_: Path | None = typer.Option(None, "--from", help="Copy the embedded index in this folder into --db (or "
                                      "--index) with everything it holds, extracting nothing again; no PATHS."),
    watch: bool = typer.Option(False, "--watch", help="Then follow the folders until Ctrl-C: new, changed, moved "
                               "and deleted files are indexed within seconds (inotify: the watch extra)."),
    poll: float | None = typer.Option(None, "--poll", min=0.1, help=POLL_HELP),
    settle: float = typer.Option(2.0, "--settle", min=0, help=SETTLE_HELP),
    ray: str | None = typer.Option(None, "--ray", metavar="ADDRESS", help=RAY_HELP),
    workers: int | None = typer.Option(None, "--workers", min=1, help="With --ray: how many index workers (Ray "
                                       "tasks of one CPU each; default: one per CPU of the cluster)."),
    frames_per_second: float | None = typer.Option(None, "--frames-per-second", min=0.01, max=30, help="Frames "
                                                   "sampled a second of video (default: what the index remembers, "
                                                   "else 1); a new rate re-embeds every video."),
) -> None:
    """Add new files to the index, re-embed changed ones and drop deleted ones; a video's frames are sampled by
    time (one a second by default), their features extracted as the model's feature recipe says, and the video is
    cut into segments (shots, scenes) that search ranks; then what is said (speech) and written (on-screen
    text) in them is extracted for search too. With --watch, go on following the folders (one line per update).

    Exit status: 0 all done, 2 bad input (or a damaged index), 3 some files or cues failed (listed on stderr; the
    rest are indexed)."""
    from reelsearch.indexing.index_folder import check_library, index_paths, migrate_index, requested_cues
    from reelsearch.indexing.watch import end_now, watch_folders

    progress = command_quiet(quiet)

    if from_ is not None:
        typer.echo(migrate_index(from_, index, db=db, media_roots=media_root, progress=progress).line())
        return
    if check:
        lines, sound = check_library(index, db)
        typer.echo("\n".join(lines))
        raise typer.Exit(0 if sound else EXIT_BAD_INPUT)
    if not paths:
        raise typer.BadParameter("give the video/image files or folders to index", param_hint="PATHS")

    if poll is not None and not watch:
        raise typer.BadParameter("goes with --watch", param_hint="--poll")
    if workers is not None and ray is None:
        raise typer.BadParameter("goes with --ray", param_hint="--workers")
    if ray is not None and (watch or repair):
        raise typer.BadParameter("indexes PATHS once: not with --watch or --repair", param_hint="--ray")
    if ray is not None and frames_per_second is not None:
        raise typer.BadParameter("the workers sample as the catalog remembers: set --frames-per-second in an "
                                 "index run without --ray", param_hint="--ray")
    cues, off = requested_cues(speech, ocr)
    for cue, why in off.items():
        typer.echo(f"note: the {cue} cue is off ({why})", err=True)
    if watch:
        def ready(w) -> None:
            typer.echo(f"watching {', '.join(w.status()['roots'])} (Ctrl-C to stop)", err=True)

        ended = watch_folders(paths, index, model, db=db, media_roots=media_root, cues=cues, poll=poll, settle=settle,
                              frames_per_second=frames_per_second, on_sync=_echo_run, ready=ready)
        if not ended:  # a sync under way: not through an interpreter shutdown it could crash
            end_now()
        return
    if ray is not None:
        from reelsearch.indexing.index_ray import index_on_ray

        run, nodes = index_on_ray(paths, ray, workers, index, model, db=db, media_roots=media_root, cues=cues,
                                  progress=progress)
    else:
        run = index_paths(paths, index, model, db=db, media_roots=media_root, cues=cues,
                          wait=None if wait < 0 else wait, progress=progress, repair=repair,
                          frames_per_second=frames_per_second)
    _echo_run(run)
    if ray is not None:
        typer.echo(f"{len(nodes)} Ray workers on {len(set(nodes))} node{'s' * (len(set(nodes)) != 1)}")
    if run.failed:
        raise typer.Exit(EXIT_PARTIAL_FAILURE)


def _echo_run(run) -> None:
    """An index run's failures, warnings and skipped files on stderr, its summary line on stdout."""
    for line in run.failure_lines() + run.warning_lines() + run.skipped_lines():
        typer.echo(line, err=True)
    typer.echo(run.line())


@app.command("search")
def search_cmd(
    text: str | None = typer.Argument(None, help="What to look for, in words (optional with --like)."),
    index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    media_root: list[str] = typer.Option([], "--media-root", help=MEDIA_ROOT_HELP),
    k: int = typer.Option(10, "-k", "--top", min=1, max=MAX_K, help="Number of results (as the HTTP API's k)."),
    moments: int = typer.Option(3, "--moments", min=0, max=100, help="Each result's best moments (segments: "
                                "start, end, score) to give, best first."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of the HTTP API's hits {"
                                 + ", ".join(f'"{key}"' for key in JSON_KEYS) + "} (path_b64: the exact bytes of "
                                 "the file name, base64; kind: video, image or audio; confidence: 0-1, calibrated; "
                                 "moments: the best segments; experts: each expert's score; match: the words said "
                                 "or written that matched, with their time; taken_at, taken_from: when it was "
                                 "taken, seconds since the epoch, and where that comes from; unavailable: why this "
                                 'host cannot read the file); "no good match" goes to stderr.'),
    sort: Literal["relevance", "date"] = typer.Option("relevance", "--sort", help="relevance: best first; date: "
                                                      "the same results, newest first."),
    model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
    experts: str | None = typer.Option(None, "--experts", help="Experts to fuse, comma-separated, among visual "
                                       "(the model), speech, ocr (default: all the index holds)."),
    weights: str | None = typer.Option(None, "--weights", help="Expert weights, e.g. speech=0.5,ocr=0.3,like=0.5 "
                                       "(defaults measured: see docs/speech-and-text.md)."),
    text_encoder: str = text_encoder_option(),
    like: str | None = typer.Option(None, "--like", help="Videos like this example: a video or image file, "
                                    "FILE@SECONDS or VIDEO_ID@SECONDS (one moment), or an indexed VIDEO_ID; with "
                                    "TEXT too, both are fused (weight like=1; see docs/search.md)."),
    after: str | None = typer.Option(None, "--after", help="Taken from this date on: YYYY, YYYY-MM or YYYY-MM-DD "
                                     "(as after: in TEXT)."),
    before: str | None = typer.Option(None, "--before", help="Taken before this date (its start): YYYY, YYYY-MM or "
                                      "YYYY-MM-DD."),
    folder: list[str] = typer.Option([], "--folder", help="Under a folder of this name, or this path (repeatable: "
                                     "any of them)."),
    kind: str | None = typer.Option(None, "--kind", help="video, image or audio (a file without a picture)."),
    duration: list[str] = typer.Option([], "--duration", help="Seconds: >60, <30, >=10, <=10 or 30-90."),
    has: list[str] = typer.Option([], "--has", help="speech or text: something is said / written in it."),
    exclude: list[str] = typer.Option([], "--exclude", help="Leave out what shows, says or writes this (as -word in "
                                      "TEXT; repeatable)."),
    phrase: list[str] = typer.Option([], "--phrase", help="Must be said or written word for word (as \"...\" in "
                                     "TEXT; repeatable)."),
    local: bool = typer.Option(False, "--local", help=LOCAL_HELP),
    details: bool = typer.Option(False, "--details", help="Also print each hit's raw numbers: its ranking score "
                                 "(orders this search's hits only) and each source's own score."),
) -> None:
    """Find the videos that best match TEXT — by what they show, what is said and what is written in them —
    and/or look like an example (--like), with the moment (seconds) that matches best and, for a calibrated model,
    each hit's confidence (says "no good match" when the best one is below the threshold of docs/search.md).
    TEXT may hold filters (after:2023-07 before:2024 folder:holiday kind:video duration:>60 has:speech -people
    "exact phrase"); filters alone list the matching videos, newest first. A `reelsearch serve` running over the
    same library and model is asked instead (unless --local), and its answer printed the same."""
    filters = {"after": after, "before": before, "folder": folder, "kind": kind, "duration": duration, "has": has,
               "exclude": exclude, "phrase": phrase}
    served = None if local or asked_already() else served_answer(
        library_location(index, db), {"q": text, "k": k, "moments": moments, "experts": experts, "sort": sort,
                                      **filters}, like,
        model=model, text_encoder=text_encoder, weights=weights, media_roots=media_root)
    if served is not None:
        print_answer(*served, as_json=as_json, details=details)
        return
    from reelsearch.indexing.index_folder import open_searcher
    from reelsearch.search.filters import Filter, filter_pairs, read_box

    options = Filter.of(filter_pairs(filters))
    _, filt = read_box(text, options)
    searcher, _ = open_searcher(index, model, db=db, media_roots=media_root, must_exist=True, cold=True,
                                text_encoder=text_encoder)
    with searcher:
        answer = searcher.answer(text, k, frames=False, experts=experts, weights=weights, like=like,
                                 filters=options, moments=moments, sort=sort)
    print_answer([r.to_json() for r in answer.results], answer.no_good_match, filt.describe() if filt else None,
                 as_json=as_json, details=details)


@app.command("duplicates")
def duplicates_cmd(
    index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    media_root: list[str] = typer.Option([], "--media-root", help=MEDIA_ROOT_HELP),
    model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
    threshold: float | None = typer.Option(None, "--threshold", min=0.01, max=1.0, help="Cosine from which two "
                                           "frames show the same picture (default 0.65, measured: see "
                                           "docs/benchmarks.md); their thumbnails' coarse pictures must correlate "
                                           "from 0.95 at the default, closer to 1 as it rises."),
    as_json: bool = typer.Option(False, "--json", help='Print a JSON list of groups {"videos": [{id, path, name, '
                                 'path_b64, kind, duration, frames, start}], "pairs": [{a, b, offset, frames, '
                                 'coverage, similarity}]}; start: where a file starts in the group\'s first (s).'),
) -> None:
    """Group the indexed files that are the same footage: re-encodes (even at a very low bitrate), other
    resolutions, crops, trims, clips cut from a long video (with where they start in it), copies with a caption
    burnt in, stills taken from a clip. Frames are matched in order at one time offset; black, flat or faded frames
    are no evidence, so clips that share only an opening are not grouped."""
    from reelsearch.indexing.index_folder import open_searcher

    searcher, _ = open_searcher(index, model, db=db, media_roots=media_root, must_exist=True)
    with searcher:
        groups = searcher.duplicates() if threshold is None else searcher.duplicates(threshold)
    if as_json:
        _print_json([g.to_json() for g in groups])
        return
    if not groups:
        typer.echo("no duplicates")
    for number, group in enumerate(groups, 1):
        typer.echo(group.lines(number))


@app.command("annotate")
def annotate_cmd(
    file: Path = typer.Argument(..., help="A video or image."),
    captions: Path = typer.Option(..., "--captions", help="Text file of candidate captions, one per line."),
    index: Path | None = typer.Option(None, "--index", help=INDEX_HELP + " Used for the model it remembers "
                                      "and for stored embeddings of indexed files."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    media_root: list[str] = typer.Option([], "--media-root", help=MEDIA_ROOT_HELP),
    as_json: bool = typer.Option(False, "--json", help='Print a ranked JSON list of {"caption","score"}.'),
    model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
    text_encoder: str = text_encoder_option(),
) -> None:
    """Rank candidate captions for a video, best first."""
    from reelsearch.indexing.index_folder import annotate_file
    from reelsearch.search import read_captions

    ranked = annotate_file(file, read_captions(captions), index, model, db=db, media_roots=media_root,
                           text_encoder=text_encoder)
    if as_json:
        _print_json(ranked)
        return
    for rank, r in enumerate(ranked, 1):
        typer.echo(f"{rank:3d}. {r['score']:+.4f}  {r['caption']}")


@app.command("serve")
def serve_cmd(
    index: Path | None = typer.Option(None, "--index", help=INDEX_HELP),
    db: str | None = typer.Option(None, "--db", help=DB_HELP + " Any number of serve processes, on any hosts, "
                                  "can share one catalog."),
    media_root: list[str] = typer.Option([], "--media-root", help=MEDIA_ROOT_HELP),
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
    batch: int = typer.Option(32, "--batch", min=1, max=1024, help="Most concurrent searches batched together: "
                              "their texts in one encoder call, their vectors in one index search (1: each alone)."),
    batch_wait: float = typer.Option(0.0, "--batch-wait", min=0, max=100, help="Milliseconds a batch waits for "
                                     "more queries after its first (0: none; it takes what queued meanwhile)."),
    query_cache: int = typer.Option(1024, "--query-cache", min=0, help="Recent queries whose embeddings each "
                                    "worker keeps (0: none)."),
    weights: str | None = typer.Option(None, "--weights", help="Expert weights of every search, e.g. "
                                       "speech=0.5,ocr=0.3 (defaults: see docs/speech-and-text.md)."),
    text_encoder: str = text_encoder_option(),
    watch: list[Path] | None = typer.Option(None, "--watch", help="Keep the index in line with this folder "
                                            "(repeatable): new, changed, moved and deleted files are indexed "
                                            "within seconds, the page shows what is being indexed "
                                            "(the watch extra; one worker)."),
    poll: float | None = typer.Option(None, "--poll", min=0.1, help=POLL_HELP),
    settle: float = typer.Option(2.0, "--settle", min=0, help=SETTLE_HELP),
) -> None:
    """Serve the search page, the JSON API (/docs) and the indexed videos over HTTP; with --watch, keep the index
    in line with folders meanwhile. While it runs, `reelsearch search` over the same library and model asks it (its
    advert: serve.json in the index folder; see docs/search.md)."""
    from reelsearch.service.server import exposure_check, run, serve_settings

    warning = exposure_check(host, api_key, insecure_no_auth)
    if warning:
        typer.echo(warning, err=True)
    if poll is not None and not watch:
        raise typer.BadParameter("goes with --watch", param_hint="--poll")
    settings = serve_settings(index, model, db=db, media_roots=media_root, threads=threads, access_log=access_log,
                              batch=batch, batch_wait=batch_wait, query_cache=query_cache, weights=weights,
                              text_encoder=text_encoder, watch=watch, poll=poll, settle=settle)
    run(settings, host, port, workers=workers, api_key=api_key)


def _print_json(value) -> None:
    """``value`` as one line of JSON on stdout, non-ASCII characters as they are."""
    json.dump(value, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
