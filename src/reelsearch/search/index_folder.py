"""An index folder as the commands use it: a Searcher opened with the settings the folder remembers
(``reelsearch.search.settings``), indexing that remembers them and names what failed, and captions ranked for a file
with or without an index."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reelsearch.index import SyncReport
from reelsearch.index.paths import display_path
from reelsearch.search.cue_indexing import cues_to_run
from reelsearch.search.searcher import Searcher
from reelsearch.search.settings import index_dir_or_default, index_exists, require_index, resolve, write_settings


def open_searcher(index: str | Path | None, model: str | None, backend: str | None = None, uri: str | None = None,
                  must_exist: bool = False, **options) -> tuple[Searcher, str]:
    """(the Searcher over ``index``, the model it runs): explicit values first, then what the folder remembers, then
    the defaults (``settings.resolve``). ``must_exist``: ReelsearchError when there is no index there yet.
    ``options``: more Searcher keywords (``int8_text``, ``weights``, ...)."""
    directory, model, backend, uri = resolve(index, model, backend, uri)
    if must_exist:
        require_index(directory)
    return Searcher(directory, model, backend=backend, uri=uri, **options), model


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
    directory: Path
    cue_failures: list[tuple[str | bytes, str, str]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.report.failed or self.cue_failures)

    def failure_lines(self) -> list[str]:
        """One ``failed: PATH: [CUE: ]PROBLEM`` line per file or cue that failed."""
        lines = [f"failed: {display_path(path, one_line=True)}: {problem}" for path, problem in self.report.failed]
        for path, cue, problem in self.cue_failures:
            shown = display_path(path, one_line=True)
            problem = display_path(problem, one_line=True).removeprefix(f"{shown}: ")
            lines.append(f"failed: {shown}: {cue}: {problem}")
        return lines

    def line(self) -> str:
        return f"{self.report.summary()}; {self.total} in {self.directory}"


def index_paths(paths: Iterable[str | os.PathLike], index: str | Path | None = None, model: str | None = None,
                backend: str | None = None, uri: str | None = None, *, cues: Sequence[str] = (),
                wait: float | None = None, progress: bool = True) -> IndexRun:
    """Bring the index at ``index`` in line with ``paths`` (``Searcher.index``) and extract the text ``cues`` of
    their files, then remember the model, backend and URI in the folder. ``wait``: seconds to wait while another
    process writes the index (None: as long as it takes)."""
    searcher, model_name = open_searcher(index, model, backend, uri)
    with searcher:
        library = searcher.library
        library.writer_wait = wait
        report = searcher.index([str(p) for p in paths], progress=progress, cues=list(cues))
        write_settings(library.dir, model_name, library.backend, uri)
        cue_failures = [(library.video(vid).path, cue, problem)
                        for vid, cue, problem in (report.cues.failed if report.cues else [])]
        return IndexRun(report, len(library), library.dir, cue_failures)


def annotate_file(file: str | os.PathLike, captions: Sequence[str], index: str | Path | None = None,
                  model: str | None = None, **options) -> list[dict]:
    """``captions`` ranked for ``file``, best first (``Searcher.annotate``), with the model and the stored embeddings
    of the index at ``index`` when there is one (else a throwaway index: nothing is created for the user)."""
    with tempfile.TemporaryDirectory(prefix="reelsearch-annotate-") as scratch:
        where = index if index_exists(index_dir_or_default(index)) else Path(scratch)
        searcher, _ = open_searcher(where, model, **options)
        with searcher:
            return searcher.annotate(file, captions)
