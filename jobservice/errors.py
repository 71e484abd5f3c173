"""The API's error type: every refusal is a 4xx with a machine-readable code and a human sentence."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as ``{"error": {"code", "message", "details"?}}`` with ``status``."""

    def __init__(
        self, status: int, code: str, message: str, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}
