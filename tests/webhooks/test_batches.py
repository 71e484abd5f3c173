"""A batch spec's webhook: checked like a job's, and batch.start / batch.completed in the outbox."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from jobservice.db.tables import Batch, WebhookDelivery
from tests.nightly.helpers import spec, t2v_case

pytestmark = pytest.mark.integration


def _rows(services: Any, batch_id: str) -> list[WebhookDelivery]:
    with services.db.session() as session:
        return list(
            session.scalars(
                select(WebhookDelivery)
                .where(WebhookDelivery.subject == f"batch:{batch_id}")
                .order_by(WebhookDelivery.id)
            )
        )


def test_a_batch_with_a_webhook_writes_start_and_completed(bclient: Any, bservices: Any) -> None:
    body = spec(
        t2v_case(repeat=1),
        webhook="https://hooks.example.com/b",
        webhook_events_filter=["start", "completed"],
    )
    response = bclient.post("/batches", json={"spec": body})
    assert response.status_code in (200, 202), response.get_data(as_text=True)
    batch_id = response.get_json()["id"]
    with bservices.db.session() as session:
        batch = session.get(Batch, uuid.UUID(batch_id))
        assert batch is not None and batch.webhook_url == "https://hooks.example.com/b"
    assert [r.event_type for r in _rows(bservices, batch_id)] == ["batch.start"]
    assert bclient.post(f"/batches/{batch_id}/cancel").status_code in (200, 202)
    rows = _rows(bservices, batch_id)
    assert [r.event_type for r in rows] == ["batch.start", "batch.completed"]
    done = json.loads(rows[1].payload)
    assert done["type"] == "batch.completed" and done["data"]["status"] == "canceled"
    assert done["data"]["id"] == batch_id and rows[1].batch_id is not None and rows[1].job_id is None


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"webhook": "http://hooks.example.com/b"}, "https"),
        ({"webhook": "https://192.168.1.1/b"}, "private"),
        ({"webhook": "https://hooks.example.com/b", "webhook_events_filter": "ended"}, "ended"),
    ],
)
def test_bad_batch_webhooks_are_refused(bclient: Any, extra: dict[str, Any], says: str) -> None:
    response = bclient.post("/batches", json={"spec": spec(t2v_case(repeat=1), **extra)})
    assert response.status_code == 422, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == "invalid_spec" and says in error["message"], error
