"""Submitting with a webhook, the outbox rows transitions write, and GET /jobs/<id>/webhooks."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from jobservice.jobs.transitions import Owner, claim_job, mark_failed, requeue_job
from jobservice.webhooks.outbox import deliveries_of_job
from jobservice.wiring import Services

T2V = {"task": "text2video", "prompt": "a red kite over the sea"}


def _error(response: Any, code: str) -> None:
    assert response.status_code == 422, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code and len(error["message"]) > 10


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"webhook": "http://example.com/h"}, "webhook_not_https"),
        ({"webhook": "https://10.0.0.1/h"}, "webhook_forbidden_address"),
        ({"webhook": "https://169.254.169.254/"}, "webhook_forbidden_address"),
        ({"webhook": "not a url"}, "invalid_webhook"),
        ({"webhook": ["https://example.com"]}, "invalid_webhook"),
        (
            {"webhook": "https://example.com/h", "webhook_events_filter": ["finished"]},
            "invalid_webhook_events_filter",
        ),
        ({"webhook_events_filter": "start"}, "invalid_webhook_events_filter"),
    ],
)
def test_bad_webhooks_are_refused(client: Any, fields: dict[str, Any], code: str) -> None:
    _error(client.post("/jobs", json={**T2V, **fields}), code)


def test_a_form_submission_takes_a_comma_list(client: Any) -> None:
    response = client.post(
        "/jobs", data={**T2V, "webhook": "https://example.com/h", "webhook_events_filter": "completed"}
    )
    assert response.status_code == 202, response.get_data(as_text=True)
    assert "webhook" not in response.get_json()["params"]


def test_transitions_write_start_once_and_completed(client: Any, services: Services) -> None:
    response = client.post("/jobs", json={**T2V, "webhook": "http://127.0.0.1:9/h"})  # allowed host
    assert response.status_code == 202, response.get_data(as_text=True)
    job_id = uuid.UUID(response.get_json()["id"])
    with services.db.session() as session:
        claim_job(session, job_id, worker_id="w", lease_seconds=30)
    with services.db.session() as session:  # the worker was lost; the second attempt sends no start
        requeue_job(session, job_id, owner=Owner("w", 1), reason="lost")
    with services.db.session() as session:
        claim_job(session, job_id, worker_id="w2", lease_seconds=30)
    with services.db.session() as session:
        mark_failed(session, job_id, code="boom", message="it broke", owner=Owner("w2", 2))
    with services.db.session() as session:
        rows = deliveries_of_job(session, job_id)
        bodies = [json.loads(r.payload) for r in rows]
    assert [r.event_type for r in rows] == ["job.start", "job.completed"]
    assert [b["type"] for b in bodies] == ["job.start", "job.completed"]
    assert bodies[0]["data"]["status"] == "running" and bodies[1]["data"]["status"] == "failed"
    assert bodies[1]["data"]["error"]["code"] == "boom" and bodies[1]["data"]["id"] == str(job_id)
    listed = client.get(f"/jobs/{job_id}/webhooks").get_json()
    assert listed["webhook"] == "http://127.0.0.1:9/h"
    assert [(d["type"], d["status"], d["attempts"]) for d in listed["data"]] == [
        ("job.start", "pending", 0),
        ("job.completed", "pending", 0),
    ]
    assert all(d["id"].startswith("msg_") for d in listed["data"])


def test_the_filter_and_jobs_without_webhooks(client: Any, services: Services) -> None:
    only_done = client.post(
        "/jobs", json={**T2V, "webhook": "https://example.com/h", "webhook_events_filter": "completed"}
    )
    plain = client.post("/jobs", json=T2V)
    for response in (only_done, plain):
        job_id = uuid.UUID(response.get_json()["id"])
        with services.db.session() as session:
            claim_job(session, job_id, worker_id="w", lease_seconds=30)
    with services.db.session() as session:
        assert deliveries_of_job(session, uuid.UUID(only_done.get_json()["id"])) == []  # no start wanted
        assert deliveries_of_job(session, uuid.UUID(plain.get_json()["id"])) == []
    assert client.get(f"/jobs/{plain.get_json()['id']}/webhooks").get_json()["data"] == []
    missing = client.get(f"/jobs/{uuid.uuid4()}/webhooks")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "job_not_found"
