"""The ``web`` blueprint and what every page shares: template helpers, error pages, headers.

Pages live at ``/`` and under ``/ui/``; the JSON API keeps ``/jobs``, ``/models`` and friends, so
an API client never gets HTML. Errors raised by a page are answered as HTML pages, or as JSON
when the page's own JavaScript asked (``Accept: application/json``).
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, render_template, request, url_for
from werkzeug.exceptions import HTTPException

from jobservice.db.tables import utcnow
from jobservice.errors import DomainError
from jobservice.http.api.errors import OUTAGES, refusal_of
from jobservice.http.api.native.jobs import services
from jobservice.http.web.charts import format_ms, format_value
from jobservice.http.web.security import CsrfError, csrf_token, harden
from jobservice.media.types import ACCEPTED

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
# The accepted media types, for app.js (its file checks and direct uploads): the one table, handed
# to the script as a data attribute of its <script> tag rather than copied into it.
MEDIA_TYPES = [
    {"kind": t.kind, "mime": t.mime, "aliases": list(t.aliases), "extensions": list(t.extensions)}
    for t in ACCEPTED
]

bp = Blueprint("web", __name__, static_folder="static", static_url_path="/ui/static")


def wants_json() -> bool:
    """Whether the page's script asked for JSON rather than an HTML page."""
    best = request.accept_mimetypes.best_match(["text/html", "application/json"])
    return best == "application/json" and "text/html" not in request.accept_mimetypes


@lru_cache(maxsize=64)
def _digest(name: str, mtime: float) -> str:
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:10]


def static_url(name: str) -> str:
    """URL of a static file with a content hash, so browsers may cache it for long."""
    path = STATIC_DIR / name
    version = _digest(name, path.stat().st_mtime) if path.is_file() else "0"
    return url_for("web.static", filename=name, v=version)


@bp.app_context_processor
def _helpers() -> dict[str, Any]:
    principal = g.get("principal")
    return {
        "static_url": static_url,
        "csrf_token": csrf_token,
        "nav": None,
        # Who is signed in (a key; None when auth is off or nobody is), for the top bar.
        "signed_in": principal if principal is not None and principal.key_id else None,
        "auth_keys": current_app.extensions["jobservice"].settings.auth == "keys",
        "media_types": MEDIA_TYPES,
    }


@bp.app_template_filter("age")
def age(moment: datetime | None) -> str:
    """How long ago ``moment`` was: "just now", "42 s ago", "5 min ago", "3 h ago", "2 d ago"."""
    if moment is None:
        return "–"
    seconds = max(0.0, (utcnow() - moment).total_seconds())
    if seconds < 5:
        return "just now"
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h ago"
    return f"{seconds // 86400:.0f} d ago"


@bp.app_template_filter("utc")
def utc(moment: datetime | None) -> str:
    """A timestamp as ``2026-11-29 14:03:05 UTC``."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "–"


@bp.app_template_filter("iso")
def iso(moment: datetime | None) -> str:
    """A timestamp for ``<time datetime>``."""
    return moment.isoformat() if moment else ""


@bp.app_template_filter("ms")
def ms(value: float | None) -> str:
    """Milliseconds for people."""
    return format_ms(value)


@bp.app_template_filter("value")
def value(raw: Any) -> str:
    """An expected/actual value of a check, compact."""
    return format_value(raw)


@bp.app_template_filter("megabytes")
def megabytes(size: int | None) -> str:
    """A byte count as kB or MB."""
    if size is None:
        return "–"
    if size < 2**20:
        return f"{size / 1024:.0f} kB"
    return f"{size / 2**20:.1f} MB"


def error_page(status: int, title: str, message: str, code: str = "") -> tuple[Any, int]:
    """An error as an HTML page, or as the API's JSON error shape for the page's script."""
    if wants_json():
        return jsonify({"error": {"code": code or "error", "message": message}}), status
    return render_template("web/error.html", status=status, title=title, message=message, code=code), status


def _harden(response: Response) -> Response:
    if response.mimetype == "text/html":
        harden(response, services().settings)
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def _csrf(_error: CsrfError) -> tuple[Any, int]:
    return error_page(
        400,
        "This form has expired",
        "The form's security token is missing or does not match this browser session "
        "(for example after the server's secret key changed, or when cookies are blocked). "
        "Go back, reload the page and send the form again.",
        "csrf_failed",
    )


def _refused(raised: Exception) -> tuple[Any, int]:
    error = refusal_of(raised)
    titles = {404: "Not found", 409: "Not possible right now", 503: "Temporarily unavailable"}
    return error_page(error.status, titles.get(error.status, "Request refused"), error.message, error.code)


def _too_large(_error: HTTPException) -> tuple[Any, int]:
    return error_page(413, "Upload too large", "The upload is larger than this server accepts.", "too_large")


def _http_error(error: HTTPException) -> tuple[Any, int]:
    status = error.code or 500
    return error_page(status, error.name, error.description or error.name, "http_error")


def _unexpected(error: Exception) -> tuple[Any, int]:
    log.exception("unhandled error on %s %s", request.method, request.path)
    return error_page(
        500,
        "Something went wrong",
        "The server failed unexpectedly; this is a bug and was logged. Try again in a moment.",
        "internal_error",
    )


def register_page_handlers(blueprint: Blueprint) -> None:
    """What every blueprint of pages shares: security headers, and errors as HTML error pages.

    The app's own handlers answer JSON (for the API); these take precedence for the blueprint's
    routes. CSRF failures, refusals (domain errors and outages), HTTP errors and bugs each get a page.
    """
    blueprint.after_request(_harden)
    blueprint.register_error_handler(CsrfError, _csrf)
    for kind in (DomainError, *OUTAGES):
        blueprint.register_error_handler(kind, _refused)
    blueprint.register_error_handler(413, _too_large)
    blueprint.register_error_handler(HTTPException, _http_error)
    blueprint.register_error_handler(Exception, _unexpected)


register_page_handlers(bp)
