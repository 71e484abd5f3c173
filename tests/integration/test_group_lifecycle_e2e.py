"""Card groups that stop, fall ill and retire, with real worker processes where it matters.

- A drain: a worker sent SIGTERM mid-job finishes that job, takes nothing new, the dispatcher sends
  its group nothing, and the job that was dispatched to it but not started goes back to the queue
  at once; a worker started afterwards runs what was left.
- Card health: a worker on a (stand-in) Ascend card reads ``npu-smi``; when the card's Health column
  says Warning its group goes ``unhealthy`` and stops claiming, and it takes jobs again once the
  card says OK.
- Retirement: a group down past the retention leaves /fleet and /metrics (its history stays), and
  ``jobservice fleet forget`` retires one at once but refuses a group whose worker is online.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select, update

from jobservice.broker import BrokerInspector, JobMessage, group_queue, send_job
from jobservice.db.tables import FleetGroup, Job, LedgerSpan, utcnow
from jobservice.jobs.transitions import record_created
from jobservice.jobs.upkeep import Upkeep
from jobservice.wiring import Services
from tests.browser.server import serve
from tests.conftest import ROOT
from tests.factories import down_for, online_group
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

QUICK = {"model": "fake-good", "num_frames": 12, "fps": 12, "size": 32}
CAPTURED = ROOT / "tests" / "standins" / "captured"


def group(stack: Stack, group_id: str) -> FleetGroup | None:
    with stack.services.db.session() as s:
        return s.get(FleetGroup, group_id)


def until(what: str, check: object, timeout: float = 30.0, stack: Stack | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    logs = "\n".join(w.log_text()[-3000:] for w in stack.workers) if stack else ""
    raise AssertionError(f"not within {timeout} s: {what}\n{logs}")


# --- a drain --------------------------------------------------------------------------------------
def test_a_worker_sent_sigterm_finishes_its_job_and_takes_nothing_new(stack: Stack) -> None:
    first = stack.start_worker("w1")
    until("w1 registers", lambda: group(stack, "w1@test") is not None, 90, stack)
    long = stack.submit({**QUICK, "num_frames": 24, "step_seconds": 0.4})  # ~10 s of generation
    stack.wait(long, predicate=lambda j: j.status == "running" and j.stage == "generating", timeout=60)

    # A job handed to the group but not started (as a round does when its generation ends).
    waiting = uuid.uuid4()
    params = {"prompt": "next", "num_frames": 12, "fps": 12, "size": 32, "step_seconds": 0.0}
    with stack.services.db.session() as s:
        job = Job(id=waiting, task="text2video", model="fake-good", params=params, created_at=utcnow())
        job.max_attempts, job.dispatched_to, job.enqueued_at = 3, "w1@test", utcnow()
        record_created(s, job)
        s.execute(update(FleetGroup).where(FleetGroup.id == "w1@test").values(next_job_id=waiting))
    send_job(stack.services.celery, JobMessage(job_id=waiting, group="w1@test"))

    os.kill(first.process.pid, signal.SIGTERM)  # the main process only, as systemd, docker and kubelet do
    until("the group drains", lambda: (g := group(stack, "w1@test")) and g.draining_since, 20, stack)
    until("the waiting job is handed back", lambda: stack.job(str(waiting)).dispatched_to is None, 10, stack)
    assert stack.job(long).status == "running", "handed back at once, while the long job still runs"

    later = stack.submit(QUICK)  # the dispatcher may send it to no one: the only group drains
    done = stack.wait(long, timeout=60)
    assert done.status == "succeeded" and done.attempts == 1, (done.error_code, done.error_message)
    assert first.process.wait(timeout=60) is not None  # it stopped once its job was done
    for job_id in (str(waiting), later):
        job = stack.job(job_id)
        assert job.status == "queued" and job.dispatched_to is None and job.attempts == 0, job_id
    inspector = BrokerInspector.of(stack.services.settings)
    try:
        assert later not in inspector.pending_job_ids({group_queue("w1@test")})  # never sent to it
    finally:
        inspector.close()
    with stack.services.db.session() as s:
        ran = {str(j) for j in s.scalars(select(LedgerSpan.job_id).where(LedgerSpan.group_id == "w1@test"))}
    assert ran - {"None"} == {long}  # the stopping group ran the one job it had, nothing else

    stack.start_worker("w2")  # what was left runs on the next worker
    for job_id in (str(waiting), later):
        job = stack.wait(job_id, timeout=90)
        assert job.status == "succeeded" and (job.worker_id or "").startswith("w2@"), job_id


# --- card health ------------------------------------------------------------------------------------
def test_a_group_with_an_unhealthy_card_stops_claiming_and_comes_back(stack: Stack, tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    said = tmp_path / "npu-smi.txt"
    said.write_text((CAPTURED / "npu-smi-910b3-8.txt").read_text())  # eight cards, all OK
    npu_smi = tools / "npu-smi"
    npu_smi.write_text(f'#!/bin/sh\n[ "$1" = info ] && exec cat "{said}"\nexit 1\n')
    npu_smi.chmod(0o755)
    stack.start_worker(
        "n5",
        devices="npu:5",
        extra_env={
            "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
            "JOBSERVICE_CARD_HEALTH_INTERVAL_SECONDS": "0.5",
            "JOBSERVICE_WORKER_MODELS": '["fake-good"]',
        },
    )
    until("n5 registers", lambda: group(stack, "n5@test") is not None, 90, stack)
    first = stack.wait(stack.submit(QUICK), timeout=60)
    assert first.status == "succeeded", (first.error_code, first.error_message)

    said.write_text((CAPTURED / "npu-smi-910b3-8-warning-critical.txt").read_text())  # card 5: Warning
    until("n5 goes unhealthy", lambda: (g := group(stack, "n5@test")) and g.state == "unhealthy", 20, stack)
    sick = group(stack, "n5@test")
    assert sick is not None and sick.health == ["npu:5: npu-smi reports its health as Warning."]
    fleet = stack.client.get("/fleet").get_json()
    shown = next(g for g in fleet["groups"] if g["id"] == "n5@test")
    assert shown["state"] == "unhealthy" and not shown["accepting"] and shown["health"] == sick.health

    held = stack.submit(QUICK)
    time.sleep(3)  # six health reads and several dispatch rounds
    job = stack.job(held)
    assert job.status == "queued" and job.dispatched_to is None, "an unhealthy group took a job"

    said.write_text((CAPTURED / "npu-smi-910b3-8.txt").read_text())  # the card is OK again
    done = stack.wait(held, timeout=30)
    assert done.status == "succeeded" and (done.worker_id or "").startswith("n5@"), done.error_message
    back = group(stack, "n5@test")
    assert back is not None and back.accepting and back.health is None
    with stack.services.db.session() as s:
        states = [
            span.state
            for span in s.scalars(
                select(LedgerSpan).where(LedgerSpan.group_id == "n5@test").order_by(LedgerSpan.id)
            )
        ]
    assert "unhealthy" in states and states.index("unhealthy") < len(states) - 1


# --- retirement -------------------------------------------------------------------------------------
def test_a_group_down_past_the_retention_leaves_fleet_and_metrics(
    services: Services, client: FlaskClient
) -> None:
    for name in ("old@host", "live@host"):
        online_group(services.db, name, ["reference-t2v"])
    down_for(services.db, "old@host", 25)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'group="old@host"' in metrics and 'group="live@host"' in metrics

    Upkeep(services).run_once()  # every worker's maintenance round (or `jobservice reap`)

    assert {g["id"] for g in client.get("/fleet").get_json()["groups"]} == {"live@host"}
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'group="old@host"' not in metrics and 'group="live@host"' in metrics
    with services.db.session() as s:
        old = s.get(FleetGroup, "old@host")
        history = list(s.scalars(select(LedgerSpan).where(LedgerSpan.group_id == "old@host")))
    assert old is not None and old.retired_at is not None and history  # its history stays


def test_fleet_forget_retires_a_gone_group_and_refuses_an_online_one(services: Services) -> None:
    online_group(services.db, "gone@host", ["reference-t2v"])
    online_group(services.db, "live@host", ["reference-t2v"])
    down_for(services.db, "gone@host", 0.01)  # stopped a moment ago: far from the retention
    with serve(services) as base:
        env = {**os.environ, "JOBSERVICE_URL": base}

        def forget(name: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "jobservice.cli.main", "fleet", "forget", name]
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)

        refused = forget("live@host")
        assert refused.returncode == 1
        assert "group_online" in refused.stderr and "stop its worker first" in refused.stderr
        unknown = forget("nobody@host")
        assert unknown.returncode == 1 and "group_not_found" in unknown.stderr
        done = forget("gone@host")
        assert done.returncode == 0, done.stderr
        assert "card group gone@host retired at" in done.stdout
    with services.db.session() as s:
        gone, live = s.get(FleetGroup, "gone@host"), s.get(FleetGroup, "live@host")
    assert gone is not None and gone.retired_at is not None
    assert live is not None and live.retired_at is None
