"""Creating and canceling job groups.

Creation, once every row passed (``jobservice.groups.plan``): the tenant's quotas are checked for
the whole group first (refused before anything is stored), each distinct input file is stored once
for the group (``groups/<id>/inputs/sha256/<digest>.<ext>``, or ``.../inputs/upload/<id>.<ext>``
for a direct upload, copied inside the store; every job that uses it refers to that object), then
ONE transaction inserts the group's row, every job and its first event (``record_created_many``)
and admits them all against the quotas again under the tenant's lock: all the jobs exist, or none
does. A refusal or an outage before the commit deletes the stored inputs.
The jobs queue at batch priority, their ``created_at`` one microsecond apart in row order, so the
dispatcher takes a group's jobs of one model in row order; a worker's dispatch round, woken at once,
then hands them out
(and ``refresh_etas``, which the API runs once it has answered, gives them their ETAs).

An ``Idempotency-Key`` makes a retried request return the group the first one created (the same
manifest bytes), or 409 for another manifest.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from jobservice.auth.principal import Principal
from jobservice.db.tables import TERMINAL_STATUSES, Job, JobGroup, JobStatus, utcnow
from jobservice.errors import Conflict, NotFound
from jobservice.fleet import shares
from jobservice.fleet.dispatch import request_round
from jobservice.fleet.eta import refresh as refresh_forecast
from jobservice.groups.inputs import input_identity
from jobservice.groups.plan import GroupPlan
from jobservice.jobs.idempotency import scoped_key
from jobservice.jobs.submit import new_job_row, request_fingerprint, store_input
from jobservice.jobs.transitions import (
    InvalidTransition,
    cancel_queued_jobs,
    record_created_many,
    request_cancel,
)
from jobservice.quotas.admit import admit_jobs
from jobservice.quotas.disk import check_free_space
from jobservice.quotas.limits import recent_limits
from jobservice.storage import StoreUnavailable
from jobservice.wiring import Services

log = logging.getLogger(__name__)

CANCELED_DETAIL = "canceled with its job group"


def parse_group_id(raw: str) -> uuid.UUID:
    """A group id from a URL or the command line; anything else names no group."""
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise NotFound("group_not_found", f"There is no job group '{raw}'.") from None


def get_group(session: Session, group_id: uuid.UUID) -> JobGroup:
    """The group, freshly read, or a 404."""
    group = session.get(JobGroup, group_id, populate_existing=True)
    if group is None:
        raise NotFound("group_not_found", f"There is no job group '{group_id}'.")
    return group


def group_prefix(group_id: uuid.UUID | str) -> str:
    """Where a group's shared inputs live in the object store."""
    return f"groups/{group_id}/"


def replay_of(
    services: Services, idempotency_key: str | None, *, principal: Principal, manifest_sha256: str
) -> JobGroup | None:
    """The group an earlier request with this ``Idempotency-Key`` created (409 when it was for
    another manifest), or None: checked before the rows, so a replay is answered even when the
    tenant's quotas are now used up by the group it created."""
    key = scoped_key(idempotency_key, principal.tenant)
    existing = _by_key(services, key) if key else None
    if existing is not None and existing.manifest_sha256 != manifest_sha256:
        raise Conflict("idempotency_conflict", "This Idempotency-Key was already used for another manifest.")
    return existing


def admit_group(services: Services, *, principal: Principal, rows: int) -> None:
    """Refuse (429 ``quota_exceeded``) a group of ``rows`` jobs the tenant's quotas do not allow,
    before its rows are checked or anything is stored (``create_group`` admits it again, in the
    transaction that inserts the jobs)."""
    with services.db.session() as session:
        admit_jobs(session, services.settings, principal, rows, group=True)


def create_group(
    services: Services,
    plan: GroupPlan,
    *,
    principal: Principal,
    source: str,
    name: str = "",
    idempotency_key: str | None = None,
) -> tuple[JobGroup, bool]:
    """Record a checked plan as a group and queue all its jobs; (group, created). A replayed
    ``idempotency_key`` returns the group it created (409 for another manifest)."""
    key = scoped_key(idempotency_key, principal.tenant)
    if key:
        existing = _by_key(services, key)
        if existing is not None:
            return _replay(existing, plan), False
    settings = services.settings
    count = len(plan.rows)
    admit_group(services, principal=principal, rows=count)  # refused before anything is stored
    group_id = uuid.uuid4()
    stored = _store_inputs(services, group_id, plan)
    plan.close()  # the store has them now
    limits = recent_limits(services, principal)
    group = JobGroup(
        id=group_id,
        name=name[:128],
        tenant=principal.tenant,
        submitted_by=principal.key_id,
        source=source,
        manifest_format=plan.manifest.format,
        manifest_sha256=plan.manifest.sha256,
        columns=list(plan.manifest.columns),
        total_jobs=count,
        models=plan.models(),
        idempotency_key=key,
        created_at=utcnow(),
    )
    jobs = []
    for index, planned in enumerate(plan.rows):
        sub = planned.submission
        sub.group_id, sub.priority = group_id, settings.batch_priority
        sub.stored_inputs = {n: stored[input_identity(up)] for n, up in sub.uploads.items()}
        created = group.created_at + timedelta(microseconds=index)  # row order is creation order
        job = new_job_row(
            services,
            sub,
            planned.spec,
            planned.params,
            job_id=uuid.uuid4(),
            input_keys=sub.stored_inputs,
            fingerprint=request_fingerprint(sub, planned.spec),
            now=created,
        )
        job.expires_at = created + timedelta(hours=limits.retention_hours)
        jobs.append(job)
    try:
        with services.db.session() as session:  # the group and all its jobs, or nothing
            session.add(group)
            session.flush()
            record_created_many(session, jobs, actor=principal.actor)
            admit_jobs(session, settings, principal, count, group=True, inserted=count, limits=limits)
            shares.start_competing(
                session, tenant=principal.tenant, inserted=count, catalog=services.catalog, settings=settings
            )
    except IntegrityError:
        _discard_inputs(services, group_id)
        replay = _by_key(services, key) if key else None
        if replay is None:
            raise
        return _replay(replay, plan), False
    except BaseException:
        _discard_inputs(services, group_id)
        raise
    log.info("group %s (%s): %d jobs queued (%s)", group_id, name or "unnamed", count, group.models)
    _dispatch(services, group)
    return group, True


def _dispatch(services: Services, group: JobGroup) -> None:
    """Hand out the first jobs now: wake a worker's dispatcher when a group that may run them looks
    free (else the workers' upkeep rounds will, within seconds)."""
    request_round(services, list(group.models))


def refresh_etas(services: Services, group_id: uuid.UUID) -> None:
    """Give a new group's jobs their ETAs now rather than at the next forecast interval: the
    forecast plays the whole queue forward (a second or two behind thousands of queued jobs), so
    the API runs it once the answer has been sent."""
    try:
        refresh_forecast(services.db, services.catalog, services.settings, force=True)
    except Exception:  # noqa: BLE001 - the next upkeep round works them out
        log.warning("group %s: its jobs' ETAs wait for the next forecast", group_id, exc_info=True)


def _store_inputs(services: Services, group_id: uuid.UUID, plan: GroupPlan) -> dict[str, str]:
    """Store each distinct input once for the group: its identity (``input_identity``) -> object key."""
    inputs = plan.inputs()
    if not inputs:
        return {}
    check_free_space(services)  # 507 before anything is stored
    stored: dict[str, str] = {}
    try:
        for identity, upload in inputs.items():
            key = f"{group_prefix(group_id)}inputs/{identity}.{upload.extension}"
            store_input(services, key, upload)
            stored[identity] = key
    except BaseException:
        _discard_inputs(services, group_id)
        raise  # an outage is answered as 503 storage_unavailable by jobservice.http.api.errors
    return stored


def _discard_inputs(services: Services, group_id: uuid.UUID) -> None:
    try:
        services.store.delete_prefix(group_prefix(group_id))
    except StoreUnavailable:
        log.exception("group %s: could not delete its inputs after a failed creation", group_id)


def _by_key(services: Services, key: str) -> JobGroup | None:
    with services.db.session() as session:
        return session.scalar(select(JobGroup).where(JobGroup.idempotency_key == key))


def _replay(group: JobGroup, plan: GroupPlan) -> JobGroup:
    plan.close()
    if group.manifest_sha256 != plan.manifest.sha256:
        raise Conflict("idempotency_conflict", "This Idempotency-Key was already used for another manifest.")
    return group


def cancel_group(services: Services, group_id: uuid.UUID, *, actor: str | None = None) -> JobGroup:
    """Cancel every unfinished job of the group: queued ones at once (one statement for all of
    them), running ones at their next step. 409 ``group_finished`` when every job had ended."""
    with services.db.session() as session:
        group = get_group(session, group_id)
        unfinished = session.scalar(
            select(Job.id)
            .where(Job.group_id == group_id, Job.status.not_in(list(TERMINAL_STATUSES)))
            .limit(1)
        )
        if unfinished is None:
            raise Conflict(
                "group_finished", f"Every job of group {group.id} has ended; there is nothing to cancel."
            )
        session.execute(
            update(JobGroup)
            .where(JobGroup.id == group_id, JobGroup.canceled_at.is_(None))
            .values(canceled_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        canceled = cancel_queued_jobs(session, Job.group_id == group_id, detail=CANCELED_DETAIL, actor=actor)
    with services.db.session() as session:
        running = list(
            session.scalars(select(Job.id).where(Job.group_id == group_id, Job.status == JobStatus.RUNNING))
        )
    for job_id in running:  # a card group runs one job at a time: a few at most
        try:
            with services.db.session() as session:
                request_cancel(session, job_id, actor=actor)
        except InvalidTransition:
            pass  # it ended meanwhile
    log.info(
        "group %s: canceled %d queued jobs, asked %d running ones to stop",
        group_id,
        len(canceled),
        len(running),
    )
    with services.db.session() as session:
        return get_group(session, group_id)
