"""A library as the commands use it (a folder, or a PostgreSQL catalog: ``--index`` / ``--db``): a Searcher opened
with the model the library records (``reelsearch.search.library_model``), indexing (which records it) that names what
failed, and captions ranked for a file with or without an index."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.index import MediaRoots, SyncReport, is_database_url, open_catalog
from reelsearch.index.embedded.repair import RepairReport, check_index, repair_index
from reelsearch.index.paths import display_path
from reelsearch.indexing.settings import index_exists, require_index
from reelsearch.location import library_location
from reelsearch.media.decode import escaped_path as error_path
from reelsearch.models.query_model import QueryModel
from reelsearch.search.cue_indexing import cues_to_run
from reelsearch.search.library_model import index_model
from reelsearch.search.searcher import Searcher


def open_searcher(index: str | Path | None, model: str | None, *, db: str | None = None,
                  media_roots: Sequence[str] | MediaRoots | None = None, must_exist: bool = False,
                  cold: bool = False, **options) -> tuple[Searcher, str]:
    """(the Searcher over the library at ``db`` or ``index`` (``reelsearch.location.library_location``), the model
    it runs): ``model``, else the one the library records (``reelsearch.search.library_model.index_model``).
    ``must_exist``: ReelsearchError when there is no index there yet. ``cold``: open the model by its cached query
    graphs where they serve it (``reelsearch.models.query_model``: no torch; a cold ``reelsearch search``), else load
    it in torch.
    ``options``: more Searcher keywords (``text_encoder``, ``weights``, ...)."""
    where = library_location(index, db)
    if must_exist:
        require_index(where)
    catalog = open_catalog(where, media_roots=media_roots)
    try:
        model = index_model(catalog, model)
        graphs = QueryModel.open(model) if cold else None
        graphs = graphs if graphs is not None and graphs.serves(options.get("text_encoder")) else None
    except BaseException:
        catalog.close()
        raise
    return Searcher(catalog, graphs or model, **options), model


def requested_cues(speech: bool, ocr: bool) -> tuple[list[str], dict[str, str]]:
    """(the text cues to extract among those asked for, {asked-for cue: why it is off here})."""
    available, off = cues_to_run(None)
    wanted = [c for c, on in (("speech", speech), ("ocr", ocr)) if on]
    return [c for c in available if c in wanted], {c: off[c] for c in wanted if c in off}


@dataclass
class IndexRun:
    """What ``index_paths`` did: the sync's report, the videos the index now holds, and the cue failures as
    (file path, cue, problem)."""

    report: SyncReport
    total: int
    location: str
    cue_failures: list[tuple[str | bytes, str, str]] = field(default_factory=list)
    repaired: RepairReport | None = None

    @property
    def failed(self) -> bool:
        return bool(self.report.failed or self.cue_failures)

    def failure_lines(self) -> list[str]:
        """One ``failed: PATH: [CUE: ]PROBLEM`` line per file or cue that failed, naming the file once."""
        lines = [f"failed: {display_path(path, one_line=True)}: {_problem(path, problem)}"
                 for path, problem in self.report.failed]
        lines += [f"failed: {display_path(path, one_line=True)}: {cue}: {_problem(path, problem)}"
                  for path, cue, problem in self.cue_failures]
        return lines

    def warning_lines(self) -> list[str]:
        """One ``warning: PATH: WHAT`` line per file indexed in part or without a picture (a truncated file, a
        container whose duration is wrong, a file of sound alone)."""
        return [f"warning: {display_path(line, one_line=True)}" for _, line in self.report.warnings]

    def skipped_lines(self) -> list[str]:
        """One ``skipped: PATH: WHY`` line per file of the folders that is not media (each named once)."""
        return [f"skipped: {display_path(path, one_line=True)}: {why}" for path, why in self.report.skipped]

    def line(self) -> str:
        done = f"{self.report.summary()}; {self.total} in {self.location}"
        return done if self.repaired is None else f"{self.repaired.summary()}\n{done}"


def _problem(path: str | bytes, problem: str) -> str:
    """``problem`` on one line without the file's name in front: an error names its file (``MediaError``: as
    ``reelsearch.media.decode.escaped_path`` shows it), the line names it once."""
    for shown in (error_path(path), display_path(path, one_line=True)):
        problem = problem.removeprefix(f"{shown}: ")
    return display_path(problem, one_line=True)


def index_paths(paths: Iterable[str | os.PathLike], index: str | Path | None = None, model: str | None = None, *,
                db: str | None = None, media_roots: Sequence[str] | MediaRoots | None = None, cues: Sequence[str] = (),
                wait: float | None = None, progress: bool = True, repair: bool = False,
                frames_per_second: float | None = None) -> IndexRun:
    """Bring the library at ``db`` or ``index`` in line with ``paths`` (``Searcher.index``) and extract the text
    ``cues`` of their files (the library records the model: ``Searcher.index``). ``wait``: seconds to wait while
    another process writes the library (None: as long as it takes). ``repair``: first rebuild a damaged embedded
    index from what is still readable (``reelsearch.index.embedded.repair``); the sync then indexes the rest again.
    ``frames_per_second``: the sampling (None: what the library remembers, else one a second); a new rate re-embeds
    every video. ReelsearchError, before the library is opened (or made), when a path does not exist."""
    paths = list(paths)
    require_paths(paths)
    repaired = repair_index(_embedded(library_location(index, db), "--repair")) if repair else None
    searcher, _ = open_searcher(index, model, db=db, media_roots=media_roots, frames_per_second=frames_per_second)
    with searcher:
        searcher.catalog.writer_wait = wait
        run = index_with(searcher, paths, cues=cues, progress=progress)
        run.repaired = repaired
        return run


def require_paths(paths: Iterable[str | os.PathLike]) -> None:
    """ReelsearchError naming the first of ``paths`` that does not exist (a mistyped name is bad input, not a
    partial failure; nothing is indexed)."""
    for path in paths:
        if not os.path.lexists(os.path.expanduser(os.fspath(path))):
            raise ReelsearchError(f"{display_path(path, one_line=True)}: no such file or folder")


def index_with(searcher: Searcher, paths: Iterable[str | os.PathLike], *, cues: Sequence[str] | None = (),
               progress: bool = True) -> IndexRun:
    """``Searcher.index`` of ``paths`` with the text ``cues``, as an IndexRun (what failed named by file)."""
    catalog = searcher.catalog
    report = searcher.index([str(p) for p in paths], progress=progress, cues=None if cues is None else list(cues))
    cue_failures = [(catalog.video(vid).path, cue, problem)
                    for vid, cue, problem in (report.cues.failed if report.cues else [])]
    return IndexRun(report, len(catalog), catalog.location, cue_failures)


def migrate_index(source: str | Path, index: str | Path | None = None, *, db: str | None = None,
                  media_roots: Sequence[str] | MediaRoots | None = None, progress: bool = True) -> IndexRun:
    """Copy the embedded index in the folder ``source`` into the library at ``db`` (or ``index``) with everything it
    holds, without re-extracting anything (``SqlCatalog.copy_from``): ``reelsearch index --from DIR --db URL``."""
    require_index(source)
    with open_catalog(source) as old, open_catalog(library_location(index, db), media_roots=media_roots) as new:
        report = new.copy_from(old, progress=progress)
        return IndexRun(report, len(new), new.location)


def check_library(index: str | Path | None = None, db: str | None = None) -> tuple[list[str], bool]:
    """(one line per database file of the embedded index at ``index``: sound, or what is wrong; whether all are
    sound): ``reelsearch index --check``."""
    where = _embedded(library_location(index, db), "--check")
    require_index(where)
    found = check_index(where)
    lines = [f"{path}: ok" if not problems else f"{path}: damaged: {'; '.join(problems[:5])}"
             for path, problems in found.items()]
    sound = not any(found.values())
    if not sound:
        lines.append(f"repair it with `reelsearch index PATH... --repair --index {where}` (keeps every readable "
                     "video, indexes the rest of PATH again)")
    return lines, sound


def _embedded(where: str | Path, option: str) -> Path:
    if is_database_url(where):
        raise ConfigError(f"{option} is for an embedded index (a folder): PostgreSQL checks its own pages "
                          "(pg_amcheck) and is restored from its backups (pg_dump; docs/deploy.md)")
    return Path(where)


def annotate_file(file: str | os.PathLike, captions: Sequence[str], index: str | Path | None = None,
                  model: str | None = None, *, db: str | None = None, **options) -> list[dict]:
    """``captions`` ranked for ``file``, best first (``Searcher.annotate``), with the model and the stored embeddings
    of the library at ``db`` or ``index`` when there is one (else a throwaway index: nothing is created for the
    user)."""
    with tempfile.TemporaryDirectory(prefix="reelsearch-annotate-") as scratch:
        where = library_location(index, db)
        searcher, _ = open_searcher(where if index_exists(where) else Path(scratch), model, **options)
        with searcher:
            return searcher.annotate(file, captions)
