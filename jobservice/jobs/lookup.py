"""One job's row for the polling path: a Core SELECT on a pooled connection, no ORM session.

``GET /jobs/<id>`` is the request clients repeat most. Reading the row through ``Session.get``
costs about four times the SELECT itself (a session, the identity map, the ORM's compile and
loading machinery; measured by scripts/bench_poll.py's profile); this reads the same columns with
the same type conversions and hands back a detached ``Job``, so the views that render it do not
change. Every call reads the row afresh: nothing is cached, so a poller never sees an older state
than the database holds.
"""

from __future__ import annotations

import uuid

from sqlalchemy import bindparam, select
from sqlalchemy.orm import configure_mappers, instrumentation

from jobservice.db.engine import Database
from jobservice.db.tables import Job

_JOBS = Job.__table__
_BY_ID = select(_JOBS).where(_JOBS.c.id == bindparam("job_id"))
_MANAGER = instrumentation.manager_of_class(Job)


def read_job(db: Database, job_id: uuid.UUID) -> Job | None:
    """The job's current row as a ``Job`` that belongs to no session, or None."""
    with db.engine.connect() as conn:
        row = conn.execute(_BY_ID, {"job_id": job_id}).first()
    if row is None:
        return None
    # The instance's dict is filled the way the ORM's own loader fills it; Job(**row) would run
    # an attribute event per column (about 45 us a call here against 6 us).
    if not _MANAGER.mapper.configured:  # done by the first query or constructor otherwise
        configure_mappers()
    job: Job = _MANAGER.new_instance()
    job.__dict__.update(row._mapping)
    return job
