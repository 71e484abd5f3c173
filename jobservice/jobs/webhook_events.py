"""Webhook events of a job's transitions, written to the outbox in the transition's transaction.

``jobservice.jobs.transitions`` calls ``on_transition`` for every recorded move. A job with a
webhook gets ``job.start`` once, when it is first claimed (attempt 1; a retry after a requeue
sends no second start), and ``job.completed`` when it succeeds, fails or is canceled. The body's
``data`` is the job view of ``GET /jobs/<id>`` at that moment.

A set of jobs (a job group; a nightly run is one with a spec) with a webhook gets
``group.started`` once, when it is created with its jobs, and ``group.completed`` when it ends:
a group when its last job ended, a nightly run when it is judged (``jobservice.nightly.states``,
which also sends its old names ``batch.start`` / ``batch.completed``) or, canceled, when its last
job ended. Their ``data`` is the set's headline (``set_summary``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobservice.db.tables import TERMINAL_STATUSES, Batch, Job, JobGroup, JobStatus
from jobservice.jobs.presenters import job_view
from jobservice.jobs.queries import get_job
from jobservice.webhooks.outbox import enqueue, has_event, wants


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
    hook = session.execute(
        select(Job.webhook_url, Job.webhook_events, Job.group_id).where(Job.id == job_id)
    ).first()
    if hook is not None and hook.group_id is not None and kind == "completed":
        group_may_have_ended(session, hook.group_id)
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


def group_may_have_ended(session: Session, group_id: uuid.UUID) -> None:
    """Send a set's ``group.completed`` once its last job has ended; a nightly run's only once it
    was canceled too (a running one may still add runs, and is judged by ``mark_finished``)."""
    hook = session.execute(
        select(JobGroup.webhook_url, Batch.status)
        .outerjoin(Batch, Batch.id == JobGroup.id)
        .where(JobGroup.id == group_id)
    ).first()
    if hook is None or not hook.webhook_url or hook.status not in (None, "canceled"):
        return
    unfinished = select(Job.id).where(Job.group_id == group_id, Job.status.not_in(list(TERMINAL_STATUSES)))
    if session.scalar(unfinished.limit(1)) is None:
        on_set_move(session, group_id, kind="completed")


def on_set_move(session: Session, group_id: uuid.UUID, *, kind: str) -> None:
    """Add a set's ``group.started`` or ``group.completed`` (``kind``: start, completed), once each,
    if it has a webhook that wants it."""
    group = session.get(JobGroup, group_id)
    if group is None or not group.webhook_url or not wants(group.webhook_events, kind):
        return
    subject, event_type = f"group:{group_id}", "group.started" if kind == "start" else "group.completed"
    if has_event(session, subject, event_type):
        return  # a resumed run that ends again says so once
    enqueue(
        session,
        subject=subject,
        tenant=group.tenant or "default",
        event_type=event_type,
        url=group.webhook_url,
        data=set_summary(session, group),
    )


def set_summary(session: Session, group: JobGroup) -> dict[str, object]:
    """A set's headline: its jobs by status (``GET /job-groups/<id>`` has the rest)."""
    counts = dict(
        session.execute(
            select(Job.status, func.count()).where(Job.group_id == group.id).group_by(Job.status)
        ).all()
    )
    is_batch = group.manifest_format == "spec"
    links = {"self": f"/job-groups/{group.id}", "jobs": f"/job-groups/{group.id}/jobs"}
    if is_batch:
        links["batch"] = f"/batches/{group.id}"
    return {
        "id": str(group.id),
        "object": "job_group",
        "kind": "batch" if is_batch else "group",
        "name": group.name,
        "tenant": group.tenant,
        "total_jobs": group.total_jobs,
        "counts": {str(status): int(n) for status, n in counts.items()},
        "created_at": group.created_at.isoformat() if group.created_at else None,
        "canceled_at": group.canceled_at.isoformat() if group.canceled_at else None,
        "links": links,
    }
