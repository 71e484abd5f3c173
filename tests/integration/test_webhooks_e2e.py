"""Webhooks through real processes: a CPU worker runs the jobs, a real `jobservice beat` delivers.

The receiver is a local HTTP server (127.0.0.1, allowed by the stack's settings). Signatures are
checked with the `standardwebhooks` package and the secret printed by `jobservice webhooks secret`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.conftest import ROOT
from tests.integration.conftest import Stack, build_stack
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.integration

DEADLINE = 120.0


@dataclass
class Beat:
    """A `jobservice beat` process group (the webhook deliverer) that a test may kill -9."""

    stack: Stack
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.stack.tmp / "beat.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobservice.cli.main", "beat"],
                env=self.stack.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def log(self) -> str:
        path = self.stack.tmp / "beat.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@dataclass
class Hooks:
    stack: Stack
    beat: Beat
    secret: str


@pytest.fixture(scope="module")
def hooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hooks]:
    stack = build_stack(
        tmp_path_factory.mktemp("hooks"),
        webhook_allowed_hosts=["127.0.0.1"],
        webhook_retry_base_seconds=0.2,
        webhook_retry_max_seconds=1.0,
        webhook_sweep_seconds=0.5,
        webhook_claim_seconds=4.0,  # short, so the kill test retries soon (one solo deliverer)
        webhook_timeout_seconds=20.0,
        batch_tick_seconds=1.0,
    )
    made = subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", "webhooks", "secret"],
        env=stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    beat = Beat(stack)
    try:
        stack.start_worker("hooks")
        beat.start()
        yield Hooks(stack, beat, made.stdout.strip())
    finally:
        beat.kill(signal.SIGTERM)
        stack.close()


def submit(hooks: Hooks, url: str, **fields: Any) -> str:
    return hooks.stack.submit({"model": "fake-good", "num_frames": 8, "webhook": url, **fields})


def deliveries(hooks: Hooks, job_id: str) -> list[dict[str, Any]]:
    response = hooks.stack.client.get(f"/jobs/{job_id}/webhooks")
    assert response.status_code == 200
    return list(response.get_json()["data"])


def wait_delivered(hooks: Hooks, job_ids: list[str], count: int = 2) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        rows = [d for j in job_ids for d in deliveries(hooks, j)]
        if len(rows) == count * len(job_ids) and all(d["status"] == "delivered" for d in rows):
            return
        time.sleep(0.2)
    raise AssertionError(f"not delivered: {rows}\n--- beat\n{hooks.beat.log()}")


def verified(hooks: Hooks, receiver: Receiver) -> list[dict[str, Any]]:
    """Every body the receiver got, each one's signature checked."""
    return [Webhook(hooks.secret).verify(r.body, r.headers) for r in receiver.received]


def test_a_job_with_a_webhook_gets_start_and_completed_signed(hooks: Hooks) -> None:
    receiver = Receiver().start()
    try:
        job_id = submit(hooks, receiver.url)
        assert hooks.stack.wait(job_id).status == "succeeded"
        wait_delivered(hooks, [job_id])
        bodies = verified(hooks, receiver)
        assert [b["type"] for b in bodies] == ["job.start", "job.completed"]
        assert bodies[1]["data"]["id"] == job_id and bodies[1]["data"]["status"] == "succeeded"
        assert len({r.headers["webhook-id"] for r in receiver.received}) == 2
        rows = deliveries(hooks, job_id)
        assert [(d["attempts"], d["last_status_code"]) for d in rows] == [(1, 200), (1, 200)]
    finally:
        receiver.stop()


def test_a_receiver_that_is_down_for_a_while_gets_every_event_in_order(hooks: Hooks) -> None:
    receiver = Receiver()  # not listening yet: connections are refused
    jobs = [submit(hooks, receiver.url) for _ in range(3)]
    for job_id in jobs:
        assert hooks.stack.wait(job_id).status == "succeeded"
    deadline = time.monotonic() + DEADLINE
    while not all(d["attempts"] >= 2 for j in jobs for d in deliveries(hooks, j)[:1]):
        assert time.monotonic() < deadline, hooks.beat.log()
        time.sleep(0.2)
    receiver.status = 503  # up, but failing
    receiver.start()
    try:
        while receiver.attempts < 3:
            assert time.monotonic() < deadline, hooks.beat.log()
            time.sleep(0.1)
        receiver.status = 200
        wait_delivered(hooks, jobs)
        bodies = verified(hooks, receiver)
        for job_id in jobs:
            mine = [b["type"] for b in bodies if b["data"]["id"] == job_id]
            assert mine[0] == "job.start" and "job.completed" in mine, mine
            assert mine.index("job.completed") > mine.index("job.start")
            first = deliveries(hooks, job_id)[0]
            assert first["attempts"] >= 3 and first["status"] == "delivered"
    finally:
        receiver.stop()


def test_a_deliverer_killed_mid_delivery_retries_and_loses_nothing(hooks: Hooks) -> None:
    receiver = Receiver(hang=15.0).start()
    try:
        job_id = submit(hooks, receiver.url)
        deadline = time.monotonic() + DEADLINE
        while receiver.attempts < 1:  # the start event is being delivered, and hangs
            assert time.monotonic() < deadline, hooks.beat.log()
            time.sleep(0.1)
        hooks.beat.kill()  # kill -9 mid-delivery
        receiver.hang = 0.0
        assert deliveries(hooks, job_id)[0]["status"] == "pending"
        hooks.beat.start()
        assert hooks.stack.wait(job_id).status == "succeeded"
        wait_delivered(hooks, [job_id])
        types = [b["type"] for b in verified(hooks, receiver)]
        assert types[:2] == ["job.start", "job.completed"], types
        assert deliveries(hooks, job_id)[0]["attempts"] >= 2  # the killed attempt, then the retry
    finally:
        receiver.stop()


def test_the_delivery_body_is_the_job_view(hooks: Hooks, tmp_path: Path) -> None:
    receiver = Receiver().start()
    try:
        job_id = submit(hooks, receiver.url, webhook_events_filter="completed")
        wait_delivered(hooks, [job_id], count=1)
        (body,) = verified(hooks, receiver)
        view = hooks.stack.client.get(f"/jobs/{job_id}").get_json()
        assert body["type"] == "job.completed"
        assert {k: body["data"][k] for k in ("id", "status", "model", "links")} == {
            k: view[k] for k in ("id", "status", "model", "links")
        }
        json.dumps(body)  # plain JSON
    finally:
        receiver.stop()


def test_a_batch_with_a_webhook_gets_batch_and_group_start_and_completed(hooks: Hooks) -> None:
    receiver = Receiver().start()
    try:
        spec = {
            "name": "hooked",
            "repeat": 1,
            "cases": [{"name": "one", "model": "fake-good", "params": {"num_frames": 8}}],
            "webhook": receiver.url,
        }
        response = hooks.stack.client.post("/batches", json={"spec": spec})
        assert response.status_code == 202, response.get_data(as_text=True)
        batch_id = response.get_json()["id"]
        deadline = time.monotonic() + DEADLINE
        while len(receiver.received) < 4:  # its job group's group.* too (issue 37)
            assert time.monotonic() < deadline, hooks.beat.log()
            time.sleep(0.2)
        bodies = verified(hooks, receiver)
        batch = [b for b in bodies if b["type"].startswith("batch.")]
        assert [b["type"] for b in batch] == ["batch.start", "batch.completed"]
        assert batch[1]["data"]["id"] == batch_id and batch[1]["data"]["status"] == "finished"
        group = [b for b in bodies if b["type"].startswith("group.")]
        assert [b["type"] for b in group] == ["group.started", "group.completed"]
        assert group[1]["data"]["id"] == batch_id and group[1]["data"]["kind"] == "batch"
    finally:
        receiver.stop()
