"""A set of jobs is a job group or a nightly run (a job group with a spec): the same webhook events,
cancel and job pages for both kinds, each tested once over both (issue 37)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from jobservice.db.tables import Job, WebhookDelivery
from tests.nightly.helpers import spec, t2v_case

pytestmark = pytest.mark.integration

HOOK = "https://hooks.example.com/sets"
KINDS = ("group", "batch")
ROUTES = {"group": "/job-groups", "batch": "/batches"}


def create_set(client: Any, kind: str, *, jobs: int, webhook: bool = False) -> str:
    """A set of ``jobs`` text2video jobs of ``kind``, with a webhook for both events or none."""
    if kind == "group":
        manifest = "model,prompt,width,height,num_frames,seed\n" + "".join(
            f"reference-t2v,clip {n},64,64,8,{n}\n" for n in range(jobs)
        )
        query = {"webhook": HOOK, "webhook_events_filter": "start,completed"} if webhook else {}
        response = client.post(
            "/job-groups", data=manifest, headers={"Content-Type": "text/csv"}, query_string=query
        )
    else:
        hook: dict[str, Any] = (
            {"webhook": HOOK, "webhook_events_filter": ["start", "completed"]} if webhook else {}
        )
        response = client.post("/batches", json={"spec": spec(t2v_case(repeat=jobs), **hook)})
    assert response.status_code == 202, response.get_data(as_text=True)
    return str(response.get_json()["id"])


def deliveries(services: Any, subject: str) -> list[WebhookDelivery]:
    with services.db.session() as session:
        return list(
            session.scalars(
                select(WebhookDelivery).where(WebhookDelivery.subject == subject).order_by(WebhookDelivery.id)
            )
        )


def job_statuses(services: Any, set_id: str) -> list[str]:
    with services.db.session() as session:
        return [str(s) for s in session.scalars(select(Job.status).where(Job.group_id == uuid.UUID(set_id)))]


@pytest.mark.parametrize("kind", KINDS)
def test_a_set_with_a_webhook_says_started_and_completed(bclient: Any, bservices: Any, kind: str) -> None:
    set_id = create_set(bclient, kind, jobs=2, webhook=True)
    assert [r.event_type for r in deliveries(bservices, f"group:{set_id}")] == ["group.started"]
    assert bclient.post(f"{ROUTES[kind]}/{set_id}/cancel").status_code in (200, 202)
    rows = deliveries(bservices, f"group:{set_id}")
    assert [r.event_type for r in rows] == ["group.started", "group.completed"]
    done = json.loads(rows[1].payload)
    assert done["type"] == "group.completed" and done["data"]["id"] == set_id
    assert done["data"]["kind"] == kind and done["data"]["counts"] == {"canceled": 2}
    aliases = [r.event_type for r in deliveries(bservices, f"batch:{set_id}")]
    assert aliases == (["batch.start", "batch.completed"] if kind == "batch" else [])


@pytest.mark.parametrize("kind", KINDS)
def test_a_set_without_a_webhook_writes_no_event(bclient: Any, bservices: Any, kind: str) -> None:
    set_id = create_set(bclient, kind, jobs=1)
    bclient.post(f"{ROUTES[kind]}/{set_id}/cancel")
    assert deliveries(bservices, f"group:{set_id}") == [] and deliveries(bservices, f"batch:{set_id}") == []


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_stops_every_job_of_a_set_once(bclient: Any, bservices: Any, kind: str) -> None:
    set_id = create_set(bclient, kind, jobs=3)
    assert job_statuses(bservices, set_id) == ["queued"] * 3
    canceled = bclient.post(f"{ROUTES[kind]}/{set_id}/cancel")
    assert canceled.status_code == 202 and canceled.get_json()["status"] == "canceled"
    assert job_statuses(bservices, set_id) == ["canceled"] * 3
    again = bclient.post(f"{ROUTES[kind]}/{set_id}/cancel")
    assert again.status_code == 409, again.get_data(as_text=True)


@pytest.mark.parametrize("kind", KINDS)
def test_a_sets_jobs_come_in_pages_oldest_first(bclient: Any, bservices: Any, kind: str) -> None:
    set_id = create_set(bclient, kind, jobs=5)
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = bclient.get(f"{ROUTES[kind]}/{set_id}/jobs", query_string=query).get_json()
        assert len(page["jobs"]) <= 2
        seen += [job["id"] for job in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    with bservices.db.session() as session:
        made = [
            str(j)
            for j in session.scalars(
                select(Job.id).where(Job.group_id == uuid.UUID(set_id)).order_by(Job.created_at)
            )
        ]
    assert seen == made and len(seen) == 5
