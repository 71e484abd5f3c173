"""The same job path on the production back ends: PostgreSQL and S3 (moto's HTTP server)."""

from __future__ import annotations

import json

import pytest
import requests

from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]


def test_job_on_postgres_and_s3(prod_stack: Stack) -> None:
    assert prod_stack.services.db.dialect == "postgresql"
    prod_stack.start_worker("pg")
    job_id = prod_stack.submit({"model": "fake-good", "num_frames": 24})
    job = prod_stack.wait(job_id)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    assert prod_stack.services.store.backend == "s3"
    keys = sorted(o.key for o in prod_stack.services.store.list(f"jobs/{job_id}/"))
    assert keys == [f"jobs/{job_id}/log.txt", f"jobs/{job_id}/output.mp4", f"jobs/{job_id}/report.json"]
    log = prod_stack.client.get(f"/jobs/{job_id}/log").get_data(as_text=True)
    assert f"job {job_id} model fake-good" in log and "finished: succeeded" in log

    redirect = prod_stack.client.get(f"/jobs/{job_id}/video")
    assert redirect.status_code == 302
    url = redirect.headers["Location"]
    assert "X-Amz-Signature" in url, "a SigV4 presigned URL"
    body = requests.get(url, timeout=10).content
    assert (
        body[4:8] == b"ftyp" and len(body) == prod_stack.services.store.head(f"jobs/{job_id}/output.mp4").size
    )
    report = json.loads(prod_stack.client.get(f"/jobs/{job_id}/report").get_data())
    assert (
        report["validation"]["verdict"] == "passed"
        and report["artifacts"][0]["key"] == f"jobs/{job_id}/output.mp4"
    )
    ready = prod_stack.client.get("/readyz").get_json()
    assert (
        ready["checks"]["database"]["dialect"] == "postgresql"
        and ready["checks"]["object_store"]["backend"] == "s3"
    )


def test_recovery_on_postgres(prod_stack: Stack) -> None:
    import signal

    doomed = prod_stack.start_worker("doomed")
    job_id = prod_stack.submit({"model": "fake-slow", "num_frames": 40, "step_seconds": 0.05})
    prod_stack.wait(job_id, predicate=lambda j: j.status == "running" and j.progress > 0.2)
    doomed.kill(signal.SIGKILL)
    prod_stack.start_worker("survivor")
    job = prod_stack.wait(job_id, timeout=90)
    assert job.status == "succeeded" and job.attempts == 2
