"""Jobs through a real Redis and a real Celery worker process: outcomes, the gate, cancel, timeout."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from jobservice.fleet import eta
from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def report_of(stack: Stack, job_id: str) -> dict[str, Any]:
    response = stack.client.get(f"/jobs/{job_id}/report")
    assert response.status_code == 200
    return json.loads(response.get_data())


def test_good_fake_job_succeeds_with_validated_video(shared_stack: Stack) -> None:
    job_id = shared_stack.submit({"model": "fake-good", "num_frames": 30, "fps": 15})
    job = shared_stack.wait(job_id)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    assert job.verdict == "passed" and job.progress == 1.0 and job.attempts == 1
    report = report_of(shared_stack, job_id)
    assert report["status"] == "succeeded" and report["validation"]["verdict"] == "passed"
    assert report["validation"]["decoded_frames"] == 30
    assert report["frames_generated"] == 30 and report["media_duration_s"] == 2.0
    for key in ("fetch_ms", "generate_ms", "encode_ms", "validate_ms", "upload_ms", "total_ms"):
        assert report["timings"][key] >= 0, key
    assert len(report["step_ms"]) == 30
    assert report["worker_id"].startswith("shared@test#")
    with shared_stack.client.get(f"/jobs/{job_id}/video", headers={"Range": "bytes=0-99"}) as video:
        assert video.status_code == 206 and len(video.get_data()) == 100 and video.mimetype == "video/mp4"
    with shared_stack.client.get(f"/jobs/{job_id}/video") as full:
        assert full.status_code == 200 and full.get_data()[4:8] == b"ftyp"


@pytest.mark.parametrize(
    ("model", "code", "failed_check"),
    [
        ("fake-black", "validation_failed", "black"),
        ("fake-frozen", "validation_failed", "freeze"),
        ("fake-short", "validation_failed", "frame_count"),
    ],
)
def test_bad_output_fails_the_gate_but_is_kept(
    shared_stack: Stack, model: str, code: str, failed_check: str
) -> None:
    job_id = shared_stack.submit({"model": model, "num_frames": 36, "fps": 12})
    job = shared_stack.wait(job_id)
    assert job.status == "failed" and job.error_code == code
    assert failed_check in job.validation_summary["failed_checks"], job.validation_summary
    assert job.output_key and job.report_key, "a failed output and its report are kept for inspection"
    report = report_of(shared_stack, job_id)
    assert report["status"] == "failed" and report["error"]["code"] == code
    assert any(c["name"] == failed_check and not c["passed"] for c in report["validation"]["checks"])
    with shared_stack.client.get(f"/jobs/{job_id}/video") as video:
        assert video.status_code == 200


@pytest.mark.parametrize(
    ("model", "code"),
    [
        ("fake-raises-mid-run", "internal_error"),
        ("fake-adapter-error", "out_of_memory"),
        ("fake-raises-in-load", "model_load_failed"),
    ],
)
def test_model_failures_become_clear_job_errors(shared_stack: Stack, model: str, code: str) -> None:
    job_id = shared_stack.submit({"model": model})
    job = shared_stack.wait(job_id)
    assert job.status == "failed" and job.error_code == code, job.error_message
    assert job.error_message and len(job.error_message) > 10
    view = shared_stack.client.get(f"/jobs/{job_id}").get_json()
    assert view["error"]["code"] == code
    # The worker survives and serves the next job.
    ok = shared_stack.wait(shared_stack.submit({"model": "fake-good"}))
    assert ok.status == "succeeded"


def test_cancel_running_job_stops_at_next_step(shared_stack: Stack) -> None:
    job_id = shared_stack.submit({"model": "fake-slow", "num_frames": 200, "step_seconds": 0.05})
    shared_stack.wait(job_id, predicate=lambda j: j.status == "running" and j.progress > 0.1)
    response = shared_stack.client.post(f"/jobs/{job_id}/cancel")
    assert response.status_code == 202 and response.get_json()["cancel_requested"] is True
    started = time.monotonic()
    job = shared_stack.wait(job_id, timeout=20)
    assert job.status == "canceled" and time.monotonic() - started < 5
    assert job.progress < 0.9
    assert report_of(shared_stack, job_id)["status"] == "canceled"


def test_timeout_fails_the_job(shared_stack: Stack) -> None:
    job_id = shared_stack.submit({"model": "fake-slow", "num_frames": 400, "step_seconds": 0.05})
    job = shared_stack.wait(job_id, timeout=30)
    assert job.status == "failed" and job.error_code == "timeout"


def test_queue_position_while_worker_is_busy(shared_stack: Stack) -> None:
    first = shared_stack.submit({"model": "fake-slow", "num_frames": 40, "step_seconds": 0.05})
    shared_stack.wait(first, predicate=lambda j: j.status == "running")
    second = shared_stack.submit({"model": "fake-slow", "num_frames": 4})
    third = shared_stack.submit({"model": "fake-slow", "num_frames": 4})
    svc = shared_stack.services
    assert eta.refresh(svc.db, svc.catalog, svc.settings, force=True)
    svc.caches.forecast.drop(None)  # this process replaced the forecast
    views = {j: shared_stack.client.get(f"/jobs/{j}").get_json() for j in (second, third)}
    # The forecast's order: nothing starts before the second job (the first runs), then the third.
    assert views[second]["queue_position"] == 0 and views[third]["queue_position"] == 1
    for j in (first, second, third):
        assert shared_stack.wait(j).status == "succeeded"


def test_models_show_the_worker_online(shared_stack: Stack) -> None:
    models = {m["id"]: m for m in shared_stack.client.get("/models").get_json()["models"]}
    assert models["fake-good"]["online"] is True
    assert models["fake-good"]["workers"][0]["devices"] == "cpu"
    ready = shared_stack.client.get("/readyz").get_json()
    assert ready["ready"] is True and ready["workers"][0]["devices"] == "cpu"


def test_the_next_job_is_claimed_while_the_previous_one_is_still_being_finished(shared_stack: Stack) -> None:
    # workers/finisher.py: after a job's last frame the worker takes the next message at once and
    # flushes, gates, stores and records the previous job on its finisher thread.
    ids = [shared_stack.submit({"model": "fake-good", "num_frames": 60, "fps": 15}) for _ in range(4)]
    jobs = [shared_stack.wait(j) for j in ids]
    assert [j.status for j in jobs] == ["succeeded"] * 4, [(j.error_code, j.error_message) for j in jobs]
    assert len({j.worker_id for j in jobs}) == 1
    spans = sorted((j.claimed_at, j.finished_at) for j in jobs if j.claimed_at and j.finished_at)
    assert len(spans) == 4
    overlapped = [nxt[0] < prev[1] for prev, nxt in zip(spans[:-1], spans[1:], strict=True)]
    assert sum(overlapped) >= 2, spans  # (all three, unless the machine is very loaded)
    for job in jobs:  # each report is its own job's, gated in full
        report = report_of(shared_stack, str(job.id))
        assert report["job_id"] == str(job.id) and report["validation"]["decoded_frames"] == 60
        assert report["timings"]["validate_ms"] > 0 and report["timings"]["upload_ms"] >= 0
