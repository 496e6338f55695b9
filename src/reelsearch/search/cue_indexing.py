"""The text-cue stage of ``reelsearch index``: after the visual sync, the speech and on-screen-text cues of what it
indexed, stored in the text-cue index beside the library (``INDEX/textcues.sqlite``), under the same writer lock.

One transaction per video (``TextCues.update``), so an interrupted run resumes where it stopped; a cue's error
is stored and reported, never losing the video's other cue or its visual entry; a file whose content is already
stored under another id (a moved file, a model change that gave every video a new id) has its cues copied, not
extracted again; and the index is pruned to the library (deleted files drop their cues).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from reelsearch.errors import ReelsearchError
from reelsearch.extras import MissingExtraError, missing_extra
from reelsearch.features.cues import CUES, CueExtractor, available_cues
from reelsearch.index.sync_records import SyncReport
from reelsearch.index.tables import SqlCatalog
from reelsearch.index.textcue_records import CueReport, TextCueError
from reelsearch.index.textcues import TextCues


def cues_to_run(cues: Sequence[str] | None) -> tuple[list[str], dict[str, str]]:
    """(cues to run, {cue: why it is off}). ``cues`` None: every cue whose extras are installed (the cue's own, and
    ``text`` for MiniLM, which embeds the segments); a cue named explicitly whose extra is missing is an error."""
    reasons = {cue: why for cue, why in available_cues().items() if why}
    text = missing_extra("text")
    if text:
        reasons = {cue: reasons.get(cue, f"meaning search of text needs MiniLM: {text}") for cue in CUES}
    if cues is None:
        return [c for c in CUES if c not in reasons], reasons
    cues = list(dict.fromkeys(cues))
    for cue in cues:
        if cue not in CUES:
            raise ReelsearchError(f"unknown cue {cue!r}; known: {', '.join(CUES)}")
        if cue in reasons:
            raise MissingExtraError("text" if text else cue, reasons[cue].split(" ")[0], f"the {cue} cue")
    return cues, {c: "turned off" for c in CUES if c not in cues}


def index_cues(catalog: SqlCatalog, cue_index: TextCues | None, report: SyncReport, cues: Sequence[str],
               extractor: CueExtractor | None = None, progress: bool = True) -> CueReport | None:
    """Run ``cues`` on the files ``report`` saw (added, updated, unchanged) and prune ``cue_index`` to the library.

    Call it holding the catalog's writer lock (``SqlCatalog.writing``), right after ``sync``. Returns the cue
    report (None when there is no text-cue index and no cue to run).
    """
    if cue_index is None:
        return None
    try:
        contents = catalog.contents()
        out = CueReport()
        if cues:
            items = []
            for path in [*report.added, *report.updated, *report.unchanged]:
                vid = catalog.find(path)
                if vid is not None:
                    items.append((vid, path, contents[vid]))
            out = cue_index.update(items, extractor or CueExtractor(), cues=cues, progress=progress)
        cue_index.prune(contents)
        return out
    except sqlite3.Error as exc:
        raise TextCueError(f"{cue_index.location}: cannot write the text-cue index ({exc}); every video stored "
                           "before is kept: free some space (or fix the permissions) and run again") from exc
