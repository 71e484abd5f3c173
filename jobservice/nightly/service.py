"""Creating, resuming, canceling and pinning batches.

Creation stores a snapshot of the inputs first, once per distinct content
(``batches/<id>/inputs/sha256/<digest>.<ext>``; every job of the batch refers to those objects
instead of a copy, and the spool copies are freed as soon as they are stored), then
inserts the row together with its resolved spec in one transaction, so a row never exists without
the spec it runs (an interruption before the insert leaves only unreferenced input files). Then it
submits one job per case and repeat through ``submit_job`` with the idempotency key
``batch:<id>:<case>:<repeat>`` (``:<n>`` appended for the n-th re-run of a slot whose job was
canceled). Resuming therefore only submits the slots that have no live job yet (a replayed key
returns the existing job): a finished case never runs again. Repeats are interleaved (every case's
first run, then every case's second...) so that slow drift of the machine spreads over all cases
instead of biasing one. Status changes go through ``jobservice.nightly.states``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from jobservice.auth.principal import Principal, anonymous
from jobservice.db.tables import TERMINAL_STATUSES, Batch, Job, JobStatus
from jobservice.errors import Conflict, NotFound
from jobservice.fleet.eta import refresh as refresh_forecast
from jobservice.jobs.idempotency import scoped_key
from jobservice.jobs.submit import Submission, submit_job
from jobservice.jobs.transitions import InvalidTransition, request_cancel
from jobservice.media.uploads import stored_upload
from jobservice.nightly.environment import creator_environment
from jobservice.nightly.looks import case_plan
from jobservice.nightly.plan import Plan
from jobservice.nightly.states import (
    BatchStatus,
    mark_canceled,
    mark_running,
    record_plan,
    reopen,
    still_creating,
    still_running,
)
from jobservice.quotas.admit import admit_jobs
from jobservice.quotas.disk import check_free_space
from jobservice.storage import StoreUnavailable
from jobservice.webhooks.targets import event_filter
from jobservice.wiring import Services

log = logging.getLogger(__name__)

BATCH_STATUSES = tuple(BatchStatus)
JOB_SOURCE = "batch"
INCOMPLETE = (
    "Its creation was interrupted before its spec was stored, so it has nothing to run; run the spec again."
)


def parse_batch_id(raw: str) -> uuid.UUID:
    """A batch id from a URL or the command line; anything else names no batch."""
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise NotFound("batch_not_found", f"There is no batch '{raw}'.") from None


def get_batch(session: Session, raw_id: str | uuid.UUID) -> Batch:
    """The batch, freshly read, or a 404."""
    batch_id = raw_id if isinstance(raw_id, uuid.UUID) else parse_batch_id(raw_id)
    batch = session.get(Batch, batch_id, populate_existing=True)
    if batch is None:
        raise NotFound("batch_not_found", f"There is no batch '{raw_id}'.")
    return batch


def latest_jobs(session: Session, batch_id: uuid.UUID) -> dict[tuple[str, int], Job]:
    """The newest job of each (case, repeat) slot of a batch."""
    rows = session.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.created_at, Job.id))
    return {(str(job.batch_case), int(job.batch_repeat or 0)): job for job in rows}


def slots(spec: dict[str, Any], plan: dict[str, Any] | None = None) -> list[tuple[dict[str, Any], int]]:
    """Every (case, repeat) of a resolved spec, repeats interleaved across cases; ``plan`` (the
    batch's ``results["plan"]``, jobservice/nightly/looks.py) adds the runs a night added."""
    cases = spec.get("cases") or []
    counts = [case_plan(plan or {}, case).runs for case in cases]
    rounds = max(counts, default=0)
    return [(case, r) for r in range(rounds) for case, count in zip(cases, counts, strict=True) if r < count]


def plan_of(batch: Batch) -> dict[str, Any]:
    """The runs a batch added to its spec's (``looks.py``), by case; empty when none were."""
    plan = (batch.results or {}).get("plan")
    return plan if isinstance(plan, dict) else {}


def abandon_if_incomplete(services: Services, batch: Batch) -> bool:
    """Cancel a batch that has no spec to run (an interrupted creation of an older version).

    Such a batch would otherwise "finish" with no cases and become the next run's baseline.
    """
    if slots(batch.spec or {}):
        return False
    with services.db.session() as session:
        moved = mark_canceled(session, batch.id, error=INCOMPLETE)
    if moved:
        log.warning("batch %s: no spec was stored; canceled", batch.id)
    return True


def _batch_row(
    *,
    batch_id: uuid.UUID,
    plan: Plan,
    cases: list[dict[str, Any]],
    source: str,
    idempotency_key: str | None,
    principal: Principal,
) -> Batch:
    """The new batch's row, still creating, with its resolved spec (``cases``: the described cases,
    their inputs already stored)."""
    loaded = plan.loaded
    resolved = {
        "name": loaded.spec.name,
        "description": loaded.spec.description,
        "baseline": loaded.spec.baseline,
        "thresholds": loaded.spec.thresholds.model_dump(mode="json"),
        "metrics": [m.model_dump(mode="json") for m in loaded.spec.metrics],
        "primary": loaded.spec.primary,
        "assumed_drift": loaded.spec.assumed_drift,
        "time_budget_s": loaded.spec.time_budget_s,
        "undisturbed": loaded.spec.undisturbed,  # read by workers (jobservice/nightly/measure.py)
        "cases": cases,
    }
    return Batch(
        id=batch_id,
        name=loaded.spec.name,
        spec_digest=loaded.digest,
        spec=resolved,
        spec_text=loaded.text,
        origin=loaded.origin[:512],
        source=source,
        status=BatchStatus.CREATING.value,
        pinned=False,
        total_jobs=sum(c.repeat for c in plan.cases),
        idempotency_key=idempotency_key,
        environment={"created_by": creator_environment()},
        results={},
        tenant=principal.tenant,
        submitted_by=principal.key_id,
        # Checked by plan_batch (jobservice.webhooks.targets).
        webhook_url=loaded.spec.webhook or None,
        webhook_events=event_filter(loaded.spec.webhook_events_filter or "start,completed")
        if loaded.spec.webhook
        else None,
    )


def create_batch(
    services: Services,
    plan: Plan,
    *,
    source: str,
    idempotency_key: str | None = None,
    on_recorded: Callable[[Batch], None] | None = None,
    principal: Principal | None = None,
) -> tuple[Batch, bool]:
    """Record a checked plan as a batch and queue its jobs; (batch, created). Replays return the old one.

    ``on_recorded`` is called once the batch and its inputs are stored, before any job is queued
    (the CLI prints the id there, so an interrupted run can be resumed).
    """
    loaded = plan.loaded
    principal = principal or anonymous("default")
    idempotency_key = scoped_key(idempotency_key, principal.tenant)
    if idempotency_key:
        existing = _by_key(services, idempotency_key)
        if existing is not None:
            return _replay(existing, loaded.digest), False
    batch_id = uuid.uuid4()
    with services.db.session() as session:  # refuse an oversized batch before storing anything
        admit_jobs(session, services.settings, principal, plan_size(plan), batch=True)
    check_free_space(services)
    stored: dict[str, str] = {}
    try:
        cases = [case.describe(_store_inputs(services, batch_id, case, stored)) for case in plan.cases]
    except StoreUnavailable:
        _discard_inputs(services, batch_id)
        raise  # answered as 503 storage_unavailable by jobservice.http.api.errors
    plan.close()  # the store has them now: free the spool copies before the jobs are queued
    batch = _batch_row(
        batch_id=batch_id,
        plan=plan,
        cases=cases,
        source=source,
        idempotency_key=idempotency_key,
        principal=principal,
    )
    try:
        with services.db.session() as session:  # the row and its spec in one transaction
            admit_jobs(session, services.settings, principal, batch.total_jobs, batch=True)
            session.add(batch)
    except IntegrityError:
        _discard_inputs(services, batch_id)
        replay = _by_key(services, idempotency_key) if idempotency_key else None
        if replay is None:
            raise
        return _replay(replay, loaded.digest), False
    except BaseException:
        _discard_inputs(services, batch_id)
        raise
    if on_recorded is not None:
        on_recorded(batch)
    log.info("batch %s (%s): %d jobs to queue", batch.id, batch.name, batch.total_jobs)
    return submit_slots(services, batch.id), True


def resume_batch(services: Services, batch_id: uuid.UUID) -> Batch:
    """Queue the slots that have no job yet, or whose job was canceled; finished work is kept."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
    if batch.status == BatchStatus.FINISHED:
        raise Conflict("batch_finished", f"Batch {batch.id} is finished; there is nothing to resume.")
    if abandon_if_incomplete(services, batch):
        raise Conflict("batch_incomplete", f"Batch {batch.id} cannot be resumed. {INCOMPLETE}")
    for case, _ in slots(batch.spec, plan_of(batch)):
        for entry in (case.get("inputs") or {}).values():
            if not services.store.exists(str(entry["key"])):
                raise Conflict(
                    "inputs_missing", f"The batch input '{entry['key']}' is no longer in the store."
                )
    with services.db.session() as session:
        reopen(session, batch.id)  # a no-op for one still creating (an interrupted creation)
    return submit_slots(services, batch.id)


def plan_size(plan: Plan) -> int:
    """How many jobs a plan queues (cases x repeats)."""
    return sum(case.repeat for case in plan.cases)


def owner_of(batch: Batch) -> Principal:
    """The caller a batch's jobs are submitted as: its tenant and the key that created it."""
    return Principal(tenant=batch.tenant or "default", role="user", key_id=batch.submitted_by)


def add_runs(services: Services, batch_id: uuid.UUID, plan: dict[str, Any]) -> Batch:
    """Queue the runs a running batch adds before it is judged (``looks.py``: disturbed repeats run
    again, or the next look of adaptive repeats), recording the new ``plan`` first."""
    with services.db.session() as session:
        if not record_plan(session, batch_id, plan):
            return get_batch(session, batch_id)  # no longer running: canceled or judged meanwhile
    log.info("batch %s: more runs before it is judged: %s", batch_id, plan)
    return submit_slots(services, batch_id, running=True)


def submit_slots(services: Services, batch_id: uuid.UUID, *, running: bool = False) -> Batch:
    """Submit every slot without a live job, then mark the batch running (``running``: it already
    is, and more runs are being added to it)."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
        existing = latest_jobs(session, batch_id)
        tries = _tries(session, batch_id)
    owner = owner_of(batch)
    alive_check = still_running if running else still_creating
    for case, repeat in slots(batch.spec, plan_of(batch)):
        job = existing.get((case["name"], repeat))
        if job is not None and job.status != JobStatus.CANCELED:
            continue
        attempt = tries.get((case["name"], repeat), 0)
        key = f"batch:{batch_id}:{case['name']}:{repeat}" + (f":{attempt}" if attempt else "")
        inputs = case.get("inputs") or {}
        sub = Submission(
            task=case["task"],
            model=case["model"],
            params=dict(case["params"]),
            # The batch's stored inputs, referred to by every job (no copy per job).
            uploads={n: stored_upload(n, Path(e["key"]), e.get("meta") or {}) for n, e in inputs.items()},
            stored_inputs={name: str(entry["key"]) for name, entry in inputs.items()},
            source=JOB_SOURCE,
            priority=services.settings.batch_priority,
            idempotency_key=key,
            batch_id=batch_id,
            batch_case=case["name"],
            batch_repeat=repeat,
            principal=owner,
            admitted=True,  # the batch was admitted as a whole (jobservice.quotas)
        )
        submitted, _ = submit_job(services, sub)
        with services.db.session() as session:  # shows creation is alive; stops if canceled meanwhile
            alive = alive_check(session, batch_id)
        if not alive:
            # cancel_batch may have listed the batch's jobs before this one was committed: cancel it
            # here, or it would run (and a resume would not re-run its slot).
            _cancel_job(services, submitted.id)
            log.info("batch %s: no longer being created (canceled?); stopping submission", batch_id)
            break
    with services.db.session() as session:
        mark_running(session, batch_id)
        batch = get_batch(session, batch_id)
    try:  # the batch's jobs have their ETAs in the first answer, not a forecast interval later
        refresh_forecast(services.db, services.catalog, services.settings, force=True)
    except Exception:  # noqa: BLE001 - the next upkeep round works them out
        log.warning("batch %s: its jobs' ETAs wait for the next forecast", batch_id, exc_info=True)
    return batch


def cancel_batch(services: Services, batch_id: uuid.UUID) -> Batch:
    """Stop a batch: queued jobs are canceled at once, running ones at their next step."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
        if BatchStatus(batch.status).is_ended or not mark_canceled(session, batch_id):
            current = get_batch(session, batch_id).status
            raise Conflict("batch_finished", f"Batch {batch.id} is already {current}.")
    with services.db.session() as session:
        unfinished = [
            j.id for j in latest_jobs(session, batch_id).values() if j.status not in TERMINAL_STATUSES
        ]
    for job_id in unfinished:
        _cancel_job(services, job_id)
    with services.db.session() as session:
        return get_batch(session, batch_id)


def pin_batch(services: Services, batch_id: uuid.UUID, *, pinned: bool) -> Batch:
    """Make a finished batch THE baseline of its spec (unpinning any other), or unpin it."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
        if pinned and batch.status != BatchStatus.FINISHED:
            raise Conflict("batch_not_finished", f"Batch {batch.id} is {batch.status}; pin a finished one.")
        if pinned and not has_finished_cases(batch):
            raise Conflict(
                "batch_empty", f"Batch {batch.id} has no case with a finished run to compare with."
            )
        if pinned:
            session.execute(
                update(Batch)
                .where(Batch.name == batch.name, Batch.tenant == batch.tenant)
                .values(pinned=False)
            )
        session.execute(update(Batch).where(Batch.id == batch_id).values(pinned=pinned))
    with services.db.session() as session:
        return get_batch(session, batch_id)


def has_finished_cases(batch: Batch) -> bool:
    """Whether a finished batch has a case with a successful run: only such a batch is a baseline."""
    return any(
        run.get("status") == JobStatus.SUCCEEDED
        for case in (batch.results or {}).get("cases") or []
        for run in case.get("runs") or []
    )


def _cancel_job(services: Services, job_id: uuid.UUID) -> None:
    try:
        with services.db.session() as session:
            request_cancel(session, job_id)
    except InvalidTransition:
        pass  # it finished in the meantime


def _tries(session: Session, batch_id: uuid.UUID) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for case, repeat in session.execute(
        select(Job.batch_case, Job.batch_repeat).where(Job.batch_id == batch_id)
    ).all():
        slot = (str(case), int(repeat or 0))
        counts[slot] = counts.get(slot, 0) + 1
    return counts


def _by_key(services: Services, key: str) -> Batch | None:
    with services.db.session() as session:
        return session.scalar(select(Batch).where(Batch.idempotency_key == key))


def _replay(batch: Batch, digest: str) -> Batch:
    if batch.spec_digest != digest:
        raise Conflict("idempotency_conflict", "This Idempotency-Key was already used for another spec.")
    return batch


def _store_inputs(
    services: Services, batch_id: uuid.UUID, case: Any, stored: dict[str, str]
) -> dict[str, str]:
    """Store a case's inputs, each distinct content once per batch (``stored``: digest -> key)."""
    keys: dict[str, str] = {}
    for name, upload in case.inputs.items():
        digest = str(upload.meta.get("sha256") or "")
        key = stored.get(digest) if digest else None
        if key is None:
            label = digest or f"{case.name}-{name}"
            key = f"batches/{batch_id}/inputs/sha256/{label}.{upload.extension}"
            services.store.put_file(key, upload.path, content_type=upload.content_type)
            if digest:
                stored[digest] = key
        keys[name] = key
    return keys


def _discard_inputs(services: Services, batch_id: uuid.UUID) -> None:
    try:
        services.store.delete_prefix(f"batches/{batch_id}/")
    except StoreUnavailable:
        log.exception("batch %s: could not delete its inputs after a failed creation", batch_id)
