"""One job's row: the one SELECT that reads it, and the detached ``Job`` the polling path makes of it.

Every read of one job's whole row as a ``Job`` runs ``JOB_BY_ID`` (a few columns read for a check
are their own small SELECTs), in one of two ways:

- ``read_job`` (``read_job_row`` and ``job_of``), here: for reads that change nothing. ``GET
  /jobs/<id>`` is the request clients repeat most. Reading the row through an ORM session costs
  about four times the SELECT itself (a session, the identity map, the ORM's compile and loading
  machinery), and even a Core SELECT spent half its time checking a connection out of the engine's
  pool and back (its lock contended by 64 threads, a reset on every return, and on PostgreSQL a
  ping per checkout; profiled under ``scripts/bench_poll.py``). So the reader keeps a few
  connections of its own in autocommit mode, each used by one request at a time: every SELECT is
  its own statement against the latest committed state, so a poller never sees an older state than
  the database holds. It hands back a detached ``Job`` filled the way the ORM's loader fills one, so
  the views that render it do not change.
- ``jobservice.jobs.queries.get_job``: the same statement run in an ORM session, the row loaded by
  the ORM into the session's identity map. It stays for code that works in a transaction: a
  transition that changes the job and commits the change with its events, or a read that must
  agree with the transaction's other reads and writes (the webhook outbox inside a transition, a
  view whose queue position is counted in the same session). A detached ``Job`` can do neither,
  and an ORM session on the polling path would cost what this module saves.
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
JOB_BY_ID = select(_JOBS).where(_JOBS.c.id == bindparam("job_id"))  # one job's row, by ``job_id``
_MANAGER = instrumentation.manager_of_class(Job)


def read_job_row(db: Database, job_id: uuid.UUID) -> Row[Any] | None:
    """The job's current row (every column, converted to Python values), or None.

    A kept connection that fails (the database restarted since) is dropped and the read is tried
    once more on a fresh one, which the engine's pool checks before handing it out."""
    for attempt in (1, 2):
        try:
            with db.reading() as conn:
                return conn.execute(JOB_BY_ID, {"job_id": job_id}).first()
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
