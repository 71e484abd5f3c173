"""Reading jobs: a job's row in a session, its audit trail and its place in the queue.

``get_job`` runs the one SELECT of a job's row (``jobservice.jobs.lookup``, which says why the
polling path reads it without a session) and lets the ORM load it into the session.

Read-only helpers over the jobs and job events tables; every change of status goes through
``jobservice.jobs.transitions``, and the lease and queue-message bookkeeping through
``jobservice.jobs.leases``.

Queue order within a model is ``(priority, created_at, id)``. A position is the queued jobs at
higher priorities, read from the counters of migration 0008, plus a count of the queued rows before
the job at its own priority, written as a row-value comparison so that it is one range of the index
``(model, status, priority, created_at, id)`` (migration 0006); a new job, or a list page (newest
first), counts from the back of its priority instead. A page of jobs gets all its positions from
one query per model (``queue_positions``), not one count per row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, func, literal, select, tuple_
from sqlalchemy.orm import Session

from jobservice.db.tables import Job, JobEvent, JobStatus, QueueCount
from jobservice.jobs.lookup import JOB_BY_ID
from jobservice.jobs.pages import position_of, position_sql

_LOAD_BY_ID = select(Job).from_statement(JOB_BY_ID)  # the polling path's SELECT, loaded by the ORM


def get_job(session: Session, job_id: uuid.UUID) -> Job | None:
    """The job row, freshly read into ``session`` (``jobservice.jobs.lookup.JOB_BY_ID``; a copy
    already in the session is refreshed, after its pending changes were flushed)."""
    fresh = {"populate_existing": True}
    return session.scalars(_LOAD_BY_ID, {"job_id": job_id}, execution_options=fresh).one_or_none()


def _queue_key(job: Job) -> tuple[int, datetime, uuid.UUID]:
    return (job.priority, job.created_at, job.id)


def _key_of(job: Job) -> ColumnElement[tuple[int, datetime, uuid.UUID]]:
    """``job``'s place in queue order as SQL values typed like the columns (SQLite stores them as text)."""
    columns = (Job.priority, Job.created_at, Job.id)
    return tuple_(*(literal(v, c.type) for v, c in zip(_queue_key(job), columns, strict=True)))


def _time_key(job: Job) -> ColumnElement[tuple[datetime, uuid.UUID]]:
    """``job``'s place within its priority, ``(created_at, id)``, as SQL values typed like the columns."""
    return position_sql(position_of(job))


def _in_queue_of(model: str) -> list[ColumnElement[bool]]:
    return [Job.model == model, Job.status == JobStatus.QUEUED]


def _order() -> ColumnElement[tuple[int, datetime, uuid.UUID]]:
    return tuple_(Job.priority, Job.created_at, Job.id)


def count_ahead(session: Session | Connection, job: Job) -> int:
    """How many queued jobs of ``job``'s model come before it in queue order: those at a higher
    priority from the counters of migration 0008 (a queue of interactive jobs ahead of a batch is
    not read row by row), plus those before it at its own priority (one index range)."""
    higher = select(func.coalesce(func.sum(QueueCount.queued), 0)).where(
        QueueCount.model == job.model, QueueCount.priority < job.priority
    )
    same = select(func.count()).where(
        *_in_queue_of(job.model),
        Job.priority == job.priority,
        tuple_(Job.created_at, Job.id) < _time_key(job),
    )
    return int(session.scalar(select(higher.scalar_subquery() + same.scalar_subquery())) or 0)


def count_ahead_of_new(session: Session | Connection, job: Job) -> int:
    """``count_ahead`` for a job near the back of its queue (a new job, the newest page of a list),
    counted from the back: the queued jobs of its model at its priority or higher (the counters of
    migration 0008), less itself and those queued after it (an index range from it to the end of its
    priority: empty or nearly for a new job). One statement, so counters and rows agree."""
    return max(0, int(session.scalar(select(_ahead_from_the_back(job))) or 0))


def _ahead_from_the_back(job: Job) -> ColumnElement[int]:
    counts = select(func.coalesce(func.sum(QueueCount.queued), 0)).where(
        QueueCount.model == job.model, QueueCount.priority <= job.priority
    )
    # (created_at, id) after the priority's equality, not (priority, created_at, id): PostgreSQL then
    # stops at the end of the priority instead of reading on through the lower ones (a batch's).
    after = select(func.count()).where(
        *_in_queue_of(job.model),
        Job.priority == job.priority,
        tuple_(Job.created_at, Job.id) > _time_key(job),
    )
    mine = select(func.count()).where(Job.id == job.id, Job.status == JobStatus.QUEUED)
    return counts.scalar_subquery() - after.scalar_subquery() - mine.scalar_subquery()


def queue_position(session: Session, job: Job) -> int:
    """How many queued jobs of the same model run before this one (0 = next)."""
    return count_ahead(session, job)


def queue_positions(session: Session, jobs: Iterable[Job]) -> dict[uuid.UUID, int]:
    """The queue position of every queued job in ``jobs`` (others are left out): one query per
    model, adding to the count of jobs before the page's first one (in queue order) the ranks of
    the page's jobs within the index range from its first to its last one. Lists are newest first,
    so that count is taken from the back of the queue (``count_ahead_of_new``): a page of a nightly
    batch's newest jobs reads a few dozen index entries, not the thousands queued before them."""
    by_model: dict[str, list[Job]] = {}
    for job in jobs:
        if JobStatus(job.status) == JobStatus.QUEUED:
            by_model.setdefault(job.model, []).append(job)
    positions: dict[uuid.UUID, int] = {}
    for model, queued in by_model.items():
        queued.sort(key=_queue_key)
        first, last = queued[0], queued[-1]
        ahead = _ahead_from_the_back(first)
        rank = func.row_number().over(order_by=(Job.priority, Job.created_at, Job.id)) - 1
        span = (
            select(Job.id, rank.label("rank"))
            .where(*_in_queue_of(model), _order() >= _key_of(first), _order() <= _key_of(last))
            .subquery()
        )
        wanted = [job.id for job in queued]
        page = select(span.c.id, span.c.rank + ahead).where(span.c.id.in_(wanted))
        for job_id, place in session.execute(page):
            positions[job_id] = int(place)
    return positions


def events_of(session: Session, job_id: uuid.UUID) -> list[JobEvent]:
    """A job's audit trail, oldest first."""
    return list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))
