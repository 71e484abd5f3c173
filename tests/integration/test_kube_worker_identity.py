"""A worker started as the kit's StatefulSet starts it (its pod's name in JOBSERVICE_WORKER_NODE and
JOBSERVICE_POD_NAME, ``--group`` naming the deployment file's group) is the card group of that name,
and stays the same group when its pod restarts: no second row, and /metrics joins it to its pod."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from jobservice.db.tables import FleetGroup, WorkerRecord
from tests.conftest import ROOT
from tests.integration.conftest import build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]
POD = "jobservice-worker-cpu-0"


def _start_pod(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jobservice.cli.main", "worker", "--devices", "cpu", "--group", "cpu"],
            env={**env, "JOBSERVICE_WORKER_NODE": POD, "JOBSERVICE_POD_NAME": POD},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def test_a_pod_is_its_card_group_across_restarts(tmp_path: Path) -> None:
    stack = build_stack(tmp_path, deployment_file=ROOT / "deploy" / "cpu-evaluation.yaml")
    log = tmp_path / "pod.log"
    try:
        for restart in range(2):
            pod = _start_pod(stack.env, log)
            try:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    with stack.services.db.session() as s:
                        record = s.get(WorkerRecord, POD)
                        if record is not None and record.pid == pod.pid and record.stopped_at is None:
                            break
                    time.sleep(0.2)
                else:
                    pytest.fail(
                        f"the pod's worker did not come up (restart {restart}):\n{log.read_text()[-3000:]}"
                    )
                with stack.services.db.session() as s:
                    groups = list(s.scalars(select(FleetGroup)))
                assert [g.id for g in groups] == [POD], "one group, named after the pod"
                assert sorted(groups[0].eligible) == [
                    "reference-t2v",
                    "reference-talking-head",
                ]  # the file's group
                text = stack.client.get("/metrics").get_data(as_text=True)
                info = next(
                    f for f in text_string_to_metric_families(text) if f.name == "jobservice_group_info"
                )
                assert [s.labels["pod"] for s in info.samples] == [POD]
            finally:
                _stop(pod)
    finally:
        stack.close()
