"""Deleting a job on request: its files go, and the job is gone from every list and read.

The one domain operation behind ``DELETE /jobs/<id>`` and ``DELETE /v1/videos/<id>``:

- an unfinished job is canceled first: a queued one at once, then deleted; a running one is asked
  to stop, and the call is refused (409 ``cancel_pending``) until it has, so a worker never writes
  into a job that is gone. The client deletes again once the job has ended.
- a job of a nightly batch or a job group is refused (409 ``in_batch``/``in_group``): the set's
  counts, comparison and pages hold it, and its shared inputs go with the set.
- everything under ``jobs/<id>/`` is deleted, THEN the row is marked (``expired_at`` as retention
  marks it, and ``deleted_at``) with one event, in one transaction: a call that dies in between
  leaves a job that a second call deletes.

The row stays, so the job counters and the audit trail keep it; reads by id answer 404
``job_deleted`` (``video_not_found`` on ``/v1/videos``), and lists leave it out.
"""

from __future__ import annotations

from datetime import datetime

from jobservice.db.rows import update_one
from jobservice.db.tables import Job, JobEvent, JobStatus, utcnow
from jobservice.errors import Conflict
from jobservice.jobs.transitions import InvalidTransition, request_cancel
from jobservice.retention.sweep import job_prefix, mark_expired
from jobservice.wiring import Services

DELETED_DETAIL = "deleted on request"  # the job event that records who deleted it


def delete_job(services: Services, job: Job, *, actor: str | None) -> datetime:
    """Delete ``job`` (read by a tenant-checked loader: the caller may see it) and answer when it was
    deleted; refusals are 409 ``in_batch``, ``in_group`` or ``cancel_pending``."""
    if job.deleted_at is not None:
        return job.deleted_at
    if job.batch_id is not None:
        raise Conflict(
            "in_batch", f"Job {job.id} belongs to batch {job.batch_id}; its files go with the batch."
        )
    if job.group_id is not None:
        raise Conflict(
            "in_group",
            f"Job {job.id} belongs to job group {job.group_id}, whose counts and pages hold it; cancel it "
            "instead (POST /jobs/<id>/cancel), and retention deletes its files.",
        )
    if not JobStatus(job.status).is_terminal:
        try:
            with services.db.session() as session:
                now = request_cancel(session, job.id, actor=actor)
        except InvalidTransition:
            now = JobStatus.SUCCEEDED  # it ended meanwhile: a finished job, deleted below
        if not now.is_terminal:
            raise Conflict(
                "cancel_pending",
                f"Job {job.id} was running and is being stopped; delete it again once it has ended.",
            )
    services.store.delete_prefix(job_prefix(job.id))
    at = utcnow()
    with services.db.session() as session:
        mark_expired(session, job.id, at=at)  # False when retention had already deleted its files
        if update_one(session, Job, Job.id == job.id, Job.deleted_at.is_(None), deleted_at=at, updated_at=at):
            session.add(
                JobEvent(job_id=job.id, at=at, attempt=job.attempts, detail=DELETED_DETAIL, actor=actor)
            )
    return at
