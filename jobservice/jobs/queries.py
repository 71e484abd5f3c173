"""Reading jobs: a job's row in a session and its audit trail.

``get_job`` runs the one SELECT of a job's row (``jobservice.jobs.lookup``, which says why the
polling path reads it without a session) and lets the ORM load it into the session.

Read-only helpers over the jobs and job events tables; every change of status goes through
``jobservice.jobs.transitions``, and the lease and queue-message bookkeeping through
``jobservice.jobs.leases``.

A queued job's place in the queue is not counted here: it is the dispatcher's order, from the fleet's
forecast (``jobservice.fleet.eta``), the same order its ETA comes from.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.db.tables import Job, JobEvent
from jobservice.jobs.lookup import JOB_BY_ID

_LOAD_BY_ID = select(Job).from_statement(JOB_BY_ID)  # the polling path's SELECT, loaded by the ORM


def get_job(session: Session, job_id: uuid.UUID) -> Job | None:
    """The job row, freshly read into ``session`` (``jobservice.jobs.lookup.JOB_BY_ID``; a copy
    already in the session is refreshed, after its pending changes were flushed)."""
    fresh = {"populate_existing": True}
    return session.scalars(_LOAD_BY_ID, {"job_id": job_id}, execution_options=fresh).one_or_none()


def events_of(session: Session, job_id: uuid.UUID) -> list[JobEvent]:
    """A job's audit trail, oldest first."""
    return list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))
