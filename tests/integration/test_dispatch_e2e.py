"""The dispatch message and the dispatcher, end to end with real worker processes.

One eviction decision: a real worker on a CPU card group declares 7 GB; the zoo's heavy stand-ins
need 3 GB each, so the group holds two of them and a third does not fit beside both. With A and B
resident (A the least recently used), a job of C arrives in a message whose decision says "evict
B": the worker unloads B, not A (its own least-recently-used choice), and the group's row and
events say so. A message of an older release (no decision) for a job of B then evicts the least
recently used (A), without the worker reading the queue.

The round off the request path: on PostgreSQL, with another process holding the fleet-wide
dispatch lock, ``POST /jobs`` answers at once (it runs no round). A job the free group stands ready
for takes its standing offer and runs while the lock is still held; the next one, with the group
busy, waits for a round: the worker's dispatcher, woken by the bell, waits for the lock and hands
the job out the moment it is free, long before the worker's next maintenance round would have.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from jobservice.broker import DispatchDecision, JobMessage, send_job
from jobservice.db.tables import FleetEvent, FleetGroup, FleetOffer, Job, utcnow
from jobservice.jobs.transitions import record_created
from tests.integration.conftest import Stack, build_stack

pytestmark = pytest.mark.integration

A, B, C = "fake-heavy-a", "fake-heavy-b", "fake-heavy-c"
BODY = {"num_frames": 12, "fps": 12, "size": 32}
GROUP = "w1@test"


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Stack]:
    stack = build_stack(tmp_path)
    stack.start_worker(
        "w1",
        extra_env={"JOBSERVICE_WORKER_MEMORY_GB": "7", "JOBSERVICE_WORKER_MODELS": json.dumps([A, B, C])},
    )
    try:
        registered(stack, lambda group: group.memory_gb_per_card == 7.0)
        yield stack
    finally:
        stack.close()


def registered(stack: Stack, ready: Callable[[FleetGroup], bool] = lambda group: True) -> None:
    """Wait until the worker has registered its card group (as ``ready`` wants it)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with stack.services.db.session() as s:
            group = s.get(FleetGroup, GROUP)
        if group is not None and ready(group):
            return
        time.sleep(0.2)
    raise AssertionError("the card group did not register:\n" + stack.workers[0].log_text()[-2000:])


def dispatched_by_hand(stack: Stack, model: str, decision: DispatchDecision | None) -> str:
    """A queued job handed to the group in the row it is inserted with (no dispatcher round can
    take it first), and its message sent with ``decision`` (None: as an older release sends it)."""
    job = Job(
        id=uuid.uuid4(),
        task="text2video",
        model=model,
        params={"prompt": "decided", "step_seconds": 0.0, **BODY},
        priority=0,
        created_at=utcnow(),
        max_attempts=1,
        dispatched_to=GROUP,
        enqueued_at=utcnow(),
        dispatch_decision=decision.as_dict() if decision else None,
    )
    with stack.services.db.session() as s:
        record_created(s, job)
    message = JobMessage(job_id=job.id, group=GROUP, decision=decision)
    if decision is None:
        message = JobMessage(job_id=job.id, group=GROUP, version=1)
    send_job(stack.services.celery, message)
    return str(job.id)


def evicted_for(stack: Stack, job_id: str) -> list[str]:
    with stack.services.db.session() as s:
        rows = s.scalars(
            select(FleetEvent).where(FleetEvent.kind == "evict", FleetEvent.job_id == uuid.UUID(job_id))
        )
        return sorted(e.model for e in rows)


def resident(stack: Stack) -> set[str]:
    with stack.services.db.session() as s:
        group = s.get(FleetGroup, GROUP)
        assert group is not None
        return set(group.resident)


def test_the_worker_evicts_what_the_message_decided(worker: Stack) -> None:
    stack = worker
    for model in (A, B):  # A, then B: A is the least recently used
        job = stack.wait(stack.submit({"model": model, **BODY}), timeout=60)
        assert job.status == "succeeded", (job.error_code, job.error_message)
    assert resident(stack) == {A, B}

    decided = dispatched_by_hand(stack, C, DispatchDecision(model=C, load=True, evict=(B,), reason="test"))
    job = stack.wait(decided, timeout=60)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    assert evicted_for(stack, decided) == [B]  # the decision, not the least recently used (A)
    assert resident(stack) == {A, C}

    # An older release's message (format 1, no decision): the least recently used goes (A).
    old = dispatched_by_hand(stack, B, None)
    job = stack.wait(old, timeout=60)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    assert evicted_for(stack, old) == [A]
    assert resident(stack) == {B, C}
    log = stack.workers[0].log_text()
    assert "after the dispatcher's evictions" not in log  # each decision left room enough


MAINTENANCE_SECONDS = 30.0  # the worker's upkeep rounds: far apart, so only the bell explains a prompt round


@pytest.fixture
def pg_worker(tmp_path: Path, pg_url: str) -> Iterator[Stack]:
    stack = build_stack(tmp_path, database_url=pg_url, reap_interval_seconds=MAINTENANCE_SECONDS)
    stack.start_worker("w1")
    try:
        registered(stack)
        yield stack
    finally:
        stack.close()


def test_a_submission_never_waits_on_the_fleet_lock(pg_worker: Stack, pg_url: str) -> None:
    stack = pg_worker
    warm = stack.wait(stack.submit({"model": "fake-good", **BODY}), timeout=MAINTENANCE_SECONDS / 2)
    assert warm.status == "succeeded", (warm.error_code, warm.error_message)  # the bell, not upkeep
    # The worker's round after that job left its group's standing offer for the model it holds.
    with stack.services.db.session() as s:
        assert s.get(FleetOffer, (GROUP, "fake-good", 0)) is not None

    holder = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
    holder.execute("UPDATE fleet_locks SET at = now() WHERE name = 'dispatch'")  # held until rollback
    answered: dict[str, Any] = {}

    def post(name: str) -> None:
        answered[name] = stack.submit({"model": "fake-good", **BODY})

    try:
        for name in ("offered", "queued"):
            request = threading.Thread(target=post, args=(name,))
            request.start()
            request.join(timeout=20)
            assert not request.is_alive(), "POST /jobs waited on the fleet lock"
            if name == "offered":  # took the offer in its own transaction: sent, claimed, run
                assert stack.job(answered[name]).dispatched_to == GROUP
                started = stack.wait(answered[name], statuses=("running", "succeeded", "failed"), timeout=20)
                assert started.status in ("running", "succeeded"), started.error_message
        job = stack.job(answered["queued"])  # the group is busy: this one waits for a round
        assert job.status == "queued" and job.dispatched_to is None  # and the round waits on the lock
    finally:
        released = time.monotonic()
        holder.rollback()
        holder.close()
    stack.wait(answered["queued"], statuses=("running", "succeeded", "failed"), timeout=MAINTENANCE_SECONDS)
    assert time.monotonic() - released < MAINTENANCE_SECONDS / 2, "dispatched by upkeep, not at once"
    for name in ("offered", "queued"):
        done = stack.wait(answered[name], timeout=60)
        assert done.status == "succeeded" and done.attempts == 1, (done.error_code, done.error_message)
