"""A real worker process writes its job's lines with the job id, as JSON when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_json_worker_log_names_the_job_on_its_lines(tmp_path: Path) -> None:
    stack = build_stack(tmp_path, log_format="json")
    try:
        worker = stack.start_worker("logs")
        job_id = stack.submit({"model": "fake-good", "num_frames": 12, "fps": 12})
        job = stack.wait(job_id)
        assert job.status == "succeeded", (job.error_code, job.error_message)
        stack.close()
        lines = [json.loads(line) for line in worker.log_text().splitlines() if line.startswith("{")]
        assert lines, worker.log_text()[-2000:]
        assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
        mine = [line for line in lines if line.get("job_id") == job_id]
        assert any(line["logger"] == "workers.run.pipeline" and "claimed" in line["message"] for line in mine)
        assert any("succeeded" in line["message"] for line in mine), mine
        assert all(line["attempt"] == 1 for line in mine)
    finally:
        stack.close()
