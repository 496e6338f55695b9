"""Run the service in a background thread: a real uvicorn server on a free localhost port (tests, benchmarks,
notebooks)."""

from __future__ import annotations

import socket
import threading
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServerThread:
    """``with ServerThread(app) as server: ... server.url``: uvicorn serving ``app`` until the block ends."""

    def __init__(self, app, host: str = "127.0.0.1", port: int | None = None, start_timeout: float = 30.0):
        import uvicorn  # noqa: PLC0415 - optional package (the serve extra); importing this module needs none

        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.start_timeout = start_timeout
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
