"""``GET /jobs/<id>/webhooks``: a job's webhook deliveries and how each attempt went."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from jobservice.db.tables import WebhookDelivery
from jobservice.http.api.doc import RouteTable, answer, in_path, refused
from jobservice.http.api.native.jobs import load_job, services
from jobservice.webhooks.outbox import deliveries_of_job

bp = Blueprint("webhooks", __name__)
api = RouteTable(bp)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def delivery_view(row: WebhookDelivery) -> dict[str, Any]:
    """One outbox row as the API shows it (the body is the signed payload, not repeated here)."""
    return {
        "id": row.message_id,
        "object": "webhook_delivery",
        "type": row.event_type,
        "url": row.url,
        "status": row.status,
        "attempts": row.attempts,
        "created_at": _iso(row.created_at),
        "last_attempt_at": _iso(row.last_attempt_at),
        "next_attempt_at": _iso(row.next_attempt_at) if row.status == "pending" else None,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "delivered_at": _iso(row.delivered_at),
    }


@api.route(
    "get",
    "/jobs/{job_id}/webhooks",
    "The job's webhook deliveries: each event's status, attempts and last answer",
    parameters=(in_path("job_id"),),
    responses={"200": answer("A list of deliveries, oldest first."), "404": refused("No such job.")},
)
def job_webhooks(job_id: str) -> Response:
    """The job's webhook deliveries, oldest first (another tenant's job is a 404)."""
    job = load_job(job_id)
    with services().db.session() as session:
        rows = deliveries_of_job(session, job.id)
        data = [delivery_view(r) for r in rows]
    return jsonify({"object": "list", "webhook": job.webhook_url, "data": data})
