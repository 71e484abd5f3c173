"""The reaper: no accepted job is ever lost.

1. A running job whose lease expired (its worker died or hung) is requeued for another attempt,
   failed with ``worker_lost`` once its attempts are used up, or canceled if a cancel was pending.
   This touches only the database, so it happens while the broker is away too.
2. A queued job whose message is no longer in the broker (Redis restarted empty, a send failed,
   the job was just requeued, a worker died between taking it and claiming it) is sent again.
   Duplicates are harmless: the claim is a compare-and-swap. When one send fails the broker is
   taken to be away and the rest of the pass sends nothing (each send could wait out a connect
   timeout); the next pass tries again, so publishing catches up as soon as the broker is back.

Every move goes through the transition functions, so two reapers running at once cannot
double-move a job. It runs on a thread in every worker and as ``jobservice reap``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import or_, select

from jobservice.catalog import queue_for
from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.jobs.leases import mark_enqueued
from jobservice.jobs.transitions import (
    InvalidTransition,
    Owner,
    mark_canceled,
    mark_failed,
    requeue_job,
)

log = logging.getLogger(__name__)

Sender = Callable[[uuid.UUID, str, int], None]  # (job_id, model, priority)
PendingLookup = Callable[[set[str]], set[str]]  # queues -> job ids with a live message


@dataclass
class ReapResult:
    """What one pass did."""

    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    canceled: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)  # left for the next pass: the broker is away

    @property
    def changed(self) -> bool:
        """Whether the pass did anything."""
        return bool(self.requeued or self.failed or self.canceled or self.resent or self.unsent)


def reap_expired_leases(db: Database, result: ReapResult) -> None:
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
                ).where(Job.status == JobStatus.RUNNING, Job.lease_expires_at < now)
            )
        )
    for row in expired:
        owner = Owner(row.worker_id or "", row.attempts)
        try:
            with db.session() as session:
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
        result.requeued.append(str(row.id))  # enqueued_at is now None: the resend pass sends it


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


def resend_lost_messages(
    db: Database,
    send: Sender,
    pending: PendingLookup | None,
    *,
    resend_after_seconds: float,
    result: ReapResult,
) -> None:
    """Send again the queued jobs that have no message in the broker (never-sent ones first)."""
    cutoff = utcnow() - timedelta(seconds=resend_after_seconds)
    with db.session() as session:
        # Every queued job is read on every pass (a nightly batch: 10,000 rows): plain rows through
        # the session's connection (no ORM loading) and no ORDER BY; only the few that need a
        # message are put in sending order, below (scripts/bench_scale.py).
        rows = (
            session.connection()
            .execute(
                select(Job.id, Job.model, Job.priority, Job.enqueued_at, Job.created_at).where(
                    Job.status == JobStatus.QUEUED,
                    Job.cancel_requested_at.is_(None),
                    or_(Job.enqueued_at.is_(None), Job.enqueued_at < cutoff),
                )
            )
            .all()
        )
    if not rows:
        return
    live: set[str] = set()
    if pending is not None and any(r.enqueued_at is not None for r in rows):
        try:
            live = pending({queue_for(r.model) for r in rows})
        except Exception as exc:  # noqa: BLE001 - broker unreadable: only send what was never sent
            log.warning("could not inspect the broker (%s); sending only never-sent jobs", exc)
            rows = [r for r in rows if r.enqueued_at is None]
    # A never-sent job is sent whatever the broker holds: a message of it still there is an earlier
    # attempt's, left unacknowledged by a worker that died running it (requeued above), which Redis
    # gives back only after its visibility timeout, hours away. Duplicates are harmless.
    lost = [r for r in rows if r.enqueued_at is None or str(r.id) not in live]
    lost.sort(key=lambda r: (r.enqueued_at is not None, r.priority, r.created_at))  # never-sent first
    outbox = _Outbox(db, send, result)
    for row in lost:
        if row.enqueued_at is not None and not outbox.broker_away:
            log.warning("job %s: its queue message is gone (broker restarted?); sending it again", row.id)
        outbox.send(row.id, row.model, row.priority)


class _Outbox:
    """Sends one pass's messages; after the first failure it stops trying until the next pass."""

    def __init__(self, db: Database, send: Sender, result: ReapResult) -> None:
        self.db = db
        self._send = send
        self.result = result
        self.broker_away = False

    def send(self, job_id: uuid.UUID, model: str, priority: int) -> None:
        """Send, and remember when; a job left unsent keeps its old ``enqueued_at``."""
        if self.broker_away:
            self.result.unsent.append(str(job_id))
            return
        try:
            self._send(job_id, model, priority)
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            log.warning("job %s: could not send its queue message (%s); will retry", job_id, exc)
            self.broker_away = True
            self.result.unsent.append(str(job_id))
            return
        with self.db.session() as session:
            mark_enqueued(session, job_id)
        self.result.resent.append(str(job_id))


def reap(
    db: Database, send: Sender, pending: PendingLookup | None, *, resend_after_seconds: float
) -> ReapResult:
    """One reaper pass: the database moves first (they need no broker), then the messages."""
    result = ReapResult()
    reap_expired_leases(db, result)
    cancel_stranded_requests(db, result)
    resend_lost_messages(db, send, pending, resend_after_seconds=resend_after_seconds, result=result)
    return result
