"""The outbox (``webhook_deliveries``): rows written with the state change, claimed, retried.

A row is written by ``enqueue`` inside the transaction that changes the job's (or batch's)
status, so an event exists exactly when its change was committed. The beat's sweep
(``due_heads``) finds, per subject, the oldest pending row once it is due and not claimed; a
delivery ``claim``\\ s it (a compare-and-swap on ``attempts``, so a redelivered task message does
not send the same attempt twice) and ``record``\\ s the outcome: delivered, final failure, or the
next attempt's time. A claim that ends without a result (the process was killed mid-POST) expires
after ``claim_seconds`` and the row is due again: retried, never lost.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from jobservice.db.rows import update_one
from jobservice.db.tables import WebhookDelivery, utcnow
from jobservice.webhooks.deliver import Outcome

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
# Retry delays in units of the base delay: with the default 5 s base, 5 s, 30 s, 2 min, 10 min,
# 1 h, then every 3 h until the horizon (26 h by default).
SCHEDULE = (1, 6, 24, 120, 720, 2160)
JITTER = 0.2


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait between attempts and when to give up."""

    base_seconds: float = 5.0
    max_seconds: float = 3 * 3600.0
    horizon_seconds: float = 26 * 3600.0


def retry_delay(attempts: int, policy: RetryPolicy, *, rng: random.Random | None = None) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones (jittered by +-20 %)."""
    step = SCHEDULE[min(max(attempts, 1), len(SCHEDULE)) - 1]
    delay = min(policy.base_seconds * step, policy.max_seconds)
    return delay * (1 + JITTER * (2 * (rng or random).random() - 1))


def wants(events: str | None, kind: str) -> bool:
    """Whether a comma list of event kinds (None: all) includes ``kind`` (``start``/``completed``)."""
    return events is None or kind in events.split(",")


def enqueue(
    session: Session,
    *,
    subject: str,
    tenant: str,
    event_type: str,
    url: str,
    data: dict[str, Any],
    job_id: uuid.UUID | None = None,
    batch_id: uuid.UUID | None = None,
) -> WebhookDelivery:
    """Add one event to the outbox in ``session``'s transaction; the body is fixed now."""
    now = utcnow()
    body = {"type": event_type, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data}
    row = WebhookDelivery(
        message_id=f"msg_{uuid.uuid4().hex}",
        subject=subject,
        job_id=job_id,
        batch_id=batch_id,
        tenant=tenant,
        event_type=event_type,
        url=url,
        payload=json.dumps(body, separators=(",", ":"), default=str),
        status=PENDING,
        attempts=0,
        created_at=now,
        next_attempt_at=now,
    )
    session.add(row)
    return row


def has_event(session: Session, subject: str, event_type: str) -> bool:
    """Whether ``subject`` already has a row of ``event_type`` (``start`` is sent once)."""
    found = session.scalar(
        select(WebhookDelivery.id)
        .where(WebhookDelivery.subject == subject, WebhookDelivery.event_type == event_type)
        .limit(1)
    )
    return found is not None


def due_heads(session: Session, *, now: datetime | None = None, limit: int = 100) -> list[tuple[int, int]]:
    """(id, attempts) of each subject's oldest pending row that is due and not claimed."""
    now = now or utcnow()
    heads = (
        select(func.min(WebhookDelivery.id))
        .where(WebhookDelivery.status == PENDING)
        .group_by(WebhookDelivery.subject)
        .scalar_subquery()
    )
    rows = session.execute(
        select(WebhookDelivery.id, WebhookDelivery.attempts)
        .where(
            WebhookDelivery.id.in_(heads),
            WebhookDelivery.next_attempt_at <= now,
            or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now),
        )
        .order_by(WebhookDelivery.id)
        .limit(limit)
    )
    return [(int(r[0]), int(r[1])) for r in rows]


def _take_turn(session: Session, delivery_id: int, *, after: int, also: Any = None, **values: Any) -> bool:
    """Set ``values`` on the row if it is still pending after ``after`` attempts (and ``also``
    holds): True when this call did, False when another sweep or task got there first."""
    conditions = [
        WebhookDelivery.id == delivery_id,
        WebhookDelivery.status == PENDING,
        WebhookDelivery.attempts == after,
    ]
    if also is not None:
        conditions.append(also)
    return update_one(session, WebhookDelivery, *conditions, **values)


def hold(session: Session, delivery_id: int, *, attempts: int, seconds: float) -> bool:
    """Mark a due row as handed to a task for ``seconds`` (the sweep, before sending the task)."""
    now = utcnow()
    return _take_turn(
        session,
        delivery_id,
        after=attempts,
        also=or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now),
        claimed_until=now + timedelta(seconds=seconds),
    )


def _is_head(session: Session, row: WebhookDelivery) -> bool:
    older = session.scalar(
        select(WebhookDelivery.id)
        .where(
            WebhookDelivery.subject == row.subject,
            WebhookDelivery.status == PENDING,
            WebhookDelivery.id < row.id,
        )
        .limit(1)
    )
    return older is None


def claim(session: Session, delivery_id: int, *, attempts: int, seconds: float) -> WebhookDelivery | None:
    """Start attempt ``attempts + 1`` of a row; None when it is not pending, not its subject's
    oldest, or that attempt was already started (a duplicate task message)."""
    row = session.get(WebhookDelivery, delivery_id, populate_existing=True)
    if row is None or row.status != PENDING or not _is_head(session, row):
        return None
    now = utcnow()
    started = _take_turn(
        session,
        delivery_id,
        after=attempts,
        attempts=attempts + 1,
        last_attempt_at=now,
        claimed_until=now + timedelta(seconds=seconds),
    )
    if not started:
        return None
    return session.get(WebhookDelivery, delivery_id, populate_existing=True)


def record(session: Session, delivery_id: int, *, attempt: int, outcome: Outcome, policy: RetryPolicy) -> str:
    """Store how attempt ``attempt`` went; returns the row's new status."""
    row = session.get(WebhookDelivery, delivery_id, populate_existing=True)
    if row is None or row.status != PENDING or row.attempts != attempt:
        return row.status if row else FAILED  # a later attempt took over; it records its own result
    now = utcnow()
    row.last_status_code = outcome.status_code
    row.last_error = outcome.error
    row.claimed_until = None
    if outcome.delivered:
        row.status, row.delivered_at, row.next_attempt_at = DELIVERED, now, None
    elif not outcome.retry or (now - row.created_at).total_seconds() >= policy.horizon_seconds:
        row.status, row.next_attempt_at = FAILED, None
    else:
        row.next_attempt_at = now + timedelta(seconds=retry_delay(attempt, policy))
    session.flush()
    return row.status


def deliveries_of_job(session: Session, job_id: uuid.UUID) -> list[WebhookDelivery]:
    """A job's outbox rows, oldest first."""
    return list(
        session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.job_id == job_id).order_by(WebhookDelivery.id)
        )
    )
