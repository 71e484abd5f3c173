"""Pages of jobs: the one keyset paginator of ``GET /jobs``, a batch's job pages and ``GET /v1/videos``.

A page is read in creation order, ``(created_at, id)`` newest first or oldest first, from a
position: the last job of the page before. The position is one row-value comparison,
``(created_at, id) < (:t, :id)`` (``>`` oldest first), so a page is one range of whichever
``(…, created_at, id)`` index fits the caller's filters, however deep it is; its values are typed
like the columns (SQLite stores both as text: a naive UTC time, a uuid's hex). A page reads
``limit + 1`` rows: the extra one only says that another page follows.

Callers keep their own filters (status, model, tenant, batch, deleted videos) and their own way of
naming a position: the native lists' opaque cursor (``encode_cursor``, ``decode_cursor``: base64url
of ``[iso-time, uuid]``; a malformed one is a 400 ``invalid_cursor``), the OpenAI list's
``after=<video id>`` (that job's ``position_of``).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import ColumnElement, Select, literal, tuple_
from sqlalchemy.orm import Session

from jobservice.db.tables import Job
from jobservice.errors import Malformed

Position = tuple[datetime, uuid.UUID]  # (created_at, id): where a job stands in creation order


class Positioned(Protocol):
    """A row a cursor can point after: a job, or a job group in the list of groups."""

    @property
    def created_at(self) -> datetime:
        """When it was created: the list's first key."""
        ...

    @property
    def id(self) -> uuid.UUID:
        """Its id: the tie-break of rows created at the same moment."""
        ...


def position_of(job: Job) -> Position:
    """Where ``job`` stands in creation order."""
    return job.created_at, job.id


def position_sql(position: Position) -> ColumnElement[Position]:
    """``position`` as SQL values typed like the columns, to compare with ``(created_at, id)``."""
    created, job_id = position
    return tuple_(literal(created, Job.created_at.type), literal(job_id, Job.id.type))


def encode_cursor(row: Positioned) -> str:
    """An opaque cursor pointing just after ``row`` (in the order of the list that made it)."""
    raw = json.dumps([row.created_at.isoformat(), str(row.id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """Parse a cursor made by ``encode_cursor``; a malformed one is a 400."""
    try:  # ours are ~100 characters of base64url holding [iso-time, uuid]; anything else is refused
        if len(cursor) > 200 or not cursor.isascii():
            raise ValueError("not ours")
        padded = cursor + "=" * (-len(cursor) % 4)
        created, job_id = json.loads(base64.b64decode(padded.encode(), altchars=b"-_", validate=True))
        if not (isinstance(created, str) and isinstance(job_id, str)):
            raise ValueError("not ours")
        moment = datetime.fromisoformat(created)
        # In UTC here, not in the query: a time at the edge of the calendar (year 1 at +14:00)
        # cannot be converted, and that is a malformed cursor, not a server error.
        moment = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
        return moment, uuid.UUID(job_id)
    except (ValueError, TypeError, binascii.Error, RecursionError, OverflowError):
        raise Malformed("invalid_cursor", "The cursor is not one this API produced.") from None


def after_cursor(cursor: str | None) -> Position | None:
    """The position a list's ``?cursor=`` names (None: the first page); a malformed one is a 400."""
    return decode_cursor(cursor) if cursor else None


def page_of_jobs(
    session: Session, query: Select[Job], *, after: Position | None, limit: int, newest_first: bool
) -> tuple[list[Job], str | None]:
    """Up to ``limit`` jobs of ``query`` (a ``select(Job)`` with the caller's filters) in creation
    order from just after ``after`` (None: from the start); and the cursor of the next page, None
    on the last one."""
    if after is not None:
        key, bound = tuple_(Job.created_at, Job.id), position_sql(after)
        query = query.where(key < bound if newest_first else key > bound)
    if newest_first:
        query = query.order_by(Job.created_at.desc(), Job.id.desc())
    else:
        query = query.order_by(Job.created_at.asc(), Job.id.asc())
    rows = list(session.scalars(query.limit(limit + 1)))
    next_cursor = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], next_cursor
