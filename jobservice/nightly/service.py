"""Creating, resuming, canceling and pinning batches: a nightly run is a job group with a spec.

Creation stores each distinct input once under the group's prefix
(``groups/<id>/inputs/sha256/<digest>.<ext>``; every job refers to those objects, and the spool
copies are freed as soon as they are stored), then ONE transaction inserts the job group's row,
the batch's row with its resolved spec and one job per case and repeat (``jobservice.nightly.slots``)
through the group's one creation path (``record_set``): the batch runs with all its jobs, or
nothing exists. A running batch grows in one transaction too (``add_runs``: re-runs of disturbed
repeats, the next look of adaptive repeats; ``resume_batch``: the slots whose job was canceled).
Status changes go through ``jobservice.nightly.states``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from jobservice.auth.principal import Principal, anonymous
from jobservice.db.tables import Batch, Job, utcnow
from jobservice.errors import Conflict
from jobservice.fleet.dispatch import request_round
from jobservice.groups.relocate import adopt_batch
from jobservice.groups.service import (
    admit_group,
    cancel_set_jobs,
    get_set,
    grow_set,
    new_set,
    parse_set_id,
    record_set,
    refresh_etas,
    store_set_inputs,
)
from jobservice.jobs.idempotency import scoped_key
from jobservice.nightly.plan import Plan
from jobservice.nightly.slots import missing_slot_jobs, owner_of, plan_of, slots
from jobservice.nightly.states import BatchStatus, mark_canceled, record_plan, reopen
from jobservice.nightly.webhook_events import on_batch_move
from jobservice.quotas.limits import recent_limits
from jobservice.wiring import Services

log = logging.getLogger(__name__)

BATCH_STATUSES = tuple(BatchStatus)
SPEC_FORMAT = "spec"  # the ``manifest_format`` of a nightly run's job group


def parse_batch_id(raw: str) -> uuid.UUID:
    """A batch id from a URL or the command line; anything else names no batch."""
    return parse_set_id(raw, code="batch_not_found", noun="batch")


def get_batch(session: Session, raw_id: str | uuid.UUID) -> Batch:
    """The batch, freshly read, or a 404."""
    return get_set(session, Batch, raw_id, code="batch_not_found", noun="batch")


def create_batch(
    services: Services,
    plan: Plan,
    *,
    source: str,
    idempotency_key: str | None = None,
    on_recorded: Callable[[Batch], None] | None = None,
    principal: Principal | None = None,
) -> tuple[Batch, bool]:
    """Record a checked plan as a batch with all its jobs queued; (batch, created). Replays return
    the old one. ``on_recorded`` is called once the batch exists (the CLI prints its id there).
    The caller gives the new jobs their ETAs (``refresh_etas``), after answering if it can."""
    principal = principal or anonymous("default")
    key = scoped_key(idempotency_key, principal.tenant)
    if key and (existing := _by_key(services, key)) is not None:
        return _replay(existing, plan.loaded.digest), False
    admit_group(services, principal=principal, rows=plan.size, batch=True)  # before storing
    batch_id = uuid.uuid4()
    stored = store_set_inputs(services, batch_id, plan.inputs())
    spec = plan.resolved(stored)
    plan.close()  # the store has them now: free the spool copies
    batch = plan.batch_row(batch_id, spec=spec, source=source, key=key, principal=principal)
    with services.db.session() as session:
        jobs = missing_slot_jobs(services, session, batch, start=batch.created_at)
    manifest = (SPEC_FORMAT, batch.spec_digest)
    hook = (batch.webhook_url, batch.webhook_events)
    group = new_set(
        set_id=batch_id, name=batch.name, principal=principal, source=source, manifest=manifest, webhook=hook
    )
    limits = recent_limits(services, principal)
    try:
        record_set(
            services,
            group=group,
            jobs=jobs,
            principal=principal,
            limits=limits,
            batch=batch,
            then=lambda session: on_batch_move(session, batch_id, kind="start"),
        )
    except IntegrityError:  # the same Idempotency-Key, at the same moment
        replay = _by_key(services, key) if key else None
        if replay is None:
            raise
        return _replay(replay, plan.loaded.digest), False
    if on_recorded is not None:
        on_recorded(batch)
    log.info("batch %s (%s): %d jobs queued", batch.id, batch.name, len(jobs))
    return _started(services, batch_id, jobs, etas=False), True


def resume_batch(services: Services, batch_id: uuid.UUID) -> Batch:
    """Queue the slots that have no job yet, or whose job was canceled; finished work is kept."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
    if batch.status == BatchStatus.FINISHED:
        raise Conflict("batch_finished", f"Batch {batch.id} is finished; there is nothing to resume.")
    if not slots(batch.spec or {}):  # a creation interrupted before 0.2.0 (migration 0018)
        raise Conflict("batch_incomplete", f"Batch {batch.id} cannot be resumed: {batch.error}")
    for case, _ in slots(batch.spec, plan_of(batch)):
        for entry in (case.get("inputs") or {}).values():
            if not services.store.exists(str(entry["key"])):
                raise Conflict(
                    "inputs_missing", f"The batch input '{entry['key']}' is no longer in the store."
                )
    return _grow(services, batch_id, lambda session: reopen(session, batch_id))


def add_runs(services: Services, batch_id: uuid.UUID, plan: dict[str, Any]) -> Batch:
    """Queue the runs a running batch adds before it is judged (``looks.py``: disturbed repeats run
    again, or the next look of adaptive repeats), recording the new ``plan`` with them."""
    log.info("batch %s: more runs before it is judged: %s", batch_id, plan)
    return _grow(services, batch_id, lambda session: record_plan(session, batch_id, plan))


def _grow(services: Services, batch_id: uuid.UUID, move: Callable[[Session], bool]) -> Batch:
    """Make the state move and append the jobs of the slots it leaves without one, in one
    transaction (a batch canceled or judged meanwhile is answered as it is)."""
    jobs: list[Job] = []
    with services.db.session() as session:
        if move(session):
            batch = get_batch(session, batch_id)
            adopt_batch(session, batch)
            jobs = missing_slot_jobs(services, session, batch, start=utcnow())
            grow_set(services, session, batch_id, jobs, principal=owner_of(batch))
    return _started(services, batch_id, jobs)


def _started(services: Services, batch_id: uuid.UUID, jobs: list[Job], *, etas: bool = True) -> Batch:
    """Wake the dispatcher and (``etas``) give the new jobs their ETAs now; the batch as it is. A
    new batch's caller runs ``refresh_etas`` itself (the API once it has answered, as for a group)."""
    if jobs:
        request_round(services, sorted({job.model for job in jobs}))
    if jobs and etas:
        refresh_etas(services, batch_id)
    with services.db.session() as session:
        return get_batch(session, batch_id)


def cancel_batch(services: Services, batch_id: uuid.UUID, *, actor: str | None = None) -> Batch:
    """Stop a batch: queued jobs are canceled at once, running ones at their next step (``actor``:
    who asked, on each job's event)."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
        adopt_batch(session, batch)  # one an API of the previous release made during an upgrade
        if BatchStatus(batch.status).is_ended or not mark_canceled(session, batch_id):
            current = get_batch(session, batch_id).status
            raise Conflict("batch_finished", f"Batch {batch.id} is already {current}.")
    cancel_set_jobs(services, batch_id, actor=actor)
    with services.db.session() as session:
        return get_batch(session, batch_id)


def _by_key(services: Services, key: str) -> Batch | None:
    with services.db.session() as session:
        return session.scalar(select(Batch).where(Batch.idempotency_key == key))


def _replay(batch: Batch, digest: str) -> Batch:
    if batch.spec_digest != digest:
        raise Conflict("idempotency_conflict", "This Idempotency-Key was already used for another spec.")
    return batch
