"""The reaper: no accepted job is ever lost.

1. A running job whose lease expired (its worker died or hung) is requeued for another attempt,
   failed with ``worker_lost`` once its attempts are used up, or canceled if a cancel was pending.
   This touches only the database, so it happens while the broker is away too.
2. A queued job waits in the table until the dispatcher (``jobservice.fleet.dispatch``) hands it
   to a card group and sends its message to that group's queue. A handed-out job whose message was
   never sent (the broker was away) is sent again; one whose message is gone (Redis restarted
   empty, a worker died between taking it and claiming it) or whose group is gone is handed back,
   and the dispatcher places it again. A message sent again carries the decision the dispatcher
   stored with the dispatch (what the worker loads and evicts). Duplicates are harmless: the claim
   is a compare-and-swap that also checks the group. When one send fails the broker is taken to be
   away and the rest of the pass sends nothing; the next pass tries again.

Every move goes through the transition functions, so two reapers running at once cannot
double-move a job. It runs on a thread in every worker and as ``jobservice reap``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from jobservice.broker import DispatchDecision, JobMessage, Send, group_queue
from jobservice.db.engine import Database
from jobservice.db.rows import update_one
from jobservice.db.tables import FleetGroup, Job, JobStatus, utcnow
from jobservice.fleet.card_groups import release_job
from jobservice.fleet.usage import Phases, record_attempt
from jobservice.jobs.leases import mark_enqueued
from jobservice.jobs.transitions import (
    InvalidTransition,
    Owner,
    mark_canceled,
    mark_failed,
    requeue_job,
)
from jobservice.tracing import traceparent

log = logging.getLogger(__name__)

PendingLookup = Callable[[set[str]], set[str]]  # queues -> job ids with a live message
Online = Callable[[], set[str]]  # the ids of the card groups whose workers are online
CardsOf = Callable[[str], int]  # model -> the cards a job of it holds


@dataclass
class ReapResult:
    """What one pass did."""

    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    canceled: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)  # left for the next pass: the broker is away
    handed_back: list[str] = field(default_factory=list)  # to the dispatcher: message or group gone

    @property
    def changed(self) -> bool:
        """Whether the pass did anything."""
        return bool(
            self.requeued or self.failed or self.canceled or self.resent or self.unsent or self.handed_back
        )


def _write_off(session: Session, row: Any, cards_of: CardsOf, half_life_s: float) -> None:
    """The lost attempt's card time (claim to last heartbeat) is the service's loss, never the
    tenant's; its group no longer runs it."""
    if not row.dispatched_to:
        return
    held = (row.heartbeat_at - row.claimed_at).total_seconds() if row.heartbeat_at and row.claimed_at else 0.0
    group = session.get(FleetGroup, row.dispatched_to)
    record_attempt(
        session,
        job_id=row.id,
        attempt=row.attempts,
        tenant=row.tenant,
        model=row.model,
        group_id=row.dispatched_to,
        card_kind=group.kind if group else "unknown",
        cards=cards_of(row.model),
        phases=Phases(generate_s=max(0.0, held)),
        outcome="worker_lost",
        half_life_s=half_life_s,
    )
    release_job(session, row.dispatched_to, row.id)


def reap_expired_leases(
    db: Database, result: ReapResult, *, cards_of: CardsOf = lambda _model: 1, half_life_s: float = 3600.0
) -> None:
    """Deal with running jobs whose worker stopped heartbeating (the database only, no broker)."""
    now = utcnow()
    with db.session() as session:
        expired = list(
            session.execute(
                select(
                    Job.id,
                    Job.model,
                    Job.priority,
                    Job.worker_id,
                    Job.attempts,
                    Job.max_attempts,
                    Job.cancel_requested_at,
                    Job.dispatched_to,
                    Job.tenant,
                    Job.claimed_at,
                    Job.heartbeat_at,
                ).where(Job.status == JobStatus.RUNNING, Job.lease_expires_at < now)
            )
        )
    for row in expired:
        owner = Owner(row.worker_id or "", row.attempts)
        try:
            with db.session() as session:
                _write_off(session, row, cards_of, half_life_s)
                if row.cancel_requested_at is not None:
                    mark_canceled(
                        session, row.id, owner=owner, detail="canceled; its worker stopped responding"
                    )
                    result.canceled.append(str(row.id))
                    continue
                if row.attempts < row.max_attempts:
                    requeue_job(
                        session, row.id, owner=owner, reason=f"worker {row.worker_id} stopped responding"
                    )
                else:
                    mark_failed(
                        session,
                        row.id,
                        code="worker_lost",
                        message=f"The worker running this job stopped responding on all {row.attempts} attempts.",  # noqa: E501
                        owner=owner,
                    )
                    result.failed.append(str(row.id))
                    continue
        except InvalidTransition:
            continue  # it finished or another reaper got there first
        log.warning(
            "job %s: worker %s lost; requeued for attempt %d", row.id, row.worker_id, row.attempts + 1
        )
        result.requeued.append(str(row.id))  # back in the table: the dispatcher places it again


def cancel_stranded_requests(db: Database, result: ReapResult) -> None:
    """Cancel queued jobs that carry a cancel request (a cancel that raced a requeue)."""
    with db.session() as session:
        stranded = list(
            session.scalars(
                select(Job.id).where(Job.status == JobStatus.QUEUED, Job.cancel_requested_at.is_not(None))
            )
        )
    for job_id in stranded:
        try:
            with db.session() as session:
                mark_canceled(
                    session,
                    job_id,
                    from_statuses=frozenset({JobStatus.QUEUED}),
                    detail="canceled while requeued",
                )
        except InvalidTransition:
            continue
        result.canceled.append(str(job_id))


def recover_dispatched(
    db: Database,
    send: Send,
    pending: PendingLookup | None,
    online: Online,
    *,
    resend_after_seconds: float,
    result: ReapResult,
) -> None:
    """Jobs handed to a group whose message never went out are sent again; those whose message is
    gone, or whose group's worker is gone, are handed back to the dispatcher."""
    cutoff = utcnow() - timedelta(seconds=resend_after_seconds)
    with db.session() as session:
        rows = (
            session.connection()
            .execute(
                select(
                    Job.id,
                    Job.priority,
                    Job.enqueued_at,
                    Job.dispatched_to,
                    Job.dispatch_decision,
                    Job.trace_context,
                ).where(
                    Job.status == JobStatus.QUEUED,
                    Job.dispatched_to.is_not(None),
                    or_(Job.enqueued_at.is_(None), Job.enqueued_at < cutoff),
                )
            )
            .all()
        )
    if not rows:
        return
    alive = online()
    back = [r for r in rows if r.dispatched_to not in alive]
    rows = [r for r in rows if r.dispatched_to in alive]
    live: set[str] | None = set()
    if pending is not None and any(r.enqueued_at is not None for r in rows):
        try:
            live = pending({group_queue(r.dispatched_to) for r in rows})
        except Exception as exc:  # noqa: BLE001 - broker unreadable: only send what was never sent
            log.warning("could not inspect the broker (%s); sending only never-sent jobs", exc)
            live = None
    outbox = _Outbox(db, send, result)
    for row in rows:
        if row.enqueued_at is None:
            outbox.send(
                JobMessage(
                    job_id=row.id,
                    group=row.dispatched_to,
                    priority=row.priority,
                    decision=DispatchDecision.from_dict(row.dispatch_decision),
                    trace=traceparent(row.trace_context),
                )
            )
        elif live is not None and str(row.id) not in live:
            back.append(row)
    for row in back:
        if hand_back(db, row.id, row.dispatched_to):
            log.warning(
                "job %s: its message to %s is gone; handed back to the dispatcher", row.id, row.dispatched_to
            )
            result.handed_back.append(str(row.id))


def hand_back(db: Database, job_id: uuid.UUID, group: str) -> bool:
    """Take a queued job back from ``group`` (the dispatcher places it again)."""
    with db.session() as session:
        placed = (Job.id == job_id, Job.status == JobStatus.QUEUED, Job.dispatched_to == group)
        return update_one(session, Job, *placed, dispatched_to=None, enqueued_at=None, dispatch_decision=None)


def hand_back_all(db: Database, group: str) -> list[uuid.UUID]:
    """Take back every queued job handed to ``group`` (its worker is stopping, or refused one); the
    dispatcher places them again. Returns the ids it moved."""
    with db.session() as session:
        ids = list(
            session.scalars(select(Job.id).where(Job.status == JobStatus.QUEUED, Job.dispatched_to == group))
        )
    return [job_id for job_id in ids if hand_back(db, job_id, group)]


class _Outbox:
    """Sends one pass's messages; after the first failure it stops trying until the next pass."""

    def __init__(self, db: Database, send: Send, result: ReapResult) -> None:
        self.db = db
        self._send = send
        self.result = result
        self.broker_away = False

    def send(self, message: JobMessage) -> None:
        """Send, and remember when; a job left unsent keeps its old ``enqueued_at``."""
        job_id = message.job_id
        if self.broker_away:
            self.result.unsent.append(str(job_id))
            return
        try:
            self._send(message)
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            log.warning("job %s: could not send its queue message (%s); will retry", job_id, exc)
            self.broker_away = True
            self.result.unsent.append(str(job_id))
            return
        with self.db.session() as session:
            mark_enqueued(session, job_id)
        self.result.resent.append(str(job_id))


def reap(
    db: Database,
    send: Send,
    pending: PendingLookup | None,
    online: Online,
    *,
    resend_after_seconds: float,
    cards_of: CardsOf = lambda _model: 1,
    half_life_s: float = 3600.0,
) -> ReapResult:
    """One reaper pass: the database moves first (they need no broker), then the messages."""
    result = ReapResult()
    reap_expired_leases(db, result, cards_of=cards_of, half_life_s=half_life_s)
    cancel_stranded_requests(db, result)
    recover_dispatched(db, send, pending, online, resend_after_seconds=resend_after_seconds, result=result)
    return result
