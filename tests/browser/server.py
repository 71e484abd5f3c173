"""Serve the real app over HTTP from a background thread (for browser tests)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from werkzeug.serving import WSGIRequestHandler, make_server

from jobservice.http.app import create_app
from jobservice.wiring import Services

_BODY = "tests.browser.response_body"


class _ClosingHandler(WSGIRequestHandler):
    """werkzeug's development server closes a response's body after sending it, but a client that
    resets the connection (a browser dropping a video it no longer plays) makes its read of what
    is left in the socket raise first, and the close is skipped: a streamed file stays open until
    the garbage collector finds it (a ResourceWarning pytest reports in whichever test runs then).
    This handler closes the body once the request is done, whatever happened (a second close is
    harmless)."""

    def run_wsgi(self) -> None:
        try:
            super().run_wsgi()
        finally:
            environ: dict[str, Any] = getattr(self, "environ", {})
            body = environ.pop(_BODY, None)
            if body is not None and hasattr(body, "close"):
                body.close()


def _remembering(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """``app``, with each response's body kept in its environ for ``_ClosingHandler``."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = app(environ, start_response)
        environ[_BODY] = body
        return body

    return wsgi


@contextmanager
def serve(services: Services, host: str = "127.0.0.1") -> Iterator[str]:
    """Run the app on a free port while the block runs; yields its base URL."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server(
        host, 0, _remembering(create_app(services=services)), threaded=True, request_handler=_ClosingHandler
    )
    thread = threading.Thread(target=server.serve_forever, name="web-test-server", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
