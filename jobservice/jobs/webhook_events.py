"""Webhook events of a job's transitions, written to the outbox in the transition's transaction.

``jobservice.jobs.transitions`` calls ``on_transition`` for every recorded move. A job with a
webhook gets ``job.start`` once, when it is first claimed (attempt 1; a retry after a requeue
sends no second start), and ``job.completed`` when it succeeds, fails or is canceled. The body's
``data`` is the job view of ``GET /jobs/<id>`` at that moment.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.db.tables import TERMINAL_STATUSES, Job, JobStatus
from jobservice.jobs.presenters import job_view
from jobservice.jobs.queries import get_job
from jobservice.webhooks.outbox import enqueue, wants


def _kind(to_status: JobStatus | None, attempt: int) -> str | None:
    if to_status == JobStatus.RUNNING and attempt == 1:
        return "start"
    if to_status in TERMINAL_STATUSES:
        return "completed"
    return None


def on_transition(session: Session, job_id: uuid.UUID, *, to_status: JobStatus | None, attempt: int) -> None:
    """Add the job's webhook event for this move to the outbox, if it has a webhook that wants it."""
    kind = _kind(to_status, attempt)
    if kind is None:
        return
    hook = session.execute(select(Job.webhook_url, Job.webhook_events).where(Job.id == job_id)).first()
    if hook is None or not hook.webhook_url or not wants(hook.webhook_events, kind):
        return
    job = get_job(session, job_id)
    assert job is not None
    enqueue(
        session,
        subject=f"job:{job_id}",
        job_id=job_id,
        tenant=job.tenant or "default",
        event_type=f"job.{kind}",
        url=hook.webhook_url,
        data=job_view(job).model_dump(mode="json"),
    )
