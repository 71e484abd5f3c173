"""The job state machine: the only code that changes a job's status.

Every transition is a compare-and-swap ``UPDATE ... WHERE id = ? AND status IN (...)`` (plus the
owning worker and attempt for a running job), so a redelivered message, a second reaper or a
worker that lost its lease can never move a job twice. SQLite ignores ``SELECT ... FOR UPDATE``;
a CAS update is portable (reference/stack-probe.md section 5). Each transition records a JobEvent.

    queued ──claim──> running ──> succeeded | failed | canceled
      │                  ├──requeue (worker lost, attempts left)──> queued
      │                  └──retry (gate failed, tries left: the next seed)──> queued
      └──> canceled (cancel while queued) | failed (reaper gives up, model withdrawn)

Here: the allowed moves (``ALLOWED``), their errors, and the moves themselves: create, claim,
succeed, fail, cancel (and the cancel request) and requeue. Reading a job, its events and its
queue position is in ``jobservice.jobs.queries``; the bookkeeping that never changes the status
(the run that owns a job, heartbeats extending its lease, when its queue message was sent) is in
``jobservice.jobs.leases``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, exists, insert, not_, select, update
from sqlalchemy.orm import Session

from jobservice import tracing
from jobservice.db.rows import update_one
from jobservice.db.tables import TERMINAL_STATUSES, FleetGroup, Job, JobEvent, JobStatus, Stage, utcnow
from jobservice.fleet.card_groups import accepting
from jobservice.jobs.leases import Owner
from jobservice.jobs.queries import get_job
from jobservice.jobs.webhook_events import on_transition

# Owner is part of this module's signatures, so callers may import it from here too.
__all__ = [
    "ALLOWED",
    "InvalidTransition",
    "LeaseLost",
    "Owner",
    "cancel_queued_jobs",
    "claim_job",
    "mark_canceled",
    "mark_failed",
    "mark_succeeded",
    "record_created",
    "record_created_many",
    "request_cancel",
    "requeue_job",
    "retry_with_next_seed",
    "transition_allowed",
]

ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELED, JobStatus.FAILED}),
    JobStatus.RUNNING: frozenset(
        {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.QUEUED}
    ),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELED: frozenset(),
}


class InvalidTransition(Exception):
    """The job is not in a state from which the requested move is allowed."""

    def __init__(self, job_id: uuid.UUID, current: JobStatus | None, target: JobStatus) -> None:
        state = current.value if current else "missing"
        super().__init__(f"job {job_id} cannot move from {state} to {target.value}")
        self.job_id = job_id
        self.current = current
        self.target = target


class LeaseLost(InvalidTransition):
    """A worker tried to move a running job it no longer owns (the reaper requeued it)."""


def transition_allowed(current: JobStatus, target: JobStatus) -> bool:
    """Whether ``current -> target`` is a legal move of the state machine."""
    return target in ALLOWED[current]


def _event(
    session: Session,
    job_id: uuid.UUID,
    *,
    from_status: JobStatus | None,
    to_status: JobStatus | None,
    detail: str = "",
    attempt: int = 0,
    worker_id: str | None = None,
    actor: str | None = None,
) -> None:
    session.add(
        JobEvent(
            job_id=job_id,
            at=utcnow(),
            from_status=from_status.value if from_status else None,
            to_status=to_status.value if to_status else None,
            attempt=attempt,
            worker_id=worker_id,
            detail=detail[:2000],
            actor=actor or (f"worker:{worker_id}" if worker_id else "system"),
        )
    )
    on_transition(session, job_id, to_status=to_status, attempt=attempt)  # webhook outbox rows


def _cas(
    session: Session,
    job_id: uuid.UUID,
    *,
    sources: frozenset[JobStatus],
    target: JobStatus,
    values: dict[str, Any],
    owner: Owner | None = None,
    extra_where: Any = None,
) -> bool:
    for source in sources:
        assert transition_allowed(source, target), f"{source} -> {target} is not in the state machine"
    conditions = [Job.id == job_id, Job.status.in_(list(sources))]
    if owner is not None:
        conditions += [Job.worker_id == owner.worker_id, Job.attempts == owner.attempt]
    if extra_where is not None:
        conditions.append(extra_where)
    return update_one(session, Job, *conditions, status=target, updated_at=utcnow(), **values)


def _move(
    session: Session,
    job_id: uuid.UUID,
    *,
    sources: frozenset[JobStatus],
    target: JobStatus,
    values: dict[str, Any],
    owner: Owner | None = None,
    detail: str = "",
    actor: str | None = None,
    extra_where: Any = None,
) -> bool:
    """Move the job from one of ``sources`` to ``target`` (``values``: what else the move sets) and
    record the move as an event of ``owner``'s run; False, with nothing written, when the job was not
    in ``sources``, is not ``owner``'s run any more, or ``extra_where`` does not hold."""
    previous: JobStatus | None
    if len(sources) == 1:
        previous = JobStatus(next(iter(sources)))
    else:
        previous = session.scalar(select(Job.status).where(Job.id == job_id))
    if not _cas(
        session, job_id, sources=sources, target=target, values=values, owner=owner, extra_where=extra_where
    ):
        return False
    _event(
        session,
        job_id,
        from_status=previous,
        to_status=target,
        attempt=owner.attempt if owner else 0,
        worker_id=owner.worker_id if owner else None,
        detail=detail,
        actor=actor,
    )
    return True


def _refuse(session: Session, job_id: uuid.UUID, target: JobStatus, owner: Owner | None) -> InvalidTransition:
    current = session.scalar(select(Job.status).where(Job.id == job_id))
    if owner is not None and current == JobStatus.RUNNING:
        return LeaseLost(job_id, current, target)
    return InvalidTransition(job_id, current, target)


def record_created(session: Session, job: Job, *, actor: str | None = None) -> None:
    """Insert a new queued job and its first event (``actor``: the submitting key's id). With tracing on,
    the job carries the submitting request's trace context: its worker continues that trace."""
    job.status = JobStatus.QUEUED
    job.stage = Stage.QUEUED.value
    job.trace_context = job.trace_context or tracing.current_context()
    session.add(job)
    session.flush()
    _event(
        session,
        job.id,
        from_status=None,
        to_status=JobStatus.QUEUED,
        detail=f"submitted via {job.source}",
        actor=actor,
    )


def record_created_many(session: Session, jobs: Sequence[Job], *, actor: str | None = None) -> None:
    """Insert many new queued jobs and their first events in two statements (a job group's rows:
    5,000 ``record_created`` calls would be 10,000 round trips). The jobs are new ``Job`` objects
    filled alike (``jobservice.jobs.submit.new_job_row``); they are inserted, not added to the session."""
    if not jobs:
        return
    columns = [column.key for column in Job.__table__.columns]
    rows = []
    trace_context = tracing.current_context()  # the request that made the group, for each job
    for job in jobs:
        job.status = JobStatus.QUEUED
        job.stage = Stage.QUEUED.value
        job.trace_context = job.trace_context or trace_context
        rows.append({key: job.__dict__[key] for key in columns if key in job.__dict__})
    session.execute(
        insert(cast(Table, Job.__table__)), rows
    )  # Core: the ORM's bulk path costs a third more here
    at = utcnow()
    # A new queued job has no webhook event (``on_transition`` sends none for QUEUED).
    session.execute(
        insert(JobEvent),
        [
            {
                "job_id": job.id,
                "at": at,
                "from_status": None,
                "to_status": JobStatus.QUEUED.value,
                "attempt": 0,
                "worker_id": None,
                "detail": f"submitted via {job.source}",
                "actor": actor or "system",
            }
            for job in jobs
        ],
    )


def claim_job(
    session: Session, job_id: uuid.UUID, *, worker_id: str, lease_seconds: float, group: str | None = None
) -> Job | None:
    """Move a queued job to running for ``worker_id``; None if it is not claimable (already taken,
    or, with ``group``, not handed to that card group by the dispatcher, or that group takes no job
    now: it is draining or unhealthy; ``jobservice.fleet.card_groups``)."""
    now = utcnow()
    condition: ColumnElement[bool] = Job.cancel_requested_at.is_(None)
    if group is not None:
        refusing = select(FleetGroup.id).where(FleetGroup.id == group, not_(accepting()))
        condition = and_(condition, Job.dispatched_to == group, ~exists(refusing))
    claimed = _cas(
        session,
        job_id,
        sources=frozenset({JobStatus.QUEUED}),
        target=JobStatus.RUNNING,
        values={
            "worker_id": worker_id,
            "attempts": Job.attempts + 1,
            "stage": Stage.FETCHING.value,
            "progress": 0.0,
            "claimed_at": now,
            "started_at": None,
            "heartbeat_at": now,
            "lease_expires_at": now + timedelta(seconds=lease_seconds),
        },
        extra_where=condition,
    )
    if not claimed:
        return None
    job = get_job(session, job_id)
    assert job is not None
    _event(
        session,
        job_id,
        from_status=JobStatus.QUEUED,
        to_status=JobStatus.RUNNING,
        attempt=job.attempts,
        worker_id=worker_id,
        detail="claimed",
    )
    return job


def mark_succeeded(
    session: Session,
    job_id: uuid.UUID,
    *,
    owner: Owner,
    output_key: str,
    report_key: str,
    verdict: str,
    timings: dict[str, Any],
    validation_summary: dict[str, Any],
    cold_start: bool,
) -> None:
    """Finish a run whose output passed the gate."""
    ok = _move(
        session,
        job_id,
        sources=frozenset({JobStatus.RUNNING}),
        target=JobStatus.SUCCEEDED,
        owner=owner,
        values={
            "stage": Stage.DONE.value,
            "progress": 1.0,
            "output_key": output_key,
            "report_key": report_key,
            "verdict": verdict,
            "timings": timings,
            "validation_summary": validation_summary,
            "cold_start": cold_start,
            "finished_at": utcnow(),
            "lease_expires_at": None,
            "error_code": None,
            "error_message": None,
        },
    )
    if not ok:
        raise _refuse(session, job_id, JobStatus.SUCCEEDED, owner)


def mark_failed(
    session: Session,
    job_id: uuid.UUID,
    *,
    code: str,
    message: str,
    owner: Owner | None = None,
    from_statuses: frozenset[JobStatus] = frozenset({JobStatus.RUNNING}),
    output_key: str | None = None,
    report_key: str | None = None,
    verdict: str | None = None,
    timings: dict[str, Any] | None = None,
    validation_summary: dict[str, Any] | None = None,
    cold_start: bool | None = None,
) -> None:
    """The one failure path: every failed job, from any cause, ends here."""
    values: dict[str, Any] = {
        "error_code": code,
        "error_message": message[:4000],
        "finished_at": utcnow(),
        "lease_expires_at": None,
    }
    optional = {
        "output_key": output_key,
        "report_key": report_key,
        "verdict": verdict,
        "timings": timings,
        "validation_summary": validation_summary,
        "cold_start": cold_start,
    }
    values.update({k: v for k, v in optional.items() if v is not None})
    moved = _move(
        session,
        job_id,
        sources=from_statuses,
        target=JobStatus.FAILED,
        values=values,
        owner=owner,
        detail=f"{code}: {message}",
    )
    if not moved:
        raise _refuse(session, job_id, JobStatus.FAILED, owner)


def mark_canceled(
    session: Session,
    job_id: uuid.UUID,
    *,
    owner: Owner | None = None,
    from_statuses: frozenset[JobStatus] = frozenset({JobStatus.RUNNING}),
    detail: str = "canceled",
    report_key: str | None = None,
    actor: str | None = None,
) -> None:
    """Stop a job for good at the user's request (or because its worker died after a cancel)."""
    values: dict[str, Any] = {
        "finished_at": utcnow(),
        "lease_expires_at": None,
        "error_code": "canceled",
        "error_message": detail,
    }
    if report_key:
        values["report_key"] = report_key
    moved = _move(
        session,
        job_id,
        sources=from_statuses,
        target=JobStatus.CANCELED,
        values=values,
        owner=owner,
        detail=detail,
        actor=actor,
    )
    if not moved:
        raise _refuse(session, job_id, JobStatus.CANCELED, owner)


def cancel_queued_jobs(
    session: Session, where: ColumnElement[bool], *, detail: str = "canceled", actor: str | None = None
) -> list[uuid.UUID]:
    """Cancel at once every queued job that matches ``where`` (one compare-and-set UPDATE for all of
    them: a job group's thousands), record their events and webhook events; their ids.

    A job claimed meanwhile is not queued any more and is left alone (cancel it with
    ``request_cancel``: a running job stops at its next boundary)."""
    assert transition_allowed(JobStatus.QUEUED, JobStatus.CANCELED)
    now = utcnow()
    canceled = session.execute(
        update(Job)
        .where(where, Job.status == JobStatus.QUEUED)
        .values(
            status=JobStatus.CANCELED,
            updated_at=now,
            finished_at=now,
            lease_expires_at=None,
            error_code="canceled",
            error_message=detail,
        )
        .returning(Job.id, Job.webhook_url)
        .execution_options(synchronize_session=False)
    ).all()
    if not canceled:
        return []
    session.execute(
        insert(JobEvent),
        [
            {
                "job_id": job_id,
                "at": now,
                "from_status": JobStatus.QUEUED.value,
                "to_status": JobStatus.CANCELED.value,
                "attempt": 0,
                "worker_id": None,
                "detail": detail[:2000],
                "actor": actor or "system",
            }
            for job_id, _ in canceled
        ],
    )
    for job_id, webhook_url in canceled:
        if webhook_url:  # the few with a webhook get their job.completed
            on_transition(session, job_id, to_status=JobStatus.CANCELED, attempt=0)
    return [job_id for job_id, _ in canceled]


def request_cancel(session: Session, job_id: uuid.UUID, *, actor: str | None = None) -> JobStatus:
    """Cancel a queued job at once, or ask a running one to stop at its next boundary.

    Returns the status after the request; raises InvalidTransition for a finished job.
    """
    job = get_job(session, job_id)
    if job is None or job.status in TERMINAL_STATUSES:
        raise InvalidTransition(job_id, job.status if job else None, JobStatus.CANCELED)
    if job.status == JobStatus.QUEUED:
        try:
            mark_canceled(
                session,
                job_id,
                from_statuses=frozenset({JobStatus.QUEUED}),
                detail="canceled while queued",
                actor=actor,
            )
            return JobStatus.CANCELED
        except InvalidTransition:
            # It was claimed in between: fall through and ask the runner to stop.
            pass
    running = (Job.id == job_id, Job.status == JobStatus.RUNNING, Job.cancel_requested_at.is_(None))
    if update_one(session, Job, *running, cancel_requested_at=utcnow()):
        _event(
            session,
            job_id,
            from_status=JobStatus.RUNNING,
            to_status=None,
            detail="cancel requested",
            actor=actor,
        )
    current = session.scalar(select(Job.status).where(Job.id == job_id))
    if current is None:
        raise InvalidTransition(job_id, None, JobStatus.CANCELED)
    return JobStatus(current)


def _back_in_queue(
    session: Session, job_id: uuid.UUID, *, owner: Owner, detail: str, also: dict[str, Any] | None = None
) -> bool:
    """Move this run's job from running back to queued (``also``: more columns to set) and record
    why; False when the job is not this run's any more or a cancel arrived meanwhile (a cancel wins:
    the job is not requeued)."""
    return _move(
        session,
        job_id,
        sources=frozenset({JobStatus.RUNNING}),
        target=JobStatus.QUEUED,
        owner=owner,
        values={
            "stage": Stage.QUEUED.value,
            "progress": 0.0,
            "worker_id": None,
            "lease_expires_at": None,
            "heartbeat_at": None,
            "enqueued_at": None,
            "dispatched_to": None,  # back in the table: the dispatcher places it again
            "dispatch_decision": None,
            **(also or {}),
        },
        detail=detail,
        extra_where=Job.cancel_requested_at.is_(None),
    )


def requeue_job(session: Session, job_id: uuid.UUID, *, owner: Owner, reason: str) -> None:
    """Put a running job whose worker was lost back in the queue for another attempt (a cancel that
    arrived meanwhile wins: the reaper cancels the run instead of requeueing it)."""
    if not _back_in_queue(session, job_id, owner=owner, detail=f"requeued: {reason}"):
        raise _refuse(session, job_id, JobStatus.QUEUED, owner)


def retry_with_next_seed(session: Session, job_id: uuid.UUID, *, owner: Owner, tried: dict[str, Any]) -> bool:
    """Put a running job whose video failed the gate back in the queue for a try with the next seed
    (``jobservice.jobs.retries``), recording the failed try; False (nothing changed) when a cancel
    was requested meanwhile: the caller then ends the job as failed.

    The reaper's budget for lost workers (``max_attempts``) grows by one, so a gate retry never
    uses up the attempts that protect the job from a dying worker."""
    tries = session.scalar(select(Job.validation_attempts).where(Job.id == job_id)) or []
    detail = (
        f"the gate failed try {tried['try']} (seed {tried['seed']}: "
        f"{', '.join(tried['failed_checks']) or 'no check named'}); queued again with the next seed"
    )
    also = {"max_attempts": Job.max_attempts + 1, "validation_attempts": [*tries, tried]}
    if _back_in_queue(session, job_id, owner=owner, detail=detail, also=also):
        return True
    current = session.execute(
        select(Job.status, Job.worker_id, Job.attempts).where(Job.id == job_id)
    ).one_or_none()
    ours = (
        current is not None
        and current.status == JobStatus.RUNNING
        and (current.worker_id, current.attempts) == (owner.worker_id, owner.attempt)
    )
    if ours:  # still this run's: only a pending cancel refuses it
        return False
    raise _refuse(session, job_id, JobStatus.QUEUED, owner)
