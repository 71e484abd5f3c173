"""The one keyset paginator: a page of any query, in the order of its key columns.

Every list that pages (``GET /jobs``, a batch's and a job group's job pages, ``GET /job-groups``,
``GET /v1/videos``, a group's results) is ``page_of(session, query, keys, ...)``: ``query`` is a
``select`` of one entity with the caller's filters (status, model, tenant, batch, group, deleted
jobs), ``keys`` its key columns, a time and an id that breaks ties (``JOB_KEYS``: ``(created_at,
id)`` of jobs; ``Keys(JobGroup.created_at, JobGroup.id)`` of groups).

A page is read newest first or oldest first from a position: the keys of the last row of the page
before. The position is one row-value comparison, ``(created_at, id) < (:t, :id)`` (``>`` oldest
first), so a page is one range of whichever ``(…, created_at, id)`` index fits the caller's
filters, however deep it is; its values are typed like the columns (SQLite stores both as text: a
naive UTC time, a uuid's hex). A page reads ``limit + 1`` rows: the extra one only says that another
page follows.

Callers keep their own way of naming a position: the native lists' opaque cursor
(``encode_cursor``, ``decode_cursor``: base64url of ``[iso-time, uuid]``; a malformed one is a 400
``invalid_cursor``), the OpenAI list's ``after=<video id>`` (that job's ``JOB_KEYS.of``).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, literal, tuple_
from sqlalchemy.orm import InstrumentedAttribute, Session

from jobservice.db.tables import Job
from jobservice.errors import Malformed

Position = tuple[datetime, uuid.UUID]  # the keys of a row: where it stands in its list's order
T = TypeVar("T")


@dataclass(frozen=True)
class Keys:
    """A list's key columns: a time, then an id that breaks ties between rows of the same moment."""

    time: InstrumentedAttribute[datetime]
    id: InstrumentedAttribute[uuid.UUID]

    def of(self, row: Any) -> Position:
        """Where ``row`` (an entity of these columns) stands in the order."""
        return getattr(row, self.time.key), getattr(row, self.id.key)

    def sql(self, position: Position) -> ColumnElement[Position]:
        """``position`` as SQL values typed like the columns, to compare with ``(time, id)``."""
        moment, row_id = position
        return tuple_(literal(moment, self.time.type), literal(row_id, self.id.type))

    def after(self, position: Position, *, newest_first: bool) -> ColumnElement[bool]:
        """The rows that follow ``position`` in the order."""
        key, bound = tuple_(self.time, self.id), self.sql(position)
        return key < bound if newest_first else key > bound

    def order(self, *, newest_first: bool) -> tuple[Any, Any]:
        """ORDER BY terms of the order."""
        if newest_first:
            return self.time.desc(), self.id.desc()
        return self.time.asc(), self.id.asc()


JOB_KEYS = Keys(Job.created_at, Job.id)


def encode_cursor(position: Position) -> str:
    """An opaque cursor pointing just after ``position`` (in the order of the list that made it)."""
    created, row_id = position
    raw = json.dumps([created.isoformat(), str(row_id)]).encode()
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


def page_of(
    session: Session,
    query: Select[T],
    keys: Keys,
    *,
    after: Position | None,
    limit: int,
    newest_first: bool,
) -> tuple[list[T], str | None]:
    """Up to ``limit`` rows of ``query`` (a ``select`` of one entity with the caller's filters) in the
    order of ``keys`` from just after ``after`` (None: from the start); and the cursor of the next
    page, None on the last one."""
    if after is not None:
        query = query.where(keys.after(after, newest_first=newest_first))
    rows = list(session.scalars(query.order_by(*keys.order(newest_first=newest_first)).limit(limit + 1)))
    next_cursor = encode_cursor(keys.of(rows[limit - 1])) if len(rows) > limit else None
    return rows[:limit], next_cursor
