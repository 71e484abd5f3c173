"""``DELETE /jobs/<id>``: tenant-checked, cancels a queued job, refuses a running one until it stopped,
deletes the files, and the job is gone from reads and lists (404 ``job_deleted``); migration 0019."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic import command

from jobservice.db.migrate import alembic_config, upgrade
from jobservice.db.tables import JobStatus
from jobservice.jobs.queries import get_job
from jobservice.jobs.transitions import claim_job, mark_canceled
from tests.openai.conftest import bearer, finish
from tests.openai.conftest import keyed_client as keyed_client  # noqa: PLC0414 - a fixture

pytestmark = pytest.mark.integration
T2V = {"task": "text2video", "prompt": "a red kite"}


def refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code and len(error["message"]) > 10


def test_delete_cancels_a_queued_job_deletes_its_files_and_it_is_gone(
    client: Any, services: Any, tmp_path: Path
) -> None:
    queued = client.post("/jobs", json=T2V).get_json()["id"]
    kept = client.post("/jobs", json=T2V).get_json()["id"]
    deleted = client.delete(f"/jobs/{queued}")
    assert deleted.status_code == 200, deleted.get_data(as_text=True)
    body = deleted.get_json()
    assert body["id"] == queued and body["object"] == "job.deleted" and body["deleted"] is True
    with services.db.session() as session:
        job = get_job(session, uuid.UUID(queued))
        assert job is not None and job.status == JobStatus.CANCELED
        assert job.deleted_at is not None and job.expired_at is not None
    for path in ("", "/events", "/video", "/report", "/log"):
        refused(client.get(f"/jobs/{queued}{path}"), 404, "job_deleted")
    refused(client.post(f"/jobs/{queued}/cancel"), 404, "job_deleted")
    refused(client.delete(f"/jobs/{queued}"), 404, "job_deleted")  # a second delete: gone
    assert [j["id"] for j in client.get("/jobs").get_json()["jobs"]] == [kept]
    assert [v["id"] for v in client.get("/v1/videos").get_json()["data"]] == [kept]

    done = client.post("/jobs", json=T2V).get_json()["id"]
    video = tmp_path / "out.mp4"
    video.write_bytes(b"not decoded here: only stored and deleted")
    finish(services, done, video)
    assert list(services.store.list(f"jobs/{done}/"))
    assert client.get(f"/jobs/{done}").status_code == 200  # the fast path keeps this answer...
    assert client.delete(f"/jobs/{done}").status_code == 200
    assert list(services.store.list(f"jobs/{done}/")) == []
    refused(client.get(f"/jobs/{done}"), 404, "job_deleted")  # ...and never gives it again
    refused(client.get(f"/v1/videos/{done}"), 404, "video_not_found")  # one deletion, both APIs
    refused(client.get(f"/jobs/{uuid.uuid4()}"), 404, "job_not_found")


def test_the_idempotency_key_of_a_deleted_job_is_refused_not_replayed(client: Any) -> None:
    key = {"Idempotency-Key": "nightly-7"}
    job_id = client.post("/jobs", json=T2V, headers=key).get_json()["id"]
    assert client.delete(f"/jobs/{job_id}").status_code == 200
    refused(client.post("/jobs", json=T2V, headers=key), 409, "idempotency_key_deleted")
    assert client.post("/jobs", json=T2V, headers={"Idempotency-Key": "nightly-8"}).status_code == 202


def test_a_running_job_is_asked_to_stop_and_deleted_once_it_ended(client: Any, services: Any) -> None:
    running = client.post("/jobs", json=T2V).get_json()["id"]
    with services.db.session() as session:
        claim_job(session, uuid.UUID(running), worker_id="w1@test", lease_seconds=30)
    refused(client.delete(f"/jobs/{running}"), 409, "cancel_pending")
    shown = client.get(f"/jobs/{running}").get_json()
    assert shown["status"] == "running" and shown["cancel_requested"] is True
    with services.db.session() as session:
        mark_canceled(session, uuid.UUID(running), from_statuses=frozenset({JobStatus.RUNNING}))
    assert client.delete(f"/jobs/{running}").status_code == 200
    refused(client.get(f"/jobs/{running}"), 404, "job_deleted")


def test_another_tenants_job_is_not_found_and_not_deleted(
    keyed_client: tuple[Any, dict[str, str]],
) -> None:
    client, keys = keyed_client
    alice, bob = bearer(keys["alice"]), bearer(keys["bob"])
    job_id = client.post("/jobs", json=T2V, headers=alice).get_json()["id"]
    refused(client.delete(f"/jobs/{job_id}", headers=bob), 404, "job_not_found")
    assert client.get(f"/jobs/{job_id}", headers=alice).status_code == 200
    assert client.delete(f"/jobs/{job_id}", headers=alice).status_code == 200
    refused(client.get(f"/jobs/{job_id}", headers=bob), 404, "job_not_found")  # says nothing to bob
    refused(client.get(f"/jobs/{job_id}", headers=alice), 404, "job_deleted")


OLD_DETAIL = "files deleted on request (DELETE /v1/videos)"


def _insert_job(conn: sqlite3.Connection, job_id: str, *, expired: str | None) -> None:
    conn.execute(
        "INSERT INTO jobs (id, task, model, params, source, priority, status, stage, progress, input_keys,"
        " input_meta, attempts, max_attempts, created_at, updated_at, timings, validation_summary,"
        " expired_at) VALUES (?, 'text2video', 'm', '{}', 'openai', 0, 'canceled', 'queued', 0, '{}', '{}',"
        " 0, 3, '2026-12-01 00:00:00.000000', '2026-12-01 00:00:00.000000', '{}', '{}', ?)",
        (job_id, expired),
    )


def test_migration_0019_keeps_the_videos_deleted_by_the_old_event_and_back(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    url = f"sqlite:///{path}"
    upgrade(url, "0018_batches_are_job_groups")
    gone, expired, live = (uuid.uuid4().hex for _ in range(3))
    with sqlite3.connect(path) as conn:
        _insert_job(conn, gone, expired="2026-12-02 10:00:00.000000")
        _insert_job(conn, expired, expired="2026-12-02 10:00:00.000000")  # by retention: not deleted
        _insert_job(conn, live, expired=None)
        conn.execute(
            "INSERT INTO job_events (job_id, at, attempt, detail)"
            " VALUES (?, '2026-12-02 10:00:01.000000', 0, ?)",
            (gone, OLD_DETAIL),
        )
    upgrade(url)
    with sqlite3.connect(path) as conn:
        marked = dict(conn.execute("SELECT id, deleted_at FROM jobs").fetchall())
        assert marked == {gone: "2026-12-02 10:00:01.000000", expired: None, live: None}
        conn.execute("UPDATE jobs SET deleted_at = expired_at WHERE id = ?", (expired,))  # deleted since
    command.downgrade(alembic_config(url), "0018_batches_are_job_groups")
    with sqlite3.connect(path) as conn:
        events = conn.execute("SELECT job_id FROM job_events WHERE detail = ?", (OLD_DETAIL,)).fetchall()
    assert sorted(events) == sorted([(gone,), (expired,)]), "the previous release still sees both deleted"
