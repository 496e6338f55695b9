"""``reelsearch index PATH --db URL --ray ADDRESS --workers N``: the cooperating index workers as Ray tasks.

Each task runs what ``reelsearch index PATH --db URL`` runs on one machine (``index_paths``: the CNNs, then the speech
and on-screen-text cues of the files it embedded), one CPU each, spread over the cluster's nodes. The work is split
by the catalog's per-file claims (``reelsearch.index.pg``), so nothing here coordinates: a task that dies loses only
the files it held, which the others (or the next run) take over once their lease expires. The text cues are not a
separate step: each worker extracts them for the files it embedded, so they are split as the files are.

The driver (this process) shows a progress bar of the files committed (the catalog's ``index_log``) and merges the
workers' reports into one: every failure once, by file.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path

from tqdm import tqdm

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.extras import MissingExtraError
from reelsearch.index import SyncReport, is_database_url, open_catalog
from reelsearch.index.media import walk_media
from reelsearch.index.textcue_records import CueReport
from reelsearch.indexing.index_folder import IndexRun, index_paths, require_paths
from reelsearch.location import library_location

#: Seconds between two looks at the catalog for the progress bar.
POLL = 0.5
#: Seconds to wait for a Ray head's port to answer.
CONNECT_TIMEOUT = 10.0


def index_on_ray(paths: Iterable[str | os.PathLike], address: str, workers: int | None = None,
                 index: str | Path | None = None, model: str | None = None, *, db: str | None = None,
                 media_roots: Sequence[str] = (), cues: Sequence[str] = (),
                 progress: bool = True) -> tuple[IndexRun, list[str]]:
    """Index ``paths`` into the PostgreSQL catalog at ``db`` (or ``REELSEARCH_DB``) with ``workers`` Ray tasks (None:
    one per CPU of the cluster) on the cluster at ``address`` (``ray.init``'s: ``auto``, ``local``, ``HOST:PORT``,
    ``ray://HOST:PORT``).

    Returns (the merged run, the id of the node each worker ran on). ConfigError without a database (an embedded
    index is one machine's) or for ``workers`` < 1; a worker's ReelsearchError is raised as it is."""
    where = library_location(index, db)
    if not is_database_url(where):
        raise ConfigError("--ray needs a PostgreSQL catalog (--db postgresql://... or REELSEARCH_DB): the workers on "
                          "the cluster's nodes share it; an embedded index (--index) is one machine's")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    require_paths(paths)
    paths = [os.path.abspath(p) for p in paths]  # a task's working directory is Ray's, not this one
    if model is not None and os.path.exists(model):
        model = os.path.abspath(model)
    roots = list(media_roots)
    ray = _ray()
    _check_reachable(address)
    try:
        ray.init(address=address, logging_level="WARNING")
    except (ConnectionError, TimeoutError) as exc:
        raise ConfigError(f"--ray {address}: cannot reach a Ray cluster there ({exc})") from None
    try:
        workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))

        def worker() -> tuple[IndexRun, str]:
            """One task: ``reelsearch index PATHS --db URL`` on its node (no progress bar), and the node's id."""
            run = index_paths(paths, model=model, db=where, media_roots=roots, cues=list(cues), progress=False)
            return run, ray.get_runtime_context().get_node_id()

        task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(worker)
        with open_catalog(where, media_roots=roots) as catalog:
            start = catalog.committed()
            pending = [task.remote() for _ in range(workers)]
            done = []
            with tqdm(total=len(walk_media(paths).files), desc=f"indexing ({workers} Ray workers)", unit="file",
                      disable=not progress, file=sys.stderr) as bar:
                while pending:
                    ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL)
                    done += ready
                    bar.update(catalog.committed() - start - bar.n)
            results = [_result(ray, ref) for ref in done]
            run = merge_runs([r for r, _ in results], len(catalog), catalog.location)
        return run, [node for _, node in results]
    finally:
        ray.shutdown()


def _ray():
    """The ray module, or MissingExtraError naming the extra."""
    try:
        import ray  # noqa: PLC0415 - optional heavy package (ray extra)
    except ImportError as exc:
        raise MissingExtraError("ray", "ray", "--ray", str(exc)) from None
    return ray


def _check_reachable(address: str) -> None:
    """ConfigError when nothing listens at a ``HOST:PORT`` address (Ray itself would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise ConfigError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); start one "
                          "(ray start --head) or give its address") from None


def _result(ray, ref):
    """A task's result; a ReelsearchError it raised comes out as itself (not wrapped in Ray's error)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, ReelsearchError):
            raise exc.cause from None
        raise


def merge_runs(runs: Sequence[IndexRun], total: int, location: str) -> IndexRun:
    """One IndexRun of the workers' ``runs``: each list of their reports joined, each path (or cue failure) once —
    the files a worker embedded are its own, but every worker sees the unchanged, removed and missing files, and a
    worker that plans its sync after another committed a file sees that file as unchanged: each path is counted once,
    under what was done to it (a file one worker failed on and another indexed once the claim's lease ran out is
    indexed; a failure is named once, by the first worker's problem)."""
    report = SyncReport(reused=sum(r.report.reused for r in runs))
    for name in ("added", "updated", "removed", "unchanged"):
        setattr(report, name, _once(x for r in runs for x in getattr(r.report, name)))
    indexed = {*report.added, *report.updated}
    first: dict = {}
    for path, why in (x for r in runs for x in r.report.failed):
        if path not in indexed:
            first.setdefault(path, (path, why))
    report.failed = list(first.values())
    report.warnings = _once(x for r in runs for x in r.report.warnings)
    report.skipped = _once(x for r in runs for x in r.report.skipped)
    done = indexed | first.keys()
    report.unchanged = [p for p in report.unchanged if p not in done]
    cue_reports = [r.report.cues for r in runs if r.report.cues is not None]
    if cue_reports:
        report.cues = CueReport()
        for f in fields(CueReport):
            if f.name == "seconds":
                for c in cue_reports:
                    for cue, s in c.seconds.items():
                        report.cues.seconds[cue] = report.cues.seconds.get(cue, 0.0) + s
            else:
                setattr(report.cues, f.name, _once(x for c in cue_reports for x in getattr(c, f.name)))
        done = {*report.cues.extracted, *report.cues.reused}
        report.cues.unchanged = [v for v in report.cues.unchanged if v not in done]
    report.cues_off = {k: v for r in runs for k, v in r.report.cues_off.items()}
    cue_failures = _once(x for r in runs for x in r.cue_failures)
    return IndexRun(report, total, location, cue_failures)


def _once(items: Iterable) -> list:
    """``items`` in order, each once."""
    return list(dict.fromkeys(items))
