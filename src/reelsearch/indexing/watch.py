"""Watch mode: keep an index in line with folders as files arrive, change, move and go (`reelsearch index DIR
--watch`, `reelsearch serve --watch DIR`).

The file system tells what changed (inotify through ``watchdog``; or ``poll`` seconds between scans, for network
shares where inotify sees nothing); the index is changed only through ``Searcher.index`` (the one sync):

* first, a sync of the whole folders: what changed while nothing watched (a crash, a reboot) is caught up, and an
  interrupted sync continues from its last committed batch;
* a new or changed media file (or a folder created or moved in) waits until its size and modification time have
  stayed the same for ``settle`` seconds (a file still being copied keeps changing, and so does a folder that files
  are being copied into), then it is synced by itself (added or re-embedded; a folder: what is under it);
* a deletion or a move is a sync of the whole folders (which drops what vanished; a file moved within the folders
  keeps its embeddings), done as soon as no file is still being waited for (so a half-copied file is never indexed).

``status()`` says what it is doing (the page shows it through ``GET /health``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn

from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.extras import require
from reelsearch.index.media import LIBRARY_EXTENSIONS
from reelsearch.index.paths import display_path
from reelsearch.indexing.index_folder import IndexRun, index_with, open_searcher
from reelsearch.search.searcher import Searcher

logger = logging.getLogger(__name__)

#: Seconds a file's size and modification time must stay unchanged before it is indexed.
SETTLE = 2.0
#: Seconds between checks of the files waited for.
TICK = 0.25
#: Seconds before a sync that failed (e.g. the disk is full) is tried again.
RETRY = 10.0
#: Seconds Ctrl-C waits for the folder observer and a sync under way before the process ends without them.
STOP_WAIT = 5.0


def watch_roots(paths: Iterable[str | os.PathLike]) -> list[str]:
    """The absolute folders to watch; ConfigError naming a path that is not a folder."""
    roots = []
    for p in paths:
        if not os.path.isdir(p):
            raise ConfigError(f"{display_path(os.fspath(p), one_line=True)}: not a folder (watch mode follows "
                              "folders)")
        roots.append(os.path.abspath(p))
    if not roots:
        raise ConfigError("no folder to watch")
    return roots


class FolderWatcher:
    """Keeps ``searcher``'s index in line with the folders ``roots`` (module docstring), in a thread of its own:
    ``start()``, ``stop()``, ``status()``. ``poll``: seconds between scans instead of inotify; ``cues``: the text
    cues to extract (as ``Searcher.index``); ``on_sync(run)``: called with each sync's ``IndexRun``;
    ``owns_searcher``: close the searcher when stopped."""

    def __init__(self, searcher: Searcher, roots: Sequence[str | os.PathLike], *, poll: float | None = None,
                 settle: float = SETTLE, cues: Sequence[str] | None = (), on_sync: Callable[[IndexRun], None] |
                 None = None, owns_searcher: bool = False):
        if poll is not None and poll <= 0:
            raise ConfigError(f"the polling interval must be positive, got {poll}")
        if settle < 0:
            raise ConfigError(f"settle must be zero or more seconds, got {settle}")
        self.searcher, self.roots, self.poll, self.settle = searcher, watch_roots(roots), poll, settle
        self.cues, self.on_sync, self.owns_searcher = cues, on_sync, owns_searcher
        searcher.catalog.writer_wait = None  # another writer (`reelsearch index`) is waited for, never fatal
        folder = getattr(searcher.catalog, "dir", None)  # an embedded index's folder (a database has none)
        self._index_dir = None if folder is None else os.path.abspath(folder)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._changed: set[str] = set()  # paths named by events, not looked at yet
        self._full = True  # a sync of the whole folders is due (the first one: catch up)
        self._waiting: dict[str, tuple[tuple[int, int], float]] = {}  # path -> ((size, mtime_ns), unchanged since)
        self._state, self._indexing, self._last, self._error = "starting", list(self.roots), None, None
        self._observer = None
        self._thread = threading.Thread(target=self._loop, name="reelsearch-watch", daemon=True)
        # set while the thread does not run: Thread.is_alive() is not to be trusted after a join that Ctrl-C
        # interrupted (CPython < 3.13 then marks a running thread as stopped)
        self._ended = threading.Event()
        self._ended.set()

    # -- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> FolderWatcher:
        """Start following the folders (events are collected from now on), then the first sync, in the thread."""
        observers = require("watchdog.observers", "watch", "watch mode")
        polling = require("watchdog.observers.polling", "watch", "watch mode")
        events = require("watchdog.events", "watch", "watch mode")
        watcher = self

        class Handler(events.FileSystemEventHandler):
            def on_any_event(self, event):
                watcher._event(event)

        self._observer = (polling.PollingObserver(timeout=self.poll) if self.poll is not None
                          else observers.Observer())
        for root in self.roots:
            self._observer.schedule(Handler(), root, recursive=True)
        self._observer.start()
        self._ended.clear()
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 30.0) -> bool:
        """Stop following; a sync under way finishes its current batch first (or is cut short by the process's end,
        :func:`end_now`: the next start continues it). True when the watcher ended within ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
        ended = self._ended.wait(timeout)
        if ended and self.owns_searcher:
            self.searcher.close()
        return ended

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the watcher to end (it ends when stopped); True when it has."""
        return self._ended.wait(timeout)

    def __enter__(self) -> FolderWatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def status(self) -> dict:
        """What it is doing: ``state`` ("starting", "indexing", "waiting": files are being copied, "idle"), the
        ``roots``, the files ``indexing`` now, those ``waiting`` to stop changing, the ``last`` sync's summary and
        ``failed`` lines, and ``error`` (a sync that failed, retried in RETRY seconds), display paths."""
        with self._lock:
            return {"state": self._state, "roots": [display_path(r) for r in self.roots],
                    "indexing": [display_path(p) for p in self._indexing],
                    "waiting": sorted(display_path(p) for p in self._waiting),
                    "last": self._last, "error": self._error}

    # -- events ---------------------------------------------------------------------------------------------
    def _event(self, event) -> None:
        if event.event_type in ("opened", "closed_no_write") or (event.is_directory and event.event_type in
                                                                 ("modified", "closed")):
            return  # a folder is modified whenever a file in it comes or goes: the file's own event says which
        paths = [os.fsdecode(p) for p in (event.src_path, getattr(event, "dest_path", "")) if p]
        with self._lock:
            self._changed.update(p for p in paths if self._followed(p, event.is_directory))
        self._wake.set()

    def _followed(self, path: str, folder: bool) -> bool:
        """Whether ``path`` is one that ``index`` takes from the folders: a media file or a folder, not hidden, not
        the index's own (when it lies inside a watched folder)."""
        if self._index_dir is not None and (path == self._index_dir or path.startswith(self._index_dir + os.sep)):
            return False
        root = next((r for r in self.roots if path.startswith(r + os.sep)), None)
        if root is None or (not folder and os.path.splitext(path)[1].lower() not in LIBRARY_EXTENSIONS):
            return False
        return not any(part.startswith(".") for part in Path(os.path.relpath(path, root)).parts)

    # -- the loop ---------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._follow()
        finally:
            self._ended.set()

    def _follow(self) -> None:
        retry_at = 0.0
        while not self._stop.is_set():
            if time.monotonic() < retry_at:  # after a failed sync: events gather meanwhile
                self._stop.wait(TICK)
                continue
            settled, full = self._look()
            if settled or full:
                try:
                    self._sync(self.roots if full else settled, full)
                    retry_at = 0.0
                except Exception as exc:  # noqa: BLE001 (e.g. a full disk: the watcher outlives it, tries again)
                    with self._lock:
                        self._error, self._state = str(exc) if isinstance(exc, ReelsearchError) else repr(exc), "idle"
                        self._changed.update(settled)
                        self._full = self._full or full
                    retry_at = time.monotonic() + RETRY
                continue
            self._wake.wait(TICK)
            self._wake.clear()

    def _look(self) -> tuple[list[str], bool]:
        """(files that stopped changing, whether a whole sync is due now): events taken in, files waited for
        checked; a whole sync waits until no file is still changing, and then covers the settled files too."""
        now = time.monotonic()
        with self._lock:
            changed, self._changed = self._changed, set()
            for path in changed:
                self._waiting.pop(path, None)
                self._waiting[path] = ((-1, -1), now)
            settled = []
            for path, (signature, since) in list(self._waiting.items()):
                try:
                    st = os.stat(path)
                except OSError:  # gone (deleted, or moved away): the whole sync drops it
                    del self._waiting[path]
                    self._full = True
                    continue
                now_signature = (st.st_size, st.st_mtime_ns)
                if now_signature != signature:
                    self._waiting[path] = (now_signature, now)
                elif now - since >= self.settle and os.access(path, os.R_OK):
                    settled.append(path)
            busy = [p for p in self._waiting if p not in settled]
            settled = [p for p in settled if not any(b.startswith(p + os.sep) for b in busy)]  # a folder: its files
            full = self._full and not busy
            for path in settled:
                del self._waiting[path]
            if self._waiting and not settled and not full:
                self._state = "waiting"
            elif not self._waiting and not settled and not full and self._state != "starting":
                self._state = "idle"
            if full:
                self._full = False
            return sorted(settled), full

    def _sync(self, paths: list[str], full: bool) -> None:
        with self._lock:
            self._state, self._indexing = "indexing", list(paths)
        run = index_with(self.searcher, paths, cues=self.cues, progress=False)
        with self._lock:
            self._last = {"summary": run.line(), "failed": run.failure_lines(),
                          "warnings": run.warning_lines(), "skipped": run.skipped_lines(), "at": time.time(),
                          "whole": full}
            self._error = None  # a failed sync's error stays shown until one succeeds
            self._indexing = []
            self._state = "waiting" if self._waiting else "idle"
        if self.on_sync is not None:
            self.on_sync(run)


def watch_folders(paths: Sequence[str | os.PathLike], index: str | Path | None = None, model: str | None = None,
                  *, db: str | None = None, media_roots: Sequence[str] | None = None, cues: Sequence[str] = (),
                  poll: float | None = None, settle: float = SETTLE, on_sync: Callable[[IndexRun], None] | None = None,
                  ready: Callable[[FolderWatcher], None] | None = None,
                  frames_per_second: float | None = None) -> bool:
    """`reelsearch index DIR --watch`: follow the folders ``paths`` into the library at ``db`` or ``index`` until
    interrupted (Ctrl-C), remembering the model in the library as ``index`` does; ``on_sync`` gets each sync's run
    (the first covers the whole folders), ``ready`` the watcher once it started. Returns whether the watcher
    ended: False when a sync was still under way ``STOP_WAIT`` seconds after Ctrl-C (then :func:`end_now`)."""
    roots = watch_roots(paths)
    searcher, _ = open_searcher(index, model, db=db, media_roots=media_roots, frames_per_second=frames_per_second)
    try:
        watcher = FolderWatcher(searcher, roots, poll=poll, settle=settle, cues=cues, on_sync=on_sync,
                                owns_searcher=True)
    except BaseException:
        searcher.close()
        raise
    try:
        watcher.start()
        if ready is not None:
            ready(watcher)
        while not watcher.join(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        # Ctrl-C stops at once: a sync under way is left to the process's end (every committed batch is kept and
        # the next start continues), the searcher closed only when no sync holds it
        ended = watcher.stop(timeout=STOP_WAIT)
    return ended


def end_now() -> NoReturn:
    """End this process at once with exit status 0, as a kill would, saying so on stderr: for a watcher whose sync
    is still under way once stopped, since the interpreter's shutdown under a thread inside SQLite can crash. The
    sync's committed batches are kept; the next start continues it."""
    logger.warning("stopped: the sync under way is cut short (its committed batches are kept; the next start "
                   "continues it)")
    sys.stdout.flush()
    os._exit(0)
