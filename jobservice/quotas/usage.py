"""What a tenant is using now: its active jobs, the jobs it created in the last hour, and its
pending direct uploads."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, func, not_, select
from sqlalchemy.orm import Session

from jobservice.db.tables import Job, JobStatus, TenantJobMinute, TenantUsageCount, Upload, utcnow

HOUR = timedelta(hours=1)
ACTIVE_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)
MIB = 2**20


@dataclass(frozen=True)
class Usage:
    """A tenant's usage, counted from the jobs table."""

    active_jobs: int  # interactive jobs queued or running (what ``active_jobs`` limits)
    active_batch_jobs: int  # batch and group jobs queued or running (shown, not limited by active_jobs)
    jobs_last_hour: int  # jobs created in the last hour, batch jobs included
    pending_uploads: int = 0  # direct uploads declared, not completed, not expired
    pending_upload_mb: float = 0.0  # their declared sizes together, in MiB

    def as_dict(self) -> dict[str, int | float]:
        """The counts by name."""
        return asdict(self)


@dataclass(frozen=True)
class PendingUploads:
    """A tenant's direct uploads declared and not yet completed (expired ones are not counted: they
    can no longer be completed, and retention deletes them)."""

    count: int
    bytes: int
    first_expiry: datetime | None  # when the oldest of them expires (and stops being counted)


def pending_uploads(session: Session, tenant: str, *, now: datetime | None = None) -> PendingUploads:
    """``tenant``'s pending uploads: an index range (migration 0013) over at most its cap of rows."""
    query = select(func.count(), func.coalesce(func.sum(Upload.size), 0), func.min(Upload.expires_at)).where(
        Upload.tenant == tenant, Upload.status == "pending", Upload.expires_at > (now or utcnow())
    )
    count, size, first = session.execute(query).one()
    return PendingUploads(count=int(count or 0), bytes=int(size or 0), first_expiry=first)


def count_active(session: Session, tenant: str, *, batch: bool = False) -> int:
    """Jobs of ``tenant`` queued or running: interactive ones, or with ``batch`` those of batches
    and job groups (what migration 0012's triggers count as not interactive)."""
    interactive = and_(Job.batch_id.is_(None), Job.group_id.is_(None))
    query = select(func.count()).where(
        Job.tenant == tenant, Job.status.in_(ACTIVE_STATUSES), not_(interactive) if batch else interactive
    )
    return int(session.scalar(query) or 0)


def count_created_since(session: Session, tenant: str, since: datetime) -> int:
    """Jobs of ``tenant`` created at or after ``since``."""
    query = select(func.count()).where(Job.tenant == tenant, Job.created_at >= since)
    return int(session.scalar(query) or 0)


def admission_usage(session: Session, tenant: str, since: datetime, *, inserted: int = 0) -> tuple[int, int]:
    """``tenant``'s active interactive jobs and jobs created since ``since``, without this
    transaction's ``inserted`` new rows, from the counters the triggers of migration 0007 keep.

    Two counter reads and, for the minute ``since`` falls in, an index range of that minute's jobs:
    the same whatever the tenant's backlog (admission holds the tenant's lock meanwhile). On
    PostgreSQL the counter triggers run at commit, so this transaction's rows are not in them yet;
    on SQLite they run at once and are.
    """
    first_minute = since.replace(second=0, microsecond=0)
    if first_minute < since:
        first_minute += timedelta(minutes=1)
    active = select(TenantUsageCount.active_jobs).where(TenantUsageCount.tenant == tenant)
    minutes = select(func.coalesce(func.sum(TenantJobMinute.jobs), 0)).where(
        TenantJobMinute.tenant == tenant, TenantJobMinute.minute >= first_minute
    )
    partial = select(func.count()).where(
        Job.tenant == tenant, Job.created_at >= since, Job.created_at < first_minute
    )
    row = session.execute(
        select(active.scalar_subquery(), minutes.scalar_subquery(), partial.scalar_subquery())
    ).one()
    own = inserted if session.get_bind().dialect.name == "sqlite" else 0
    return int(row[0] or 0) - own, int(row[1] or 0) + int(row[2] or 0) - own


def forget_old_minutes(session: Session, *, now: datetime | None = None) -> int:
    """Drop per-minute counts that admission can no longer read (older than two hours)."""
    cutoff = (now or utcnow()) - 2 * HOUR
    result = session.execute(delete(TenantJobMinute).where(TenantJobMinute.minute < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)


def nth_oldest_since(session: Session, tenant: str, since: datetime, n: int) -> datetime | None:
    """When the ``n``-th oldest (1-based) job of ``tenant`` created since ``since`` was created."""
    query = (
        select(Job.created_at)
        .where(Job.tenant == tenant, Job.created_at >= since)
        .order_by(Job.created_at, Job.id)
        .offset(max(0, n - 1))
        .limit(1)
    )
    return session.scalar(query)


def tenant_usage(session: Session, tenant: str, *, now: datetime | None = None) -> Usage:
    """``tenant``'s current usage."""
    now = now or utcnow()
    pending = pending_uploads(session, tenant, now=now)
    return Usage(
        active_jobs=count_active(session, tenant),
        active_batch_jobs=count_active(session, tenant, batch=True),
        jobs_last_hour=count_created_since(session, tenant, now - HOUR),
        pending_uploads=pending.count,
        pending_upload_mb=round(pending.bytes / MIB, 1),
    )
