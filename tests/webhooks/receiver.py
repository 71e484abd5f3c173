"""A local webhook receiver for tests: records what arrives; can answer 503, hang, or be down."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.conftest import free_port


@dataclass
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: str


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 whose answer a test sets: ``status``, or ``hang`` seconds first."""

    port: int = field(default_factory=free_port)
    status: int = 200
    hang: float = 0.0
    extra_headers: dict[str, str] = field(default_factory=dict)
    reply: bytes = b"ok"
    received: list[Received] = field(default_factory=list)
    attempts: int = 0
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode()
                owner.attempts += 1
                if owner.hang:
                    time.sleep(owner.hang)
                if 200 <= owner.status < 300:
                    owner.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                try:
                    self.send_response(owner.status)
                    for name, value in owner.extra_headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(owner.reply)))
                    self.end_headers()
                    self.wfile.write(owner.reply)
                except OSError:
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
