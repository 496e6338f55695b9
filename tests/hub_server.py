"""A local stand-in for the Hugging Face hub (``HF_ENDPOINT=http://127.0.0.1:PORT``) serving checkpoint folders in
the hub's URL layout, as huggingface_hub asks for them: ``/api/models/{repo}/revision/{rev}`` (the repository's
commit and files), ``/api/models/{repo}/tree/{rev}`` (the files' sizes and blob ids), ``/{repo}/resolve/{rev}/{file}``
(HEAD: ``ETag``, ``X-Repo-Commit``, ``Content-Length``; GET: the bytes)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def serve(repos: dict[str, Path]) -> tuple[ThreadingHTTPServer, list[str]]:
    """(a running server of ``repos`` {repo id: folder}, the list of request paths it was asked, filled as asked)."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
            self.send_response(code)
            for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _json(self, data) -> None:
            self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json"})

        def _route(self, head: bool) -> None:
            path = self.path.split("?", 1)[0]
            asked.append(f"{self.command} {path}")
            m = re.fullmatch(r"/api/models/(.+?)/(revision|tree)/([^/]+)(/.*)?", path)
            if m and m.group(1) in repos:
                folder = repos[m.group(1)]
                files = sorted(p.name for p in folder.iterdir() if p.is_file())
                if m.group(2) == "revision":
                    return self._json({"id": m.group(1), "modelId": m.group(1), "sha": COMMIT, "private": False,
                                       "siblings": [{"rfilename": f} for f in files]})
                return self._json([{"type": "file", "path": f, "size": (folder / f).stat().st_size,
                                    "oid": hashlib.sha1((folder / f).read_bytes()).hexdigest()} for f in files])
            m = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
            if m and m.group(1) in repos and (repos[m.group(1)] / m.group(3)).is_file():
                body = (repos[m.group(1)] / m.group(3)).read_bytes()
                return self._send(200, body, {"ETag": f'"{hashlib.sha256(body).hexdigest()}"',
                                              "X-Repo-Commit": COMMIT}, head)
            self._send(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)

        def do_GET(self):
            self._route(head=False)

        def do_HEAD(self):
            self._route(head=True)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, asked
