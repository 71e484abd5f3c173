"""JSON error handlers: every refusal is a 4xx with a code and a sentence; a 500 is logged as a bug."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from jobservice.errors import ApiError

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


def _respond(error: ApiError) -> Response:
    response = jsonify(error.body())
    response.status_code = error.status
    return response


def init_app(app: Flask) -> None:
    """Register the handlers on ``app``."""

    @app.errorhandler(ApiError)
    def api_error(error: ApiError) -> Response:
        return _respond(error)

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_error: RequestEntityTooLarge) -> Response:
        limit = app.config.get("MAX_CONTENT_LENGTH")
        size = f" of {limit // 2**20} MB" if limit else ""
        return _respond(ApiError(413, "payload_too_large", f"The request is larger than the limit{size}."))

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        status = error.code or 500
        code = HTTP_CODES.get(status, "http_error")
        message = error.description or error.name
        if status == 404:
            message = f"There is no resource at {request.path}."
        elif status == 405:
            message = f"{request.method} is not allowed on {request.path}."
        response = _respond(ApiError(status, code, message))
        if status == 405 and hasattr(error, "valid_methods") and error.valid_methods:
            response.headers["Allow"] = ", ".join(error.valid_methods)
        return response

    @app.errorhandler(Exception)
    def unexpected(error: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _respond(
            ApiError(500, "internal_error", "The server failed unexpectedly; this is a bug and was logged.")
        )
