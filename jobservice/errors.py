"""Refusals: what went wrong, in a machine-readable code and a sentence for people.

Services raise a ``DomainError`` of the kind that fits (not found, conflict, invalid...) and never
pick an HTTP status; ``jobservice.http.api.errors`` answers every kind, and every outage, in one place.
Each kind names the status it is answered with, so the HTTP layer needs no table of codes.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class DomainError(Exception):
    """A refusal: ``code`` for machines, ``message`` for people, ``field`` when one input is at fault."""

    status = 400

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.details = details or []
        self.headers = headers or {}  # e.g. Retry-After, WWW-Authenticate

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response: ``{"error": {"code", "message", "details"?}}``."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


class Malformed(DomainError):
    """The request cannot be read at all (broken JSON, a bad header)."""

    status = 400


class Unauthorized(DomainError):
    """No valid credentials: a missing, wrong or revoked API key."""

    status = 401

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message, headers={"WWW-Authenticate": 'Bearer realm="jobservice"'})


class Forbidden(DomainError):
    """The request is understood but not allowed from where it came."""

    status = 403


class Misdirected(DomainError):
    """The request names a host this service does not answer for (DNS rebinding, a wrong proxy)."""

    status = 421


class NotFound(DomainError):
    """The thing named does not exist."""

    status = 404


class Conflict(DomainError):
    """The thing exists but its state does not allow the action."""

    status = 409


class TooLarge(DomainError):
    """A body or file is over its size limit."""

    status = 413


class Unsupported(DomainError):
    """The content type is not one this endpoint reads."""

    status = 415


class Invalid(DomainError):
    """Well-formed but wrong: a bad value, a missing or unexpected input."""

    status = 422


class Gone(DomainError):
    """The thing existed but its files were deleted (retention)."""

    status = 410


class TooMany(DomainError):
    """Over a quota or a rate limit; ``Retry-After`` says when to try again."""

    status = 429

    def __init__(
        self, code: str, message: str, *, retry_after: float, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(
            code, message, details=details, headers={"Retry-After": str(max(1, int(retry_after + 0.999)))}
        )
        self.retry_after = retry_after


class InsufficientStorage(DomainError):
    """The store or the spool is below its free-space floor; nothing was stored."""

    status = 507


class Unavailable(DomainError):
    """A dependency (object store, database, media tools) cannot serve the request now."""

    status = 503


class Unexpected(DomainError):
    """A bug: answered as a 500 without details."""

    status = 500


def pydantic_problems(exc: ValidationError, *, root: str = "(body)") -> tuple[str, list[dict[str, Any]]]:
    """A pydantic error as (first problem in a sentence, every problem as field/message/type).

    The one place a pydantic error becomes words: ``root`` names a problem with no location.
    """
    details = [
        {
            "field": ".".join(str(p) for p in err["loc"]) or root,
            "message": err["msg"],
            "type": err["type"],
        }
        for err in exc.errors(include_url=False, include_context=False)
    ]
    first = details[0]
    message = f"'{first['field']}': {first['message']}."
    if len(details) > 1:
        message += f" ({len(details) - 1} more problem(s) in details.)"
    return message, details


def invalid_parameters(exc: ValidationError) -> Invalid:
    """A model's parameters refused by its schema: 422 ``invalid_parameters`` with every problem."""
    message, details = pydantic_problems(exc)
    return Invalid("invalid_parameters", f"Invalid parameter {message}", details=details)
