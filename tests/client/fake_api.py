"""A scripted HTTP server on a free port, for the client's unit tests: each request is recorded and
answered by a function of the tests (a status, headers and a body, possibly sent in timed pieces)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DROP = -1  # a Reply status that closes the connection without answering


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    """An answer: ``body`` bytes (with a Content-Length), or pieces flushed one by one (a float
    piece is a pause in seconds, a callable is called between pieces) and then the connection closes."""

    status: int = 200
    body: bytes | Iterable[bytes | float | Callable[[], None]] = b""
    headers: dict[str, str] = field(default_factory=dict)


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A JSON answer."""
    return Reply(status, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})


def error_reply(
    status: int, code: str, message: str = "refused", headers: dict[str, str] | None = None
) -> Reply:
    """The API's error shape."""
    return json_reply({"error": {"code": code, "message": message}}, status, headers)


def job(job_id: str = "j1", status: str = "queued", progress: float = 0.0, **extra: Any) -> dict[str, Any]:
    """A job view as the API renders it."""
    view: dict[str, Any] = {
        "id": job_id,
        "object": "job",
        "task": "text2video",
        "model": "fake-good",
        "status": status,
        "stage": status,
        "progress": progress,
        "params": {},
        "inputs": {},
        "source": "api",
        "attempts": 1,
        "created_at": "2026-12-01T07:00:00+00:00",
        "links": {"self": f"/jobs/{job_id}"},
    }
    view.update(extra)
    return view


def sse(*events: tuple[str, str, dict[str, Any]]) -> bytes:
    """Events as the server writes them: (id, event, data)."""
    return b"".join(
        f"id: {eid}\nevent: {name}\ndata: {json.dumps(data)}\n\n".encode() for eid, name, data in events
    )


class FakeApi:
    """The server: ``respond(seen, index)`` answers the index-th request (0-based)."""

    def __init__(self, respond: Callable[[Seen, int], Reply]) -> None:
        self.respond = respond
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
                with api._lock:
                    api.seen.append(seen)
                    index = len(api.seen) - 1
                reply = api.respond(seen, index)
                if reply.status == DROP:
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if isinstance(reply.body, bytes):
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                self.end_headers()
                self.close_connection = True
                for piece in reply.body:
                    if isinstance(piece, float):
                        time.sleep(piece)
                    elif callable(piece):
                        piece()
                    else:
                        self.wfile.write(piece)
                        self.wfile.flush()

            do_GET = do_POST = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def paths(self) -> list[str]:
        """The method and path of each request, in order."""
        return [f"{s.method} {s.path}" for s in self.seen]


@contextmanager
def fake_api(respond: Callable[[Seen, int], Reply]) -> Iterator[FakeApi]:
    """Serve ``respond`` while the block runs."""
    api = FakeApi(respond)
    thread = threading.Thread(target=api.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield api
    finally:
        api.server.shutdown()
        api.server.server_close()
        thread.join(timeout=5)
