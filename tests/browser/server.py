"""Serve the real app over HTTP from a background thread (for browser tests)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from werkzeug.serving import make_server

from jobservice.http.app import create_app
from jobservice.wiring import Services


@contextmanager
def serve(services: Services, host: str = "127.0.0.1") -> Iterator[str]:
    """Run the app on a free port while the block runs; yields its base URL."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server(host, 0, create_app(services=services), threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="web-test-server", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
