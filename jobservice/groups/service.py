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
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from jobservice.auth.principal import Principal
from jobservice.db.tables import TERMINAL_STATUSES, Batch, Job, JobGroup, JobStatus, utcnow
from jobservice.errors import Conflict, NotFound
from jobservice.fleet import shares
from jobservice.fleet.dispatch import request_round
from jobservice.fleet.eta import refresh as refresh_forecast
from jobservice.groups.inputs import input_identity
from jobservice.groups.plan import GroupPlan, PlannedJob
from jobservice.jobs.idempotency import scoped_key
from jobservice.jobs.submit import new_job_row, request_fingerprint, store_inputs
from jobservice.jobs.transitions import (
    InvalidTransition,
    cancel_queued_jobs,
    record_created_many,
    request_cancel,
)
from jobservice.jobs.webhook_events import group_may_have_ended, on_set_move
from jobservice.media.uploads import CheckedUpload
from jobservice.quotas.admit import admit_jobs
from jobservice.quotas.disk import check_free_space
from jobservice.quotas.limits import Limits, recent_limits
from jobservice.storage import StoreUnavailable
from jobservice.wiring import Services

log = logging.getLogger(__name__)

CANCELED_DETAIL = "canceled with its job group"
T = TypeVar("T", JobGroup, Batch)


def parse_set_id(raw: str, *, code: str = "group_not_found", noun: str = "job group") -> uuid.UUID:
    """A set's id from a URL or the command line; anything else names no set (404 ``code``)."""
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise NotFound(code, f"There is no {noun} '{raw}'.") from None


def get_set(
    session: Session,
    model: type[T],
    raw_id: str | uuid.UUID,
    *,
    code: str = "group_not_found",
    noun: str = "job group",
) -> T:
    """A set's row (a ``JobGroup``, or the ``Batch`` of a nightly run), freshly read, or a 404."""
    set_id = raw_id if isinstance(raw_id, uuid.UUID) else parse_set_id(raw_id, code=code, noun=noun)
    found = session.get(model, set_id, populate_existing=True)
    if found is None:
        raise NotFound(code, f"There is no {noun} '{raw_id}'.")
    return found


def parse_group_id(raw: str) -> uuid.UUID:
    """A group id from a URL or the command line; anything else names no group."""
    return parse_set_id(raw)


def get_group(session: Session, group_id: uuid.UUID) -> JobGroup:
    """The group, freshly read, or a 404."""
    return get_set(session, JobGroup, group_id)


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


def admit_group(services: Services, *, principal: Principal, rows: int, batch: bool = False) -> None:
    """Refuse (429 ``quota_exceeded``) a group of ``rows`` jobs the tenant's quotas do not allow,
    before its rows are checked or anything is stored (``create_group`` admits it again, in the
    transaction that inserts the jobs)."""
    with services.db.session() as session:
        admit_jobs(session, services.settings, principal, rows, group=not batch, batch=batch)


def create_group(
    services: Services,
    plan: GroupPlan,
    *,
    principal: Principal,
    source: str,
    name: str = "",
    idempotency_key: str | None = None,
    webhook: tuple[str | None, str | None] = (None, None),
) -> tuple[JobGroup, bool]:
    """Record a checked plan as a group and queue all its jobs; (group, created). A replayed
    ``idempotency_key`` returns the group it created (409 for another manifest)."""
    key = scoped_key(idempotency_key, principal.tenant)
    if key:
        existing = _by_key(services, key)
        if existing is not None:
            return _replay(existing, plan), False
    count = len(plan.rows)
    admit_group(services, principal=principal, rows=count)  # refused before anything is stored
    group_id = uuid.uuid4()
    stored = store_set_inputs(services, group_id, plan.inputs())
    plan.close()  # the store has them now
    limits = recent_limits(services, principal)
    group = new_set(
        set_id=group_id,
        name=name,
        principal=principal,
        source=source,
        manifest=(plan.manifest.format, plan.manifest.sha256),
        columns=plan.manifest.columns,
        idempotency_key=key,
        webhook=webhook,
    )
    for planned in plan.rows:
        sub = planned.submission
        sub.stored_inputs = {n: stored[input_identity(up)] for n, up in sub.uploads.items()}
    jobs = job_rows(services, plan.rows, group_id=group_id, start=group.created_at, limits=limits)
    try:
        record_set(services, group=group, jobs=jobs, principal=principal, limits=limits)
    except IntegrityError:  # the same Idempotency-Key, at the same moment
        replay = _by_key(services, key) if key else None
        if replay is None:
            raise
        return _replay(replay, plan), False
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


def new_set(
    *,
    set_id: uuid.UUID,
    name: str,
    principal: Principal,
    source: str,
    manifest: tuple[str, str],
    columns: Sequence[str] = (),
    idempotency_key: str | None = None,
    created_at: datetime | None = None,
    webhook: tuple[str | None, str | None] = (None, None),
) -> JobGroup:
    """A set's row, not yet recorded (``record_set`` counts its jobs and models): ``manifest`` is
    the format and sha256 of what it was made from (a manifest, or a nightly run's spec);
    ``webhook``: the checked URL and event filter of its ``group.*`` events."""
    return JobGroup(
        id=set_id,
        name=name[:128],
        tenant=principal.tenant,
        submitted_by=principal.key_id,
        source=source[:16],
        manifest_format=manifest[0],
        manifest_sha256=manifest[1],
        columns=list(columns),
        idempotency_key=idempotency_key,
        created_at=created_at or utcnow(),
        webhook_url=webhook[0],
        webhook_events=webhook[1],
    )


def job_rows(
    services: Services,
    entries: Sequence[PlannedJob],
    *,
    group_id: uuid.UUID,
    start: datetime,
    limits: Limits,
) -> list[Job]:
    """The rows of a set's checked submissions (each with its ``stored_inputs``), not yet recorded:
    queued at batch priority, ``created_at`` one microsecond apart from ``start`` in their order (the
    dispatcher takes a set's jobs of one model in that order), kept as the tenant's retention says."""
    jobs = []
    for index, (sub, spec, params) in enumerate(entries):
        sub.group_id, sub.priority = group_id, services.settings.batch_priority
        created = start + timedelta(microseconds=index)
        job = new_job_row(
            services,
            sub,
            spec,
            params,
            job_id=uuid.uuid4(),
            input_keys=dict(sub.stored_inputs or {}),
            fingerprint=request_fingerprint(sub, spec),
            now=created,
        )
        job.expires_at = created + timedelta(hours=limits.retention_hours)
        jobs.append(job)
    return jobs


def record_set(
    services: Services,
    *,
    group: JobGroup,
    jobs: Sequence[Job],
    principal: Principal,
    limits: Limits,
    batch: Batch | None = None,
    then: Callable[[Session], None] | None = None,
) -> None:
    """The one way a set's jobs come to exist: ONE transaction inserts the group's row (and a nightly
    run's ``batch`` row with its spec), every job and its first event, and admits them all against
    the tenant's quotas under its lock: all the jobs exist, or none does (and the set's stored
    inputs are deleted). ``then`` adds what else
    belongs to the same transaction (a nightly run's webhook event)."""
    count = len(jobs)
    group.total_jobs, group.models = count, dict(Counter(job.model for job in jobs).most_common())
    try:
        with services.db.session() as session:
            session.add(group)
            if batch is not None:
                session.add(batch)
            session.flush()
            record_created_many(session, jobs, actor=principal.actor)
            admit_jobs(
                session,
                services.settings,
                principal,
                count,
                batch=batch is not None,
                group=batch is None,
                inserted=count,
                limits=limits,
            )
            _start_competing(services, session, principal, count)
            on_set_move(session, group.id, kind="start")  # the webhook outbox, same transaction
            if then is not None:
                then(session)
    except BaseException:
        discard_inputs(services, group.id)  # nothing refers to them
        raise


def grow_set(
    services: Services, session: Session, group_id: uuid.UUID, jobs: Sequence[Job], *, principal: Principal
) -> None:
    """Add ``jobs`` to an existing set, in the caller's transaction (a running nightly run's
    re-runs and further repeats: the set was admitted as a whole, so they are not admitted again)."""
    if not jobs:
        return
    record_created_many(session, jobs, actor=principal.actor)
    group = get_group(session, group_id)
    models = Counter(group.models or {})
    models.update(job.model for job in jobs)
    group.total_jobs, group.models = group.total_jobs + len(jobs), dict(models.most_common())
    group.canceled_at = None  # a canceled set that is resumed runs again
    _start_competing(services, session, principal, len(jobs))


def _start_competing(services: Services, session: Session, principal: Principal, inserted: int) -> None:
    """Fair share: a tenant with no other job waiting starts competing (its level is lifted)."""
    shares.start_competing(
        session,
        tenant=principal.tenant,
        inserted=inserted,
        catalog=services.catalog,
        settings=services.settings,
    )


def store_set_inputs(
    services: Services, group_id: uuid.UUID, inputs: dict[str, CheckedUpload]
) -> dict[str, str]:
    """Store each distinct input of a set once, under the group's prefix: its identity
    (``input_identity``) -> object key. Nothing is left behind when it fails."""
    if not inputs:
        return {}
    check_free_space(services)  # 507 before anything is stored
    return store_inputs(services, group_prefix(group_id), inputs)


def discard_inputs(services: Services, group_id: uuid.UUID) -> None:
    """Delete a set's stored inputs after its creation failed."""
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
    """Cancel every unfinished job of the group. 409 ``group_finished`` when every job had ended."""
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
    cancel_set_jobs(services, group_id, actor=actor)
    with services.db.session() as session:
        return get_group(session, group_id)


def cancel_set_jobs(services: Services, group_id: uuid.UUID, *, actor: str | None = None) -> None:
    """Cancel every unfinished job of a set (a group, or a nightly run's): queued ones at once (one
    statement for all of them), running ones at their next step; the group records when."""
    with services.db.session() as session:
        session.execute(
            update(JobGroup)
            .where(JobGroup.id == group_id, JobGroup.canceled_at.is_(None))
            .values(canceled_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        canceled = cancel_queued_jobs(session, Job.group_id == group_id, detail=CANCELED_DETAIL, actor=actor)
        group_may_have_ended(session, group_id)  # nothing was running: it ended now
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
        "set %s: canceled %d queued jobs, asked %d running ones to stop",
        group_id,
        len(canceled),
        len(running),
    )
