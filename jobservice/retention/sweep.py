"""Retention: delete the files of jobs whose time is up, and keep their rows, marked ``expired_at``.

A job is due when it is finished (succeeded, failed or canceled: a queued or running job is never
expired under a worker), ``expires_at`` has passed (rows from before ``expires_at`` existed count
from ``created_at`` plus their tenant's retention), it is not expired yet, and it does not belong
to a pinned batch (a baseline keeps its files as long as it is pinned; the batch a pinned one was
compared with is not kept: the comparison lives in the batch rows, not in the files).

For each due job: delete everything under ``jobs/<id>/`` (inputs, video, report, log, attempts),
THEN mark it with a compare-and-set ``UPDATE ... WHERE expired_at IS NULL`` and one job event in
the same transaction. Deleting is idempotent, so a pass that dies in between, or two passes at
once, are harmless: whichever marks first records the event, the other's update matches no row.
A deletion that fails is logged and retried next pass; it never stops the pass (a run of
``MAX_FAILURES_IN_A_ROW`` failures does: the store is down, not one object).

Direct uploads (``uploads/<id>/``, ``jobservice.uploads``) go, object and row, once their
``expires_at`` has passed: a job that used one holds its own copy.

A set's shared files (``groups/<id>/``: a job group's inputs, a nightly run's inputs and reports;
``batches/<id>/`` too for a run made before 0.2.0) go once every job of the set has expired, and
for a nightly run once it is finished or canceled and not pinned: one sweep for every set.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, func, or_, select
from sqlalchemy.orm import Session

from jobservice.db.rows import update_one
from jobservice.db.tables import TERMINAL_STATUSES, Batch, Job, JobEvent, JobGroup, Tenant, utcnow
from jobservice.quotas.limits import resolve_limits
from jobservice.settings import Settings
from jobservice.uploads.service import sweep_uploads
from jobservice.wiring import Services

log = logging.getLogger(__name__)

EXPIRED_DETAIL = "expired: files deleted (retention)"
SYSTEM_ACTOR = "system"
MAX_FAILURES_IN_A_ROW = 10
# Batches whose last job expired this recently are checked for inputs to delete (a failed deletion
# is retried within this window; older fully expired batches were cleaned long ago).
BATCH_INPUTS_WINDOW = timedelta(days=7)
ENDED_BATCH_STATUSES = ("finished", "canceled")  # jobservice.nightly.states.BatchStatus


@dataclass
class SweepResult:
    """What one retention pass did (or, with ``dry_run``, would do)."""

    dry_run: bool = False
    expired: list[str] = field(default_factory=list)  # jobs whose files went and that are now marked
    objects_deleted: int = 0  # objects deleted (dry run: that would be)
    failed: list[str] = field(default_factory=list)  # job or batch prefixes whose deletion failed
    marked_elsewhere: int = 0  # due jobs another pass marked first
    batch_inputs: list[str] = field(default_factory=list)  # batches whose shared inputs were deleted
    uploads: list[str] = field(default_factory=list)  # expired direct uploads deleted (object and row)
    group_inputs: list[str] = field(default_factory=list)  # job groups whose shared inputs were deleted

    def as_dict(self) -> dict[str, Any]:
        """The result as plain JSON values."""
        return asdict(self)


def job_prefix(job_id: uuid.UUID | str) -> str:
    """Where a job's files live in the object store."""
    return f"jobs/{job_id}/"


def batch_prefix(batch_id: uuid.UUID | str) -> str:
    """Where a batch made before 0.2.0 keeps its shared inputs and reports (later ones: ``groups/<id>/``)."""
    return f"batches/{batch_id}/"


def sweep_expired(
    services: Services, *, now: datetime | None = None, limit: int = 500, dry_run: bool = False
) -> SweepResult:
    """One retention pass over at most ``limit`` due jobs (oldest first) and their batches' inputs."""
    now = now or utcnow()
    result = SweepResult(dry_run=dry_run)
    with services.db.session() as session:
        due = due_jobs(session, services.settings, now=now, limit=limit)
    in_a_row = 0
    for job_id in due:
        ok = (
            _preview(services, job_prefix(job_id), result)
            if dry_run
            else _expire(services, job_id, now, result)
        )
        in_a_row = 0 if ok else in_a_row + 1
        if in_a_row >= MAX_FAILURES_IN_A_ROW:
            log.error("retention: %d deletions failed in a row; stopping this pass", in_a_row)
            return result
        if ok and dry_run:
            result.expired.append(str(job_id))
    _sweep_set_inputs(services, now=now, limit=limit, result=result)
    result.uploads = sweep_uploads(services, now=now, limit=limit, dry_run=dry_run)
    if result.expired or result.failed or result.batch_inputs or result.group_inputs or result.uploads:
        log.info(
            "retention%s: %d jobs expired, %d objects deleted, %d failed, %d batches' inputs deleted, "
            "%d uploads deleted",
            " (dry run)" if dry_run else "",
            len(result.expired),
            result.objects_deleted,
            len(result.failed),
            len(result.batch_inputs),
            len(result.uploads),
        )
    return result


def due_jobs(session: Session, settings: Settings, *, now: datetime, limit: int) -> list[uuid.UUID]:
    """Ids of finished, unexpired jobs past their retention, outside pinned batches, oldest first."""
    pinned = select(Batch.id).where(Batch.pinned.is_(True))
    query = (
        select(Job.id)
        .where(
            Job.status.in_(list(TERMINAL_STATUSES)),
            Job.expired_at.is_(None),
            _past_retention(session, settings, now),
            or_(Job.batch_id.is_(None), Job.batch_id.not_in(pinned)),
        )
        .order_by(func.coalesce(Job.expires_at, Job.created_at), Job.id)
        .limit(limit)
    )
    return list(session.scalars(query))


def _past_retention(session: Session, settings: Settings, now: datetime) -> ColumnElement[bool]:
    """``expires_at`` has passed; a row without one (older than migration 0003) counts from
    ``created_at`` plus its tenant's retention (the tenant's override, else the default)."""
    hours = _tenant_retention(session, settings)
    legacy = [and_(Job.tenant == t, Job.created_at < now - timedelta(hours=h)) for t, h in hours.items()]
    default_cut = now - timedelta(hours=settings.retention_hours)
    legacy.append(and_(Job.tenant.not_in(list(hours)), Job.created_at < default_cut))
    return or_(Job.expires_at < now, and_(Job.expires_at.is_(None), or_(*legacy)))


def _tenant_retention(session: Session, settings: Settings) -> dict[str, float]:
    """Tenants whose retention differs from the default, with their hours."""
    found: dict[str, float] = {}
    for name, limits in session.execute(select(Tenant.name, Tenant.limits)):
        hours = resolve_limits(settings, tenant=limits or {}).retention_hours
        if hours != settings.retention_hours:
            found[name] = hours
    return found


def _is_protected(session: Session, job_id: uuid.UUID) -> bool:
    """Whether the job is (now) in a pinned batch, or already marked: checked just before deleting,
    so a batch pinned while the pass runs keeps its files."""
    row = session.execute(
        select(Job.expired_at, Batch.pinned)
        .outerjoin(Batch, Batch.id == Job.batch_id)
        .where(Job.id == job_id)
    ).one_or_none()
    return row is None or row.expired_at is not None or bool(row.pinned)


def _expire(services: Services, job_id: uuid.UUID, now: datetime, result: SweepResult) -> bool:
    """Delete one job's files, then mark it; False when the deletion failed."""
    with services.db.session() as session:
        if _is_protected(session, job_id):
            return True
    prefix = job_prefix(job_id)
    try:
        result.objects_deleted += services.store.delete_prefix(prefix)
    except Exception as exc:  # noqa: BLE001 - StoreUnavailable, a local OSError: retried next pass
        log.warning("job %s: deleting %s failed, retried next pass: %s", job_id, prefix, exc)
        result.failed.append(prefix)
        return False
    with services.db.session() as session:
        marked = mark_expired(session, job_id, at=now)
    if marked:
        log.info("job %s: files deleted (retention)", job_id)
        result.expired.append(str(job_id))
    else:
        result.marked_elsewhere += 1
    return True


def mark_expired(session: Session, job_id: uuid.UUID, *, at: datetime) -> bool:
    """Set ``expired_at`` on a finished job once (compare-and-set) with its event; True if this call did."""
    ended = (Job.id == job_id, Job.expired_at.is_(None), Job.status.in_(list(TERMINAL_STATUSES)))
    if not update_one(session, Job, *ended, expired_at=at, updated_at=utcnow()):
        return False
    attempt = session.scalar(select(Job.attempts).where(Job.id == job_id)) or 0
    # No status move: from/to stay empty, so counting transitions (to ``succeeded``...) is unaffected.
    session.add(
        JobEvent(job_id=job_id, at=utcnow(), attempt=attempt, detail=EXPIRED_DETAIL, actor=SYSTEM_ACTOR)
    )
    return True


def _preview(services: Services, prefix: str, result: SweepResult) -> bool:
    """Dry run: count what deleting ``prefix`` would delete."""
    try:
        result.objects_deleted += sum(1 for _ in services.store.list(prefix))
    except Exception as exc:  # noqa: BLE001
        log.warning("listing %s failed: %s", prefix, exc)
        result.failed.append(prefix)
        return False
    return True


def spent_sets(session: Session, *, now: datetime, limit: int) -> list[tuple[uuid.UUID, bool]]:
    """Sets of jobs (job groups; a nightly run is one with a batch row) whose jobs have all expired,
    the last one within BATCH_INPUTS_WINDOW, and, for a nightly run, ended and unpinned:
    (id, is a batch), oldest first."""
    unexpired = exists().where(Job.group_id == JobGroup.id, Job.expired_at.is_(None))
    recent = exists().where(Job.group_id == JobGroup.id, Job.expired_at >= now - BATCH_INPUTS_WINDOW)
    done = or_(Batch.id.is_(None), and_(Batch.pinned.is_(False), Batch.status.in_(ENDED_BATCH_STATUSES)))
    query = (
        select(JobGroup.id, Batch.id.is_not(None))
        .outerjoin(Batch, Batch.id == JobGroup.id)
        .where(~unexpired, recent, done)
        .order_by(JobGroup.created_at)
        .limit(limit)
    )
    return [(set_id, bool(is_batch)) for set_id, is_batch in session.execute(query)]


def set_prefixes(set_id: uuid.UUID | str, *, is_batch: bool) -> list[str]:
    """Where a set's shared files live: ``groups/<id>/``, and for a nightly run made before 0.2.0
    (migration 0018) also ``batches/<id>/``."""
    return [f"groups/{set_id}/", *([batch_prefix(set_id)] if is_batch else [])]


def _sweep_set_inputs(services: Services, *, now: datetime, limit: int, result: SweepResult) -> None:
    """Delete the shared inputs (and a nightly run's reports) of sets whose every job expired (dry
    run: those that would go, the sets this pass's jobs complete among them)."""
    with services.db.session() as session:
        sets = spent_sets(session, now=now, limit=limit)
        if result.dry_run:  # the jobs this pass would expire are not marked yet: name those sets too
            sets += _sets_completed_by(session, result.expired, {set_id for set_id, _ in sets})
    for set_id, is_batch in sets:
        done = result.batch_inputs if is_batch else result.group_inputs
        deleted, failed = 0, False
        for prefix in set_prefixes(set_id, is_batch=is_batch):
            if result.dry_run:
                before = result.objects_deleted
                failed |= not _preview(services, prefix, result)
                deleted += result.objects_deleted - before
                continue
            try:
                deleted += services.store.delete_prefix(prefix)
            except Exception as exc:  # noqa: BLE001 - retried next pass (within the window)
                log.warning("set %s: deleting %s failed, retried next pass: %s", set_id, prefix, exc)
                result.failed.append(prefix)
                failed = True
        if not result.dry_run:
            result.objects_deleted += deleted
        if deleted and not failed:
            log.info("set %s: inputs deleted (every job expired)%s", set_id, " (dry run)" * result.dry_run)
            done.append(str(set_id))


def _sets_completed_by(
    session: Session, job_ids: list[str], known: set[uuid.UUID]
) -> list[tuple[uuid.UUID, bool]]:
    """Sets whose only unexpired jobs are among ``job_ids`` (for a dry run), as ``spent_sets``."""
    ids = [uuid.UUID(j) for j in job_ids]
    if not ids:
        return []
    candidates = set(session.scalars(select(Job.group_id).where(Job.id.in_(ids), Job.group_id.is_not(None))))
    found: list[tuple[uuid.UUID, bool]] = []
    for set_id in sorted({c for c in candidates if c is not None} - known, key=str):
        batch = session.get(Batch, set_id)
        if batch is not None and (batch.pinned or batch.status not in ENDED_BATCH_STATUSES):
            continue
        left = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.group_id == set_id, Job.expired_at.is_(None), Job.id.not_in(ids))
        )
        if not left:
            found.append((set_id, batch is not None))
    return found
