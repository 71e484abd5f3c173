"""A job row's bookkeeping that never changes its status: leases and queue messages.

A running job is held by one run (``Owner``: the worker that claimed it and the attempt), which
keeps it by heartbeats that extend ``lease_expires_at``; the reaper requeues a job whose lease ran
out. ``enqueued_at`` remembers when a queue message for a queued job was last sent, so the reaper
re-sends lost ones. Claiming and requeueing do change the status, so they live with the other
moves in ``jobservice.jobs.transitions``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from jobservice.db.rows import update_one
from jobservice.db.tables import Job, JobStatus, Stage, utcnow
from jobservice.jobs.previews import preview_timings


@dataclass(frozen=True)
class Owner:
    """Identifies one run of a job: the worker that claimed it and which attempt this is."""

    worker_id: str
    attempt: int


@dataclass(frozen=True)
class Beat:
    """What a heartbeat learned: whether we still own the job and whether it was canceled."""

    owned: bool
    cancel_requested: bool


def heartbeat(
    session: Session,
    job_id: uuid.UUID,
    *,
    owner: Owner,
    lease_seconds: float,
    stage: str | None = None,
    progress: float | None = None,
    preview: dict[str, Any] | None = None,
) -> Beat:
    """Extend a running job's lease (and record stage/progress, and the run's preview record,
    ``jobservice.jobs.previews``); tells the worker about cancels."""
    now = utcnow()
    values: dict[str, Any] = {"heartbeat_at": now, "lease_expires_at": now + timedelta(seconds=lease_seconds)}
    if stage is not None:
        values["stage"] = stage
        if stage == Stage.GENERATING.value:
            values["started_at"] = func.coalesce(Job.started_at, now)
    if progress is not None:
        values["progress"] = max(0.0, min(1.0, progress))
    if preview is not None:
        values["timings"] = preview_timings(preview)
    ours = (
        Job.id == job_id,
        Job.status == JobStatus.RUNNING,
        Job.worker_id == owner.worker_id,
        Job.attempts == owner.attempt,
    )
    if not update_one(session, Job, *ours, **values):
        return Beat(owned=False, cancel_requested=False)
    cancel_at = session.scalar(select(Job.cancel_requested_at).where(Job.id == job_id))
    return Beat(owned=True, cancel_requested=cancel_at is not None)


def mark_enqueued(session: Session, job_id: uuid.UUID, *, at: datetime | None = None) -> None:
    """Remember when a queue message for the job was last sent (the reaper re-sends lost ones)."""
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(enqueued_at=at or utcnow())
        .execution_options(synchronize_session=False)
    )


def mark_unsent(session: Session, job_id: uuid.UUID) -> None:
    """Forget that a message was sent (the send failed), so the reaper sends one."""
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(enqueued_at=None)
        .execution_options(synchronize_session=False)
    )
