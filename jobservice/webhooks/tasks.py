"""The delivery task and the beat's sweep, registered on the ``jobservice beat`` Celery app.

``jobservice.webhooks.sweep`` runs every ``webhook_sweep_seconds``: it holds each subject's due
head row for ``webhook_claim_seconds`` and sends ``jobservice.deliver_webhook(id, attempts)`` on
the ``jobservice.webhooks`` queue. The task claims the attempt, POSTs, and records the outcome.
A task lost with its process (kill -9 mid-delivery) leaves a claim that expires; the next sweep
sends the row again. Both tasks use acks_late; a duplicate message finds its attempt taken.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.schedules import schedule
from sqlalchemy import select

from jobservice import tracing
from jobservice.db.engine import Database
from jobservice.db.tables import Job, WebhookDelivery
from jobservice.settings import Settings
from jobservice.webhooks import outbox
from jobservice.webhooks.deliver import Outcome, post
from jobservice.webhooks.signing import webhook_headers
from jobservice.webhooks.tenant_secrets import signing_secrets

log = logging.getLogger(__name__)

WEBHOOK_QUEUE = "jobservice.webhooks"
DELIVER_TASK = "jobservice.deliver_webhook"
SWEEP_TASK = "jobservice.webhooks.sweep"


def policy_of(settings: Settings) -> outbox.RetryPolicy:
    """The retry schedule the settings ask for."""
    return outbox.RetryPolicy(
        base_seconds=settings.webhook_retry_base_seconds,
        max_seconds=settings.webhook_retry_max_seconds,
        horizon_seconds=settings.webhook_retry_horizon_seconds,
    )


def deliver_one(db: Database, settings: Settings, delivery_id: int, attempts: int | None = None) -> str:
    """Make one attempt at a row (``attempts``: how many the sender saw made); returns its status."""
    claim_for = settings.webhook_claim_seconds
    with db.session() as session:
        if attempts is None:
            row = session.get(WebhookDelivery, delivery_id)
            attempts = row.attempts if row else 0
        claimed = outbox.claim(session, delivery_id, attempts=attempts, seconds=claim_for)
        if claimed is None:
            return "skipped"
        secrets = signing_secrets(session, claimed.tenant)
        url, body, message_id = claimed.url, claimed.payload, claimed.message_id
        # A job's events belong to the trace that submitted it (jobservice.tracing).
        job_trace = (
            session.scalar(select(Job.trace_context).where(Job.id == claimed.job_id))
            if claimed.job_id
            else None
        )
    headers = webhook_headers(secrets, message_id=message_id, timestamp=int(time.time()), body=body)
    try:
        with tracing.continued(
            job_trace,
            "webhook.deliver",
            **{"jobservice.webhook_id": message_id, "jobservice.event": claimed.event_type},
        ):
            outcome = post(
                url,
                body=body.encode(),
                headers=headers,
                allowed=settings.webhook_allowed_hosts,
                read_timeout=settings.webhook_timeout_seconds,
            )
    except Exception as exc:  # noqa: BLE001 - a bug must cost an attempt, not loop on an expiring claim
        log.exception("webhook %s: delivery crashed", message_id)
        outcome = Outcome(delivered=False, retry=True, error=f"{type(exc).__name__}: {exc}"[:500])
    with db.session() as session:
        status = outbox.record(
            session, delivery_id, attempt=attempts + 1, outcome=outcome, policy=policy_of(settings)
        )
    log.info(
        "webhook %s attempt %d: %s (%s)",
        message_id,
        attempts + 1,
        status,
        outcome.status_code or outcome.error,
    )
    return status


def sweep(db: Database, settings: Settings, app: Celery) -> int:
    """Send a delivery task for every due head row; returns how many were sent."""
    sent = 0
    with db.session() as session:
        due = outbox.due_heads(session)
    for delivery_id, attempts in due:
        with db.session() as session:
            if not outbox.hold(
                session, delivery_id, attempts=attempts, seconds=settings.webhook_claim_seconds
            ):
                continue
        try:
            app.send_task(DELIVER_TASK, args=[delivery_id, attempts], queue=WEBHOOK_QUEUE)
            sent += 1
        except Exception:  # noqa: BLE001 - the broker is away: the claim expires, a later sweep resends
            log.exception("webhook delivery %s: task not sent", delivery_id)
    return sent


def beat_entries(settings: Settings) -> dict[str, dict[str, Any]]:
    """The beat schedule entry of the sweep."""
    every = settings.webhook_sweep_seconds
    return {
        "webhooks-sweep": {
            "task": SWEEP_TASK,
            "schedule": schedule(timedelta(seconds=every)),
            "options": {"queue": WEBHOOK_QUEUE, "expires": max(every, 1.0)},
        }
    }


def register(app: Celery, db: Database, settings: Settings) -> None:
    """Add the delivery task and the sweep to ``app`` (the ``jobservice beat`` app)."""

    @app.task(name=DELIVER_TASK, ignore_result=True, acks_late=True)
    def deliver_webhook(delivery_id: int, attempts: int | None = None) -> str:
        """Deliver one outbox row (one attempt)."""
        return deliver_one(db, settings, delivery_id, attempts)

    @app.task(name=SWEEP_TASK, ignore_result=True, acks_late=True)
    def sweep_webhooks() -> int:
        """Send the due deliveries."""
        return sweep(db, settings, app)
