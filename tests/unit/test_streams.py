"""Live events and ``Prefer: wait``: event text, resume tokens, the Prefer header, and the routes on
SQLite with the real watcher (no worker: jobs stay queued unless the test cancels them)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from jobservice.auth.keys import create_key
from jobservice.fleet import eta
from jobservice.http.api.native.prefer import MAX_WAIT_SECONDS, parse_prefer_wait, watcher_of
from jobservice.http.api.native.streams import format_event, job_event_name
from jobservice.http.app import create_app
from jobservice.jobs.presenters import job_view
from jobservice.jobs.queries import get_job
from jobservice.jobs.watch import (
    JobState,
    SetState,
    job_state_from_token,
    read_job_states,
    set_state_from_token,
)
from jobservice.settings import Settings
from jobservice.wiring import Services, build_services
from tests.conftest import make_settings
from tests.factories import copy_template, new_job, online_group


def parse_sse(text: str) -> list[dict[str, str]]:
    """The blocks of an event stream, each as its fields (comments under ``comment``)."""
    blocks = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in filter(None, block.split("\n")):
            name, _, value = line.partition(":")
            fields[name or "comment"] = value.removeprefix(" ")
        if fields:
            blocks.append(fields)
    return blocks


def test_an_event_is_id_event_and_one_line_of_json() -> None:
    data = {"prompt": "two\nlines\r\u2028\x85 é", "p": 0.5}
    text = format_event("progress", data, event_id="abc")
    assert text.endswith("\n\n")
    lines = text.rstrip("\n").splitlines()  # the widest idea of a line end
    assert lines[:2] == ["id: abc", "event: progress"]
    assert len(lines) == 3 and lines[2].startswith("data: ")
    assert json.loads(lines[2].removeprefix("data: ")) == data


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("", None),
        ("wait=5", 5),
        ("respond-async, wait=10", 10),
        ("WAIT = 7", 7),
        ('wait="3"', 3),
        ("wait=0", 0),
        ("wait=600", MAX_WAIT_SECONDS),
        ("wait=99999999999", None),
        ("wait=-1", None),
        ("wait=1.5", None),
        ("wait=abc", None),
        ("wait=²", None),
        ("wait", None),
        ("return=minimal", None),
        ("wait=5" + " " * 2000, None),
    ],
)
def test_prefer_wait_is_parsed_capped_or_ignored(header: str | None, expected: int | None) -> None:
    assert parse_prefer_wait(header) == expected


def test_resume_tokens_name_the_state_and_refuse_junk() -> None:
    state = JobState("running", "generating", 0.25, None, False, 1)
    assert job_state_from_token(state.to_token()) == state
    batch = SetState((0, 2, 1, 0, 0), 0.5, False, "running")
    assert set_state_from_token(batch.to_token()) == batch
    group = SetState((3, 0, 0, 0, 0), 0.0, True)
    assert set_state_from_token(group.to_token()) == group
    for junk in ("", "x", "%%%", "e30", "W10", "a" * 600, batch.to_token(), None):
        assert job_state_from_token(junk) is None, junk
    for junk in ("", "x", "W10", state.to_token(), None):
        assert set_state_from_token(junk) is None, junk


def test_a_change_is_named_by_its_most_important_field() -> None:
    queued = JobState("queued", "queued", 0.0, 2, False, 0)
    assert job_event_name(None, queued) == "status"
    assert job_event_name(queued, queued) is None
    assert job_event_name(queued, JobState("queued", "queued", 0.0, 1, False, 0)) == "queue_position"
    running = JobState("running", "fetching", 0.0, None, False, 1)
    assert job_event_name(queued, running) == "status"
    assert job_event_name(running, JobState("running", "generating", 0.1, None, False, 1)) == "stage"
    assert job_event_name(running, JobState("running", "fetching", 0.1, None, False, 1)) == "progress"
    assert job_event_name(running, JobState("running", "fetching", 0.0, None, True, 1)) == "status"


def test_the_watchers_states_agree_with_the_job_views(services: Services) -> None:
    """What a stream of many jobs watches (``read_job_states``) is what each job's view shows: the
    position and ETA from the forecast, a count only for a job submitted after it."""
    online_group(services.db, "g1", ["reference-t2v"])
    ids = [new_job(services.db, created_offset=i * 0.01) for i in range(3)]
    ids.append(new_job(services.db, priority=-1, created_offset=1.0))  # interactive before them
    ids.append(new_job(services.db, model="other-model"))  # no group may run it
    assert eta.refresh(services.db, services.catalog, services.settings, force=True)
    ids.append(new_job(services.db, created_offset=2.0))  # after the forecast: its tenant's what-if
    forecast = eta.latest(services)
    with services.db.session() as session:
        states = read_job_states(session, ids, forecast=forecast)
        for job_id in ids:
            job = get_job(session, job_id)
            assert job is not None
            view = job_view(job, forecast=forecast, behind=eta.behind_of(session, forecast, job))
            assert states[job_id].queue_position == view.queue_position
        assert read_job_states(session, [uuid.uuid4()]) == {}  # a missing row is left out
    assert [states[i].queue_position for i in ids] == [1, 2, 3, 0, None, 4]


@pytest.fixture
def quick(tmp_path: Path, clean_redis: str, migrated_sqlite: Path) -> Any:
    """An app whose streams keep alive every 0.2 s and close after 1 s, one at a time."""
    copy_template(migrated_sqlite, tmp_path / "var", "jobservice.db")
    settings = make_settings(
        tmp_path / "var",
        stream_heartbeat_seconds=0.2,
        stream_max_seconds=1.0,
        watch_interval_seconds=0.05,
        stream_limit=1,
    )
    svc = build_services(settings)
    app: Flask = create_app(services=svc)
    yield app.test_client(), svc
    svc.db.dispose()


def test_a_stream_sends_the_view_keeps_alive_and_closes(quick: Any) -> None:
    client, svc = quick
    job_id = new_job(svc.db)
    with client.get(f"/jobs/{job_id}/stream") as response:  # a server closes the body after sending it
        assert response.status_code == 200
        assert response.mimetype == "text/event-stream"
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["X-Accel-Buffering"] == "no"
        blocks = parse_sse(response.get_data(as_text=True))  # it ends after stream_max_seconds
    assert blocks[0] == {"retry": "1000"}
    assert blocks[1]["event"] == "status"
    view = json.loads(blocks[1]["data"])
    assert view["id"] == str(job_id) and view["status"] == "queued" and view["queue_position"] is None
    assert view == client.get(f"/jobs/{job_id}").get_json()
    assert {"comment": "keep-alive"} in blocks[2:]
    assert all("event" not in b for b in blocks[2:])  # no end: the job is still queued

    # Resuming with the last id sends nothing already known; a cancel is a status event, then end.
    with client.get(f"/jobs/{job_id}/stream", headers={"Last-Event-ID": blocks[1]["id"]}) as resumed:
        assert all("event" not in b for b in parse_sse(resumed.get_data(as_text=True)))
    assert client.post(f"/jobs/{job_id}/cancel").status_code == 202
    with client.get(f"/jobs/{job_id}/stream?last_event_id={blocks[1]['id']}") as response:
        ended = parse_sse(response.get_data(as_text=True))
    assert [b.get("event") for b in ended[1:]] == ["status", "end"]
    assert json.loads(ended[-1]["data"])["status"] == "canceled"


def test_streams_of_unknown_jobs_and_batches_are_json_404s(quick: Any) -> None:
    client, _ = quick
    for path in (f"/jobs/{uuid.uuid4()}/stream", "/jobs/nope/stream", f"/batches/{uuid.uuid4()}/stream"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.is_json and response.get_json()["error"]["code"].endswith("not_found")


def test_prefer_wait_holds_a_queued_job_and_applies_the_wait(quick: Any) -> None:
    client, svc = quick
    job_id = new_job(svc.db)
    started = time.monotonic()
    response = client.get(f"/jobs/{job_id}", headers={"Prefer": "wait=1"})
    assert time.monotonic() - started >= 0.9  # held until the wait passed: nothing ends it
    assert response.headers["Preference-Applied"] == "wait=1"
    assert response.get_json()["status"] == "queued"
    ignored = client.get(f"/jobs/{job_id}", headers={"Prefer": "wait=soon"})
    assert ignored.status_code == 200 and "Preference-Applied" not in ignored.headers
    client.post(f"/jobs/{job_id}/cancel")
    done = client.get(f"/jobs/{job_id}", headers={"Prefer": "wait=60"})
    assert done.headers["Preference-Applied"] == "wait=60"
    assert done.get_json()["status"] == "canceled"


def test_streams_past_the_limit_are_refused_until_one_closes(quick: Any) -> None:
    client, svc = quick
    job_id = new_job(svc.db)
    first = client.get(f"/jobs/{job_id}/stream", buffered=False)
    assert first.status_code == 200
    refused = client.get(f"/jobs/{job_id}/stream")
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
    assert refused.get_json()["error"]["code"] == "too_many_streams"
    not_held = client.get(f"/jobs/{job_id}", headers={"Prefer": "wait=5"})  # answered at once
    assert not_held.status_code == 200 and "Preference-Applied" not in not_held.headers
    body = first.iter_encoded()
    assert next(body).startswith(b"retry:") and next(body).startswith(b"id:")  # streaming: watched
    assert watcher_of(client.application).watched == 1
    first.close()  # the server closes the body: its place is free again, its job no longer watched
    assert watcher_of(client.application).watched == 0
    assert client.get(f"/jobs/{job_id}/stream", buffered=False).status_code == 200


def test_another_tenants_job_has_no_stream_and_no_wait(settings: Settings) -> None:
    svc = build_services(settings.model_copy(update={"auth": "keys"}))
    try:
        with svc.db.session() as session:
            _, alice = create_key(session, name="alice", tenant="acme", role="user")
            _, bob = create_key(session, name="bob", tenant="beta", role="user")
        client = create_app(services=svc).test_client()
        as_alice, as_bob = ({"Authorization": f"Bearer {key}"} for key in (alice, bob))
        created = client.post("/jobs", json={"model": "reference-t2v", "prompt": "mine"}, headers=as_alice)
        assert created.status_code == 202
        url = f"/jobs/{created.get_json()['id']}"
        assert client.get(f"{url}/stream").status_code == 401
        refused = client.get(f"{url}/stream", headers=as_bob)
        assert refused.status_code == 404 and refused.get_json()["error"]["code"] == "job_not_found"
        assert client.get(url, headers={**as_bob, "Prefer": "wait=1"}).status_code == 404
        with client.get(f"{url}/stream", headers=as_alice) as own:  # closes after stream_max_seconds
            assert own.status_code == 200 and own.mimetype == "text/event-stream"
    finally:
        svc.db.dispose()
