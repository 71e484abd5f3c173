"""Retry on a failed gate, through a real Celery worker: the job runs again with the next seed,
every try's verdict, seed, files and card time are kept, and the job says which seed made its video.

``fake-seeded`` (tests/fakes/zoo.py) makes a black video for every seed below ``good_from_seed``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEEDED = {"model": "fake-seeded", "num_frames": 24, "fps": 12, "seed": 10}


def view_of(stack: Stack, job_id: str) -> dict[str, Any]:
    response = stack.client.get(f"/jobs/{job_id}")
    assert response.status_code == 200
    return dict(response.get_json())


def body_of(stack: Stack, link: str) -> bytes:
    with stack.client.get(link) as response:
        assert response.status_code == 200, (link, response.get_data(as_text=True)[:300])
        return bytes(response.get_data())


def test_a_failed_gate_runs_again_with_the_next_seed_until_one_passes(shared_stack: Stack) -> None:
    job_id = shared_stack.submit({**SEEDED, "good_from_seed": 12, "retry_on_validation_failure": 3})
    job = shared_stack.wait(job_id)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    view = view_of(shared_stack, job_id)
    assert view["params"]["seed"] == 10, "params keep the request as it was made"
    assert "retry_on_validation_failure" not in view["params"]
    assert view["retry_on_validation_failure"] == 3
    assert view["seed_used"] == 12 and view["attempts"] == 3
    tries = view["validation_attempts"]
    assert [t["number"] for t in tries] == [1, 2] and [t["seed"] for t in tries] == [10, 11]
    assert all(t["verdict"] == "failed" and "black" in t["failed_checks"] for t in tries), tries
    assert [t["attempt"] for t in tries] == [1, 2]

    # Every try is charged: the job's usage counts three attempts, the failed ones included.
    usage = view["usage"]
    assert usage["attempts"] == 3 and usage["wasted_card_seconds"] == 0
    assert all(t["card_seconds"] is not None and t["card_seconds"] >= 0 for t in tries)
    assert usage["card_seconds"] >= sum(t["card_seconds"] for t in tries)

    # Each try's files are kept and reachable; the job's own are the passing try's.
    kept = body_of(shared_stack, view["links"]["video"])
    assert len({t["links"]["video"] for t in tries} | {view["links"]["video"]}) == 3
    digests = {hashlib.sha256(body_of(shared_stack, t["links"]["video"])).hexdigest() for t in tries}
    assert hashlib.sha256(kept).hexdigest() not in digests  # the black tries are not the kept video
    for number, tried in enumerate(tries, start=1):
        report = json.loads(body_of(shared_stack, tried["links"]["report"]))
        assert report["status"] == "failed" and report["error"]["code"] == "validation_failed"
        assert report["tries"]["try_number"] == number and report["tries"]["seed"] == 9 + number
        assert report["config_resolved"]["seed"] == 9 + number
        assert b"finished: failed" in body_of(shared_stack, tried["links"]["log"])
    final = json.loads(body_of(shared_stack, view["links"]["report"]))
    assert final["status"] == "succeeded" and final["config_resolved"]["seed"] == 12
    assert final["tries"]["try_number"] == 3 and final["tries"]["of_at_most"] == 4
    assert [t["seed"] for t in final["tries"]["earlier"]] == [10, 11]
    assert json.loads(body_of(shared_stack, f"/jobs/{job_id}/report?try=3")) == final

    # The audit trail says why it ran again.
    again = [e for e in shared_stack.events(job_id) if e.to_status == "queued" and "next seed" in e.detail]
    assert len(again) == 2 and "seed 10" in again[0].detail and "black" in again[0].detail


def test_when_the_tries_run_out_the_job_fails_with_every_try_listed(shared_stack: Stack) -> None:
    job_id = shared_stack.submit({**SEEDED, "good_from_seed": 1000, "retry_on_validation_failure": 1})
    job = shared_stack.wait(job_id)
    assert job.status == "failed" and job.error_code == "validation_failed"
    view = view_of(shared_stack, job_id)
    assert [t["seed"] for t in view["validation_attempts"]] == [10]
    assert view["seed_used"] == 11 and view["attempts"] == 2
    assert view["usage"]["attempts"] == 2
    report = json.loads(body_of(shared_stack, view["links"]["report"]))
    assert report["tries"]["try_number"] == 2 and report["config_resolved"]["seed"] == 11
    # The reaper's budget for lost workers is not used up by the retry.
    assert job.max_attempts == shared_stack.services.settings.max_attempts + 1


def test_a_job_that_asks_for_no_retry_fails_at_once(shared_stack: Stack) -> None:
    job_id = shared_stack.submit({**SEEDED, "good_from_seed": 1000})
    job = shared_stack.wait(job_id)
    assert job.status == "failed" and job.attempts == 1
    view = view_of(shared_stack, job_id)
    assert view["validation_attempts"] == [] and view["retry_on_validation_failure"] == 0
    assert view["seed_used"] == 10
    missing = shared_stack.client.get(f"/jobs/{job_id}/video?try=2")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "try_not_found"


T2V = {"model": "reference-t2v", "prompt": "a red kite", "width": 64, "height": 64, "num_frames": 8}


@pytest.mark.parametrize(
    ("value", "code"), [(11, "invalid_retry"), ("two", "invalid_retry"), (True, "invalid_retry")]
)
def test_a_bad_count_is_a_clear_422(client: Any, value: Any, code: str) -> None:
    response = client.post("/jobs", json={**T2V, "retry_on_validation_failure": value})
    assert response.status_code == 422, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code and "retry_on_validation_failure" in error["message"]


def test_json_form_and_openai_submissions_carry_the_count(client: Any) -> None:
    from_json = client.post("/jobs", json={**T2V, "retry_on_validation_failure": 2}).get_json()
    assert from_json["retry_on_validation_failure"] == 2 and from_json["validation_attempts"] == []
    assert from_json["seed_used"] == from_json["params"]["seed"]
    from_form = client.post("/jobs", data={**T2V, "retry_on_validation_failure": "1"})
    assert from_form.status_code == 202 and from_form.get_json()["retry_on_validation_failure"] == 1
    video = client.post(
        "/v1/videos", json={"model": "reference-t2v", "prompt": "a kite", "retry_on_validation_failure": 3}
    )
    assert video.status_code == 200, video.get_data(as_text=True)
    assert client.get(f"/jobs/{video.get_json()['id']}").get_json()["retry_on_validation_failure"] == 3
    assert (
        client.get("/jobs/" + from_json["id"]).get_json()["params"].get("retry_on_validation_failure") is None
    )


def test_an_idempotent_replay_must_ask_for_the_same_count(client: Any) -> None:
    headers = {"Idempotency-Key": "retry-1"}
    first = client.post("/jobs", json={**T2V, "seed": 4, "retry_on_validation_failure": 1}, headers=headers)
    assert first.status_code == 202
    same = client.post("/jobs", json={**T2V, "seed": 4, "retry_on_validation_failure": 1}, headers=headers)
    assert same.status_code == 200 and same.get_json()["id"] == first.get_json()["id"]
    other = client.post("/jobs", json={**T2V, "seed": 4, "retry_on_validation_failure": 2}, headers=headers)
    assert other.status_code == 409 and other.get_json()["error"]["code"] == "idempotency_conflict"
