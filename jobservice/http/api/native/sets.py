"""What the routes of a set of jobs (``/batches``, ``/job-groups``) share: a list's ``limit``, the
declaration of a set's job pages, and the refusals and the answer of a creation."""

from __future__ import annotations

import uuid

from flask import Response

from jobservice.errors import Invalid
from jobservice.groups.service import refresh_etas
from jobservice.http.api.doc import Schema, in_path, in_query, refused
from jobservice.wiring import Services

BAD_CURSOR = refused("A cursor this API did not make (invalid_cursor).")
# A creation's refusals whatever the set is made of (a spec, a manifest).
UNAVAILABLE = {
    "503": refused("A dependency is unavailable."),
    "507": refused("Too little free space in the store or spool (insufficient_storage)."),
}


def parse_limit(raw: str, *, most: int = 100) -> int:
    """A list's ``?limit=``: a whole number from 1 to ``most``, else a 422."""
    limit = int(raw) if raw.isdecimal() and len(raw) <= 6 else 0  # isdigit() would accept "²"
    if not 1 <= limit <= most:
        raise Invalid("invalid_limit", f"limit must be a whole number from 1 to {most}.")
    return limit


def jobs_page_parameters(id_name: str, *, default_limit: int | None = None) -> tuple[Schema, ...]:
    """The parameters of a set's ``/jobs``: its id, ``limit`` (1 to 1000) and ``cursor``."""
    limit: Schema = {"type": "integer", "minimum": 1, "maximum": 1000}
    if default_limit is not None:
        limit["default"] = default_limit
    return (in_path(id_name), in_query("limit", limit), in_query("cursor"))


def answer_created(
    response: Response, services: Services, set_id: uuid.UUID, *, location: str, created: bool
) -> Response:
    """The answer to a set's creation, at ``location``: a new set's jobs get their ETAs once it has
    been sent (the forecast plays the whole queue forward); a replay says ``Idempotent-Replayed``."""
    if created:
        response.call_on_close(lambda: refresh_etas(services, set_id))
    response.headers["Location"] = location
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response
