"""A running ``reelsearch serve`` advertises itself beside its library, and ``reelsearch search`` asks it instead of
loading the model itself: the answer in a fraction of a cold search's time, printed the same
(``reelsearch.display``).

The advert is a small JSON file: ``serve.json`` in an embedded index's folder, or for a PostgreSQL catalog
``serve/<hash of its URL>.json`` in the cache folder (``reelsearch.cache``). It says where to ask (the machine's
name, pid, host, port) and what is served: the library (the folder's real path, or the URL's hash), the model (as
given to serve, and as it runs), the text encoding, the expert weights, the media roots, whether an API key is
needed and when it started. It is written atomically once the server listens and removed when it stops cleanly; an
advert whose process is gone is removed by the next reader. Everything here is the standard library, so a search
that asks a server imports neither torch nor numpy.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import os
import socket
import time
from pathlib import Path
from urllib.parse import urlencode

from reelsearch.cache import cache_root
from reelsearch.io import atomic_write_json
from reelsearch.location import is_database_url, model_location

logger = logging.getLogger(__name__)

#: The advert's file name in an embedded index's folder.
ADVERT_NAME = "serve.json"
#: Seconds a client waits to connect before taking the advert for stale.
CONNECT_TIMEOUT = 0.1
#: Seconds a client waits for the answer once connected (then it searches itself).
ANSWER_TIMEOUT = 30.0
#: Listening on every address: ask this machine's loopback instead.
_ANY = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


class NotServed(Exception):
    """The server cannot answer this request (an error, a refusal, a timeout): search in process instead."""


def library_key(where: str | Path) -> str:
    """The served library's identity: an index folder's real path, or ``postgresql:<hash of the URL>``."""
    if is_database_url(where):
        return "postgresql:" + hashlib.sha256(str(where).encode("utf-8")).hexdigest()[:32]
    return os.path.realpath(where)


def advert_path(where: str | Path) -> Path:
    """Where the advert of a serve over the library at ``where`` (``reelsearch.location.library_location``) is."""
    if is_database_url(where):
        return cache_root() / "serve" / f"{library_key(where).split(':', 1)[1]}.json"
    return Path(where) / ADVERT_NAME


def write_advert(where: str | Path, host: str, port: int, *, model_option: str | None, model: str, model_id: str | None,
                 text_encoder: str, weights: str | None, media_roots: list[str], api_key: bool) -> Path | None:
    """Advertise the serve process listening on ``host``:``port`` over the library at ``where``; the advert's
    path, or None (logged) when it cannot be written (a read-only index folder: clients then search in process)."""
    path = advert_path(where)
    advert = {"pid": os.getpid(), "hostname": socket.gethostname(), "host": _ANY.get(host, host), "port": port,
              "library": library_key(where), "model_option": model_location(model_option),
              "model": model_location(model), "model_id": model_id, "text_encoder": text_encoder,
              "weights": weights, "media_roots": list(media_roots), "api_key": bool(api_key), "started": time.time()}
    try:
        atomic_write_json(path, advert)
    except OSError as exc:
        logger.warning("reelsearch: cannot advertise this server in %s (%s): searches will not ask it", path,
                       exc.strerror or exc)
        return None
    return path


def remove_advert(where: str | Path) -> None:
    """Remove this process's advert over the library at ``where`` (another server's is left alone)."""
    path = advert_path(where)
    advert = _load(path)
    if advert is not None and advert.get("pid") == os.getpid() and advert.get("hostname") == socket.gethostname():
        with contextlib.suppress(OSError):
            path.unlink()


def live_advert(where: str | Path) -> dict | None:
    """The advert of a serve over the library at ``where`` that may still run: None when there is none, when it is
    unreadable, of another host or of another library (a copied folder); an advert whose process is gone is
    removed."""
    path = advert_path(where)
    advert = _load(path)
    if advert is None or advert.get("hostname") != socket.gethostname() or advert.get("library") != library_key(where):
        return None
    try:
        os.kill(int(advert["pid"]), 0)
    except ProcessLookupError:
        logger.debug("removing the stale advert %s (process %s is gone)", path, advert["pid"])
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    except PermissionError:  # another user's process: alive
        pass
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return advert


def refusal(advert: dict, *, model: str | None, text_encoder: str, weights: str | None,
            media_roots: list[str]) -> str | None:
    """Why the server of ``advert`` cannot answer a search with these settings as a search in process would
    (another model, text encoding, expert weights or media roots; an API key), or None when it can."""
    if model is None and advert.get("model_option") is not None:
        return f"it runs the model {advert.get('model')}, not the library's own"
    if model is not None and model_location(model) != advert.get("model"):
        return f"it runs the model {advert.get('model')}"
    if text_encoder != advert.get("text_encoder"):
        return f"it encodes text otherwise (--text-encoder {advert.get('text_encoder')})"
    if weights is not None or advert.get("weights") is not None:
        return "--weights are the server's own"
    if list(media_roots) != advert.get("media_roots"):
        return "it maps other --media-root folders"
    if advert.get("api_key"):
        return "it requires an API key"
    return None


def ask(advert: dict, route: str, params: list[tuple[str, str]]) -> dict:
    """The JSON answer of the server of ``advert`` to ``GET route?params``; NotServed when it cannot be reached
    within ``CONNECT_TIMEOUT`` or answers with an error (its ``detail``) or not within ``ANSWER_TIMEOUT``."""
    connection = http.client.HTTPConnection(advert["host"], int(advert["port"]), timeout=CONNECT_TIMEOUT)
    try:
        connection.connect()
        connection.sock.settimeout(ANSWER_TIMEOUT)
        connection.request("GET", f"{route}?{urlencode(params)}", headers={"Accept": "application/json"})
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise NotServed(f"no answer from {advert['host']}:{advert['port']} ({exc})") from None
    finally:
        connection.close()
    try:
        answer = json.loads(body)
    except ValueError:
        raise NotServed(f"{advert['host']}:{advert['port']} answered {response.status} without JSON") from None
    if response.status != 200:
        detail = answer.get("detail") if isinstance(answer, dict) else None
        raise NotServed(f"{advert['host']}:{advert['port']} answered {response.status}: {detail}")
    return answer


def _load(path: Path) -> dict | None:
    """The advert at ``path``, or None when there is none or it is not an advert."""
    try:
        advert = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return advert if isinstance(advert, dict) and {"pid", "host", "port"} <= advert.keys() else None
