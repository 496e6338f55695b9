"""``reelsearch serve``: run the app under uvicorn, in one process or several worker processes over one index.

With ``workers > 1`` uvicorn starts that many processes (spawned, not forked) that accept on one socket; each opens
the index read-only in effect (only the process holding the writer lock ever writes, see ``EmbeddedCatalog``) and
loads its own model, so queries are encoded on every core. The settings reach the workers through the environment
(``REELSEARCH_SERVE``; the API key through ``REELSEARCH_API_KEY``), since a spawned process starts from nothing.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import sys
from pathlib import Path

import torch
import uvicorn

from reelsearch.errors import ConfigError
from reelsearch.index import MediaRoots
from reelsearch.indexing.settings import remembered_model, require_index
from reelsearch.indexing.watch import SETTLE, FolderWatcher, end_now, watch_roots
from reelsearch.location import library_location, masked
from reelsearch.memory import freeze_loaded, return_large_frees
from reelsearch.search import Searcher
from reelsearch.search.experts import parse_weights
from reelsearch.served import remove_advert, write_advert
from reelsearch.service.app import create_app
from reelsearch.service.auth import API_KEY_ENV, check_api_key

logger = logging.getLogger(__name__)

SETTINGS_ENV = "REELSEARCH_SERVE"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) only ever means this machine."""
    host = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def exposure_check(host: str, api_key: str | None, insecure_no_auth: bool) -> str | None:
    """Refuse (ConfigError) to publish the library beyond this machine without a key; returns a warning, if any."""
    if api_key:
        check_api_key(api_key)
        return None
    if is_loopback(host):
        return None
    if not insecure_no_auth:
        raise ConfigError(f"--host {host} makes every indexed file readable from the network: give an API key "
                          f"(--api-key KEY or {API_KEY_ENV}=KEY) or, on a network you trust, --insecure-no-auth")
    return (f"warning: serving {host} WITHOUT authentication (--insecure-no-auth): anyone who can reach this port "
            "can search the library and download every indexed file")


def setup_access_log(enabled: bool) -> None:
    """Access lines (``reelsearch.access``) to stderr with a timestamp, or nowhere."""
    access = logging.getLogger("reelsearch.access")
    access.setLevel(logging.INFO if enabled else logging.WARNING)
    access.propagate = False
    if enabled and not access.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        access.addHandler(handler)


def serve_settings(index: str | Path | None, model: str | None, *, db: str | None = None,
                   media_roots: list[str] | None = None, threads: int = 1, access_log: bool = True, batch: int = 32,
                   batch_wait: float = 0.0, query_cache: int = 1024, weights: str | None = None,
                   text_encoder: str = "auto", watch: list[str | Path] | None = None, poll: float | None = None,
                   settle: float = SETTLE) -> dict:
    """The settings :func:`run` takes, for the library at ``db`` or ``index`` (default: the user's folder) with
    ``model`` (default: the one the library was built with); ReelsearchError, before anything starts, for bad
    ``weights``, no index (unless ``watch`` will make it), a database that cannot be reached or a ``watch`` path that
    is not a folder. ``batch``: the most concurrent searches batched together (their texts in one encoder call,
    their query vectors in one vector-index search; 1: each alone); ``batch_wait``: milliseconds a batch waits for
    more queries after its first (0: none, it takes what has queued). ``watch``: folders to keep the library in line
    with (``reelsearch.indexing.watch``), scanned every ``poll`` seconds instead of by inotify when given."""
    parse_weights(weights)
    where = library_location(index, db)
    roots = watch_roots(watch) if watch else []
    if not roots:
        require_index(where)
    MediaRoots(media_roots)  # a bad --media-root is refused now
    return {"index": str(where), "model": remembered_model(where, model), "model_option": model,
            "media_roots": list(media_roots or []), "threads": threads, "access_log": access_log, "batch": batch,
            "batch_wait": batch_wait, "query_cache": query_cache, "weights": weights, "text_encoder": text_encoder,
            "watch": roots, "poll": poll, "settle": settle}


def build_app(settings: dict, api_key: str | None):
    """The app serving a warmed-up Searcher over the index (one per process; ``app.state.searcher``)."""
    return_large_frees()  # a long-running process: freed temporaries not kept resident
    torch.set_num_threads(int(settings.get("threads", 1)))
    setup_access_log(bool(settings.get("access_log", True)))
    searcher = Searcher(settings["index"], settings["model"], media_roots=settings.get("media_roots"),
                        weights=settings.get("weights"), text_encoder=settings.get("text_encoder", "auto"))
    batch = max(1, int(settings.get("batch", searcher.query_encoder.max_batch)))
    searcher.query_encoder.max_batch = searcher.index_stage.max_batch = batch
    searcher.query_encoder.max_wait = float(settings.get("batch_wait", 0.0)) / 1000
    searcher.query_encoder.cache_size = max(0, int(settings.get("query_cache", searcher.query_encoder.cache_size)))
    searcher.warm_up()
    return create_app(searcher, api_key=api_key, access_log=bool(settings.get("access_log", True)),
                      watcher=start_watcher(searcher, settings))


def start_watcher(searcher: Searcher, settings: dict) -> FolderWatcher | None:
    """The FolderWatcher of ``settings["watch"]`` (None without folders), started, over an index handle of its own
    with ``searcher``'s model: searches go on while it indexes, and see each batch once committed. Text cues as
    ``reelsearch index`` extracts them by default (``settings["cues"]``: a list to choose)."""
    if not settings.get("watch"):
        return None
    writer = Searcher(settings["index"], searcher.model, media_roots=settings.get("media_roots"))
    writer.model_source = searcher.model_source  # what its syncs record (the model object alone does not say)
    return FolderWatcher(writer, settings["watch"], poll=settings.get("poll"), settle=settings.get("settle", SETTLE),
                         cues=settings.get("cues"), owns_searcher=True).start()


def worker_app():
    """uvicorn's app factory in each worker process (settings from the environment); what it loaded frozen."""
    app = build_app(json.loads(os.environ[SETTINGS_ENV]), os.environ.get(API_KEY_ENV) or None)
    freeze_loaded()
    return app


def run(settings: dict, host: str, port: int, workers: int = 1, api_key: str | None = None) -> None:
    """Serve until interrupted. ``settings``: index, model, media_roots, threads, access_log, batch, batch_wait,
    query_cache,
    weights (of the search experts), text_encoder, watch, poll, settle: see :func:`serve_settings`. ConfigError, before
    the model is loaded, when ``host``:``port`` cannot be listened on (a busy port)."""
    check_port(host, port)
    options = {"host": host, "port": port, "log_level": "warning", "access_log": False}
    if settings.get("watch") and workers > 1:
        raise ConfigError("--watch runs in the one serving process: use --workers 1 (or run `reelsearch index DIR "
                          "--watch` beside `serve --workers N`)")
    if workers <= 1:
        app = build_app(settings, api_key)
        freeze_loaded()  # what was loaded stays for the process's life: the collector no longer walks it
        searcher, watcher = app.state.searcher, app.state.watcher
        logger.info("reelsearch: %d videos from %s; open http://%s:%s/", len(searcher.catalog),
                    searcher.catalog.location, host, port)
        if watcher is not None:
            logger.info("reelsearch: watching %s", ", ".join(watcher.status()["roots"]))
        try:
            AdvertisingServer(uvicorn.Config(app, **options), settings, searcher.model_id, api_key).run()
        except KeyboardInterrupt:
            pass
        finally:
            remove_advert(settings["index"])
            if watcher is not None and not watcher.stop():  # a sync still under way: not through a shutdown
                end_now()
            searcher.close()
        return
    logger.info("reelsearch: %d worker processes over %s; open http://%s:%s/", workers, masked(settings["index"]),
                host, port)
    os.environ[SETTINGS_ENV] = json.dumps(settings)
    if api_key:
        os.environ[API_KEY_ENV] = api_key
    if port:  # the workers accept on this port within seconds: until then a search that asks waits, or searches itself
        advertise(settings, host, port, None, api_key)
    try:
        uvicorn.run("reelsearch.service.server:worker_app", factory=True, workers=workers, **options)
    finally:
        remove_advert(settings["index"])


def check_port(host: str, port: int) -> None:
    """ConfigError when ``host``:``port`` cannot be bound as uvicorn binds it (in use, not this machine's address)."""
    if not port:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another --port, or "
                              "stop what listens there)") from None


class AdvertisingServer(uvicorn.Server):
    """uvicorn's server, advertised to ``reelsearch search`` (``reelsearch.served``) from when it listens until it
    shuts down (uvicorn ends the process by the signal that stopped it right after: no later cleanup runs)."""

    def __init__(self, config: uvicorn.Config, settings: dict, model_id: str, api_key: str | None):
        super().__init__(config)
        self.settings, self.model_id, self.api_key = settings, model_id, api_key

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            advertise(self.settings, self.config.host, port, self.model_id, self.api_key)

    async def shutdown(self, sockets=None) -> None:
        remove_advert(self.settings["index"])
        await super().shutdown(sockets=sockets)


def advertise(settings: dict, host: str, port: int, model_id: str | None, api_key: str | None) -> None:
    """Write the advert of a serve with ``settings`` listening on ``host``:``port`` (``reelsearch.served``)."""
    write_advert(settings["index"], host, port, model_option=settings.get("model_option"), model=settings["model"],
                 model_id=model_id, text_encoder=settings.get("text_encoder", "auto"), weights=settings.get("weights"),
                 media_roots=settings.get("media_roots") or [], api_key=bool(api_key))
