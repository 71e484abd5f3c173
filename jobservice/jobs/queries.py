"""Reading jobs: a job's row, its audit trail and its place in the queue.

Read-only helpers over the jobs and job events tables; every change of status goes through
``jobservice.jobs.transitions``, and the lease and queue-message bookkeeping through
``jobservice.jobs.leases``.
"""

from __future__ import annotations

import uuid

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from jobservice.db.tables import Job, JobEvent, JobStatus


def get_job(session: Session, job_id: uuid.UUID) -> Job | None:
    """The job row, freshly read."""
    return session.get(Job, job_id, populate_existing=True)


def queue_position(session: Session, job: Job) -> int:
    """How many queued jobs of the same model run before this one (0 = next)."""
    ahead = select(func.count()).where(
        Job.model == job.model,
        Job.status == JobStatus.QUEUED,
        Job.id != job.id,
        or_(
            Job.priority < job.priority,
            and_(
                Job.priority == job.priority,
                or_(Job.created_at < job.created_at, and_(Job.created_at == job.created_at, Job.id < job.id)),
            ),
        ),
    )
    return int(session.scalar(ahead) or 0)


def events_of(session: Session, job_id: uuid.UUID) -> list[JobEvent]:
    """A job's audit trail, oldest first."""
    return list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))
