"""Webhook events of a batch: ``batch.start`` when its jobs are all queued (once), and
``batch.completed`` when it finishes or is canceled (again after a resume, if it ends again).

Written to the outbox by ``jobservice.nightly.states`` in the transaction of the move; the
body's ``data`` is the batch's headline (``batch_summary``: the verdict, each case's verdict with its
primary metric's change and the change it cannot rule out, the episodes, what the verdict risks,
and the link that accepts the run as the new normal; ``GET /batches/<id>`` has the rest).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.db.tables import Batch
from jobservice.nightly.compare import false_alarm_sentence
from jobservice.webhooks.outbox import enqueue, has_event, wants


def on_batch_move(session: Session, batch_id: uuid.UUID, *, kind: str) -> None:
    """Add the batch's ``start`` or ``completed`` event, if it has a webhook that wants it."""
    hook = session.execute(
        select(Batch.webhook_url, Batch.webhook_events).where(Batch.id == batch_id)
    ).first()
    if hook is None or not hook.webhook_url or not wants(hook.webhook_events, kind):
        return
    subject = f"batch:{batch_id}"
    if kind == "start" and has_event(session, subject, "batch.start"):
        return  # resumed: it started before
    batch = session.get(Batch, batch_id, populate_existing=True)
    assert batch is not None
    enqueue(
        session,
        subject=subject,
        batch_id=batch_id,
        tenant=batch.tenant or "default",
        event_type=f"batch.{kind}",
        url=hook.webhook_url,
        data=batch_summary(batch),
    )


def batch_summary(batch: Batch) -> dict[str, Any]:
    """The batch's headline fields (``GET /batches/<id>`` has the cases and results)."""

    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    comparison = (batch.results or {}).get("comparison") or {}
    links = {"self": f"/batches/{batch.id}", "report": f"/batches/{batch.id}/report"}
    if batch.verdict:
        links["accept"] = f"/batches/{batch.id}/pin"  # POST: accept this run as the new normal
    return {
        "id": str(batch.id),
        "object": "batch",
        "name": batch.name,
        "status": batch.status,
        "verdict": batch.verdict,
        "total_jobs": batch.total_jobs,
        "error": batch.error,
        "tenant": batch.tenant,
        "created_at": iso(batch.created_at),
        "submitted_at": iso(batch.submitted_at),
        "finished_at": iso(batch.finished_at),
        "counts": {k: v for k, v in (comparison.get("counts") or {}).items() if v},
        "cases": [_case_headline(case) for case in comparison.get("cases") or []],
        "episodes": comparison.get("episodes") or [],
        "risk": false_alarm_sentence(comparison) if comparison else None,
        "links": links,
    }


def _case_headline(case: dict[str, Any]) -> dict[str, Any]:
    """A case's verdict, its primary metric's change and bound, and the first reason."""
    primary: dict[str, Any] = next((m for m in case.get("metrics") or [] if m.get("primary")), {})
    return {
        "name": case.get("case"),
        "verdict": case.get("verdict"),
        "primary": case.get("primary"),
        "change": primary.get("change"),
        "upper": primary.get("upper"),
        "reason": (case.get("reasons") or [None])[0],
    }
