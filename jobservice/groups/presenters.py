"""How a job group looks from outside: its view (progress counted from its jobs), lists of groups,
and a group's jobs in row order.

A group stores nothing that changes while its jobs run: its progress and status are one grouped
count of its jobs by status (an index range of ``(group_id, status)``), read when it is shown.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobservice.db.tables import Job, JobGroup, JobStatus
from jobservice.fleet.eta import Stored
from jobservice.groups.views import GroupList, GroupProgress, GroupView, group_status
from jobservice.jobs.pages import JOB_KEYS, Keys, after_cursor, page_of
from jobservice.jobs.presenters import JobList, job_views

GROUP_KEYS = Keys(JobGroup.created_at, JobGroup.id)  # the list of groups' order
COUNTED = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED)


def progress_of(total: int, rows: list[Any]) -> GroupProgress:
    """A group's progress from ``(status, jobs, summed progress)`` rows."""
    counts = {status.value: 0 for status in COUNTED}
    running_progress = 0.0
    for status, jobs, progressed in rows:
        counts[JobStatus(status).value] += int(jobs)
        if JobStatus(status) == JobStatus.RUNNING:
            running_progress += float(progressed or 0.0)
    ended = counts["succeeded"] + counts["failed"] + counts["canceled"]
    fraction = (ended + running_progress) / total if total else 1.0
    return GroupProgress(total=total, fraction=round(min(1.0, fraction), 4), **counts)


def group_counts(session: Session, group_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[Any]]:
    """``(status, jobs, summed progress)`` rows of each group, in one query."""
    found: dict[uuid.UUID, list[Any]] = {group_id: [] for group_id in group_ids}
    if not group_ids:
        return found
    query = (
        select(Job.group_id, Job.status, func.count(), func.sum(Job.progress))
        .where(Job.group_id.in_(group_ids))
        .group_by(Job.group_id, Job.status)
    )
    for group_id, status, jobs, progressed in session.execute(query):
        if group_id is not None:
            found[group_id].append((status, jobs, progressed))
    return found


def group_view(session: Session, group: JobGroup, *, counts: list[Any] | None = None) -> GroupView:
    """Render ``group`` (``counts``: its rows of ``group_counts`` when the caller has them)."""
    rows = counts if counts is not None else group_counts(session, [group.id])[group.id]
    progress = progress_of(group.total_jobs, rows)
    status = group_status(progress, canceled=group.canceled_at is not None)
    finished_at = None
    if status in ("finished", "canceled"):
        finished_at = session.scalar(select(func.max(Job.finished_at)).where(Job.group_id == group.id))
    base = f"/job-groups/{group.id}"
    links = {
        "self": base,
        "jobs": f"{base}/jobs",
        "stream": f"{base}/stream",
        "results": f"{base}/results",
        "outputs": f"{base}/outputs",
    }
    if progress.queued + progress.running:
        links["cancel"] = f"{base}/cancel"
    return GroupView(
        id=str(group.id),
        name=group.name,
        status=status,
        cancel_requested=group.canceled_at is not None and status not in ("finished", "canceled"),
        tenant=group.tenant,
        source=group.source,
        manifest_format=group.manifest_format,
        manifest_sha256=group.manifest_sha256,
        columns=list(group.columns or []),
        models=dict(group.models or {}),
        created_at=group.created_at,
        canceled_at=group.canceled_at,
        finished_at=finished_at,
        progress=progress,
        links=links,
    )


def list_groups(session: Session, *, tenant: str | None, limit: int, cursor: str | None = None) -> GroupList:
    """Groups newest first (``tenant``: only its own), a page at a time."""
    query = select(JobGroup)
    if tenant is not None:
        query = query.where(JobGroup.tenant == tenant)
    page, next_cursor = page_of(
        session, query, GROUP_KEYS, after=after_cursor(cursor), limit=limit, newest_first=True
    )
    counts = group_counts(session, [group.id for group in page])
    return GroupList(
        groups=[group_view(session, g, counts=counts[g.id]) for g in page], next_cursor=next_cursor
    )


def group_jobs_page(
    session: Session,
    group_id: uuid.UUID,
    *,
    limit: int,
    cursor: str | None = None,
    forecast: Stored | None = None,
) -> tuple[JobList, list[Job]]:
    """A set's jobs (a job group's, a nightly run's) in row order, ``limit`` at a time (one range of
    ``(group_id, created_at, id)``): the page (positions and ETAs from ``forecast``) and its rows."""
    query = select(Job).where(Job.group_id == group_id)
    rows, next_cursor = page_of(
        session, query, JOB_KEYS, after=after_cursor(cursor), limit=limit, newest_first=False
    )
    return JobList(jobs=job_views(session, rows, forecast=forecast), next_cursor=next_cursor), rows
