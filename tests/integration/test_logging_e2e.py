"""A real worker process writes its job's lines with the job id, as JSON when asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port
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


def test_json_api_writes_only_json_lines_from_its_first_one(tmp_path: Path, clean_redis: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update(
        JOBSERVICE_VAR_DIR=str(tmp_path / "var"),
        JOBSERVICE_BROKER_URL=clean_redis,
        JOBSERVICE_LOG_FORMAT="json",
        JOBSERVICE_AUTH="off",
        JOBSERVICE_API_ACCESS_LOG="all",  # the default skips successful reads such as /healthz
    )
    me = [sys.executable, "-m", "jobservice.cli.main"]
    subprocess.run([*me, "db", "upgrade"], env=env, check=True, capture_output=True, timeout=120)
    port = free_port()
    with (tmp_path / "api.log").open("wb") as out:
        api = subprocess.Popen(
            [*me, "api", "--port", str(port), "--workers", "2"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
    finally:
        api.terminate()
        api.wait(timeout=30)
    text = (tmp_path / "api.log").read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    loggers = {json.loads(line)["logger"] for line in lines}  # raises on a line that is not JSON
    assert {"gunicorn.error", "gunicorn.access", "jobservice.cli"} <= loggers, text[-2000:]
