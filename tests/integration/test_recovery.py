"""No accepted job is lost: not when a worker is killed, not when Redis restarts empty."""

from __future__ import annotations

import signal
import time

import pytest

from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def transitions(stack: Stack, job_id: str) -> list[tuple[str | None, str | None]]:
    return [(e.from_status, e.to_status) for e in stack.events(job_id)]


def test_kill_9_worker_mid_job_then_job_completes_once(stack: Stack) -> None:
    doomed = stack.start_worker("doomed")
    job_id = stack.submit({"model": "fake-slow", "num_frames": 60, "step_seconds": 0.05, "fps": 12})
    running = stack.wait(job_id, predicate=lambda j: j.status == "running" and j.progress > 0.2, timeout=60)
    assert running.worker_id and running.worker_id.startswith("doomed@test#")
    doomed.kill(signal.SIGKILL)  # the whole process group: Celery parent and child
    survivor = stack.start_worker("survivor")
    job = stack.wait(job_id, timeout=90)
    assert job.status == "succeeded", (job.error_code, job.error_message, survivor.log_text()[-3000:])
    assert job.attempts == 2 and job.worker_id and job.worker_id.startswith("survivor@test#")
    # A retried run keeps its files apart, so a run that lost its lease cannot overwrite them.
    assert job.output_key == f"jobs/{job_id}/attempt-2/output.mp4"
    assert job.report_key == f"jobs/{job_id}/attempt-2/report.json"
    assert stack.client.get(f"/jobs/{job_id}/log").get_data(as_text=True).count("attempt 2") == 1
    moves = transitions(stack, job_id)
    assert moves.count(("queued", "running")) == 2
    assert moves.count(("running", "queued")) == 1
    assert moves.count(("running", "succeeded")) == 1, "the job succeeded exactly once"
    assert moves[-1] == ("running", "succeeded")


def test_child_process_dying_is_retried_then_failed_as_worker_lost(stack: Stack) -> None:
    stack.start_worker("w")
    job_id = stack.submit({"model": "fake-exits", "num_frames": 12})
    job = stack.wait(job_id, timeout=120)
    assert job.status == "failed" and job.error_code == "worker_lost"
    assert job.attempts == stack.services.settings.max_attempts
    # The worker is still there for the next job.
    assert stack.wait(stack.submit({"model": "fake-good"}), timeout=60).status == "succeeded"


def test_redis_restarting_empty_loses_no_queued_job(stack: Stack) -> None:
    ids = [stack.submit({"model": "fake-good", "num_frames": 12, "prompt": f"job {i}"}) for i in range(3)]
    stack.redis.stop()
    stack.redis.start()  # empty: every message is gone
    stack.start_worker("after-restart")
    for job_id in ids:
        job = stack.wait(job_id, timeout=90)
        assert job.status == "succeeded", (job.error_code, job.error_message)
        assert transitions(stack, job_id).count(("queued", "running")) == 1


def test_redis_restart_while_a_job_runs(stack: Stack) -> None:
    stack.start_worker("w")
    running = stack.submit({"model": "fake-slow", "num_frames": 40, "step_seconds": 0.05})
    stack.wait(running, predicate=lambda j: j.status == "running")
    queued = stack.submit({"model": "fake-good", "num_frames": 12})
    stack.redis.stop()
    time.sleep(0.5)
    stack.redis.start()
    for job_id in (running, queued):
        job = stack.wait(job_id, timeout=120)
        assert job.status == "succeeded", (
            job.error_code,
            job.error_message,
            stack.workers[0].log_text()[-3000:],
        )
        assert transitions(stack, job_id).count(("running", "succeeded")) == 1
