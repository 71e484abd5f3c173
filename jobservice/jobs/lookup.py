"""One job's row for the polling path: a Core SELECT on a kept connection, no ORM session.

``GET /jobs/<id>`` is the request clients repeat most. Reading the row through ``Session.get``
costs about four times the SELECT itself (a session, the identity map, the ORM's compile and
loading machinery), and even a Core SELECT spent half its time checking a connection out of the
engine's pool and back (its lock contended by 64 threads, a reset on every return, and on
PostgreSQL a ping per checkout; profiled under ``scripts/bench_poll.py``). So the reader keeps a
few connections of its own in autocommit mode, each used by one request at a time: every SELECT is
its own statement against the latest committed state, so a poller never sees an older state than
the database holds. It hands back a detached ``Job`` filled with the same type conversions, so the
views that render it do not change.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import configure_mappers, instrumentation

from jobservice.db.engine import Database
from jobservice.db.tables import Job

_JOBS = Job.__table__
_BY_ID = select(_JOBS).where(_JOBS.c.id == bindparam("job_id"))
_MANAGER = instrumentation.manager_of_class(Job)


def read_job_row(db: Database, job_id: uuid.UUID) -> Row[Any] | None:
    """The job's current row (every column, converted to Python values), or None.

    A kept connection that fails (the database restarted since) is dropped and the read is tried
    once more on a fresh one, which the engine's pool checks before handing it out."""
    for attempt in (1, 2):
        try:
            with db.reading() as conn:
                return conn.execute(_BY_ID, {"job_id": job_id}).first()
        except (OperationalError, InterfaceError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def job_of(row: Row[Any]) -> Job:
    """A ``Job`` that belongs to no session, filled from ``row`` (from ``read_job_row``)."""
    # The instance's dict is filled the way the ORM's own loader fills it; Job(**row) would run
    # an attribute event per column (about 45 us a call here against 6 us).
    if not _MANAGER.mapper.configured:  # done by the first query or constructor otherwise
        configure_mappers()
    job: Job = _MANAGER.new_instance()
    job.__dict__.update(row._mapping)
    return job


def read_job(db: Database, job_id: uuid.UUID) -> Job | None:
    """The job's current row as a ``Job`` that belongs to no session, or None."""
    row = read_job_row(db, job_id)
    return None if row is None else job_of(row)
