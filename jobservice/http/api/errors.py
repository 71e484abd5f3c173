"""The one error handler: every refusal is a 4xx with a code and a sentence; a 500 is logged as a bug.

Services raise ``DomainError`` kinds and let outages through (``StoreUnavailable``, SQLAlchemy's
``OperationalError``); ``refusal_of`` turns each into the refusal the client sees, here for JSON,
in ``jobservice.http.web.blueprint`` for pages and in the batch CLI for the terminal.
"""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, request
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from jobservice.errors import DomainError, TooLarge, Unavailable, Unexpected
from jobservice.storage import StoreUnavailable

log = logging.getLogger(__name__)

HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}
# Outages a service lets through (after cleaning up); answered as 503s.
OUTAGES = (StoreUnavailable, OperationalError)
STORE_DOWN = "The object store is unavailable; try again shortly."
DATABASE_DOWN = "The jobs database is unavailable; try again shortly."


def refusal_of(error: Exception) -> DomainError:
    """The refusal answered for ``error``: itself for a DomainError, a 503 for an outage; anything
    else is a bug (500). Request models turn their own pydantic errors into ``invalid_parameters``
    where they are read, so a pydantic error that gets here (a bad row, a bad report) is a bug too."""
    if isinstance(error, DomainError):
        return error
    if isinstance(error, StoreUnavailable):
        log.error("object store unavailable on %s %s: %s", request.method, request.path, error)
        return Unavailable("storage_unavailable", STORE_DOWN)
    if isinstance(error, OperationalError):
        log.error("database unavailable on %s %s: %s", request.method, request.path, error.orig)
        return Unavailable("database_unavailable", DATABASE_DOWN)
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
    return Unexpected("internal_error", "The server failed unexpectedly; this is a bug and was logged.")


def respond(error: DomainError) -> Response:
    """``error`` as the JSON error response."""
    response = jsonify(error.body())
    response.status_code = error.status
    response.headers.update(error.headers)
    return response


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    message = error.description or error.name
    if status == 404:
        message = f"There is no resource at {request.path}."
    elif status == 405:
        message = f"{request.method} is not allowed on {request.path}."
    response = jsonify({"error": {"code": HTTP_CODES.get(status, "http_error"), "message": message}})
    response.status_code = status
    if status == 405 and getattr(error, "valid_methods", None):
        response.headers["Allow"] = ", ".join(error.valid_methods)  # type: ignore[attr-defined]
    return response


def init_app(app: Flask) -> None:
    """Register the handlers on ``app``."""

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_error: RequestEntityTooLarge) -> Response:
        limit = app.config.get("MAX_CONTENT_LENGTH")
        size = f" of {limit // 2**20} MB" if limit else ""
        parts = app.config.get("MAX_FORM_PARTS")
        many = f", or has more than {parts} form fields and files" if parts else ""
        return respond(TooLarge("payload_too_large", f"The request is larger than the limit{size}{many}."))

    app.register_error_handler(HTTPException, _http_error)
    for kind in (DomainError, *OUTAGES, Exception):
        app.register_error_handler(kind, lambda error: respond(refusal_of(error)))
