"""Refuse state-changing requests that a browser sends on behalf of another site.

The web pages carry CSRF tokens, but the JSON API takes plain form posts too, and a browser lets
any site send those ("simple" requests). Browsers say where a request comes from (``Origin``,
``Sec-Fetch-Site``); other clients (curl, SDKs, the CLI) send neither and are not affected.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Flask, request

from jobservice.errors import Forbidden

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _origin_host(origin: str) -> str | None:
    parts = urlsplit(origin)
    return parts.netloc.lower() or None


def init_app(app: Flask, *, allowed_origins: list[str]) -> None:
    """Install the check on ``app``; ``allowed_origins`` are extra sites trusted to post."""
    trusted = {host for host in (_origin_host(o) for o in allowed_origins) if host}

    @app.before_request
    def refuse_cross_site() -> None:
        if request.method not in UNSAFE_METHODS:
            return
        origin = request.headers.get("Origin")
        fetch_site = request.headers.get("Sec-Fetch-Site")
        if origin is None and fetch_site in (None, "same-origin", "none"):
            return  # not a browser, or a browser saying it is this site
        host = _origin_host(origin) if origin and origin != "null" else None
        # Compare hosts only: behind a TLS proxy the scheme we see differs from the browser's.
        if host is not None and (host == request.host.lower() or host in trusted):
            return
        raise Forbidden(
            "cross_site_request",
            "This request came from another site; send it from this service's own pages or a non-browser "
            "client (set JOBSERVICE_ALLOWED_ORIGINS to trust another site).",
        )
