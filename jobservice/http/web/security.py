"""The web pages' defences: a stable session key, per-session CSRF tokens, and response headers.

The session (and with it the CSRF token) is a signed cookie, so every API process must sign with
the same key. ``JOBSERVICE_SECRET_KEY`` sets it; without it the key is generated once into
``<var_dir>/secret_key`` (mode 0600) and read back by every process that shares that folder,
which covers ``jobservice up`` and gunicorn's several workers. API processes on different hosts
must be given the same ``JOBSERVICE_SECRET_KEY``.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from flask import Response, request, session

from jobservice.settings import Settings

CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
_SESSION_KEY = "csrf"


class CsrfError(Exception):
    """A state-changing form arrived without the token of this browser session."""


def session_secret(settings: Settings) -> str:
    """The key that signs session cookies: the setting, else one stored once under var_dir."""
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value()
    path = secret_path(settings)
    with contextlib.suppress(FileNotFoundError):
        existing = path.read_text().strip()
        if existing:
            return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write a temp file, then link it into place: the link fails if another process won the race,
    # and a reader never sees a half-written key.
    tmp = path.with_name(f".secret_key.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(48))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()


def csrf_token() -> str:
    """This browser session's CSRF token (created on first use)."""
    token = session.get(_SESSION_KEY)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session[_SESSION_KEY] = token
    return token


def check_csrf() -> None:
    """Refuse the request unless its form field or header carries this session's token."""
    expected = session.get(_SESSION_KEY)
    sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD) or ""
    if not isinstance(expected, str) or not expected or not hmac.compare_digest(expected, sent):
        raise CsrfError("The form's security token is missing or stale.")


def _origin(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


def content_security_policy(settings: Settings) -> str:
    """A strict CSP for the pages: our own scripts and styles only, media also from S3 if used."""
    media = ["'self'", "blob:"]
    connect = ["'self'"]
    if settings.storage_backend == "s3":
        # Videos and inputs are 302-redirected to presigned S3 URLs; large files are PUT to them.
        origin = _origin(settings.s3_public_endpoint_url) or _origin(settings.s3_endpoint_url)
        media.append(origin or "https://*.amazonaws.com")
        connect.append(origin or "https://*.amazonaws.com")
    sources = " ".join(media)
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            f"img-src {sources} data:",
            f"media-src {sources}",
            f"connect-src {' '.join(connect)}",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def harden(response: Response, settings: Settings) -> Response:
    """Add the security headers every HTML page carries."""
    headers = response.headers
    headers.setdefault("Content-Security-Policy", content_security_policy(settings))
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Referrer-Policy", "same-origin")
    return response


def secret_path(settings: Settings) -> Path:
    """Where the generated session key lives when ``secret_key`` is unset."""
    return settings.var_dir.resolve() / "secret_key"
