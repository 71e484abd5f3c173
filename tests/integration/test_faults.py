"""No fault loses or doubles a job: real worker processes SIGKILLed again and again, the broker
killed mid-run (with a worker dying while it is away), and every job still ends exactly once with
a video that decodes."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Stack
from tests.integration.faultkit import (
    TcpRedisServer,
    all_done,
    assert_each_succeeded_once,
    fault_stack,
    kill_child_only,
    running_on,
    submit_many,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRAMES = 24  # fake-good: 24 frames at 0.05 s a step, about 1.5 s a job with its encode and checks
JOB = {"num_frames": FRAMES, "step_seconds": 0.05}


@pytest.fixture
def tcp_stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack on a private Redis on a free TCP port; enough attempts for repeated kills."""
    s = fault_stack(tmp_path, TcpRedisServer(tmp_path / "redis"), max_attempts=10)
    yield s
    s.close()


def test_repeated_sigkills_of_the_worker_lose_and_double_nothing(tcp_stack: Stack) -> None:
    stack = tcp_stack
    ids = submit_many(stack, 8, **JOB)
    worker = stack.start_worker("k0")
    kills: list[str] = []
    killed: set[tuple[str, int]] = set()
    for round_ in range(4):
        victim = running_on(stack, ids, worker.name, timeout=60, killed=killed)
        if victim is None:
            break
        killed.add((str(victim.id), victim.attempts))
        if round_ % 2 == 0:  # the Celery parent and its child together: start a new worker
            worker.kill(signal.SIGKILL)
            kills.append(f"group while {str(victim.id)[:8]} ran")
            worker = stack.start_worker(f"k{round_ + 1}")
        else:  # only the pool child: the parent forks another and its reaper requeues the job
            kill_child_only(worker)
            kills.append(f"child while {str(victim.id)[:8]} ran")
            time.sleep(0.5)
    assert len(kills) >= 3, f"too few kills landed on a running job: {kills}"
    all_done(stack, ids, timeout=150)
    attempts = assert_each_succeeded_once(stack, ids, frames=FRAMES)
    # Each kill cost its run an attempt (one may race the end of its run: allowed).
    assert sum(attempts.values()) >= len(ids) + len(kills) - 1, (kills, attempts)


def test_broker_killed_mid_run_and_a_worker_dying_while_it_is_away(tcp_stack: Stack) -> None:
    """The reported stall: Redis killed, the worker gone too, and a worker started while Redis is
    away still requeues the dead run (the database is the truth); when Redis returns every job,
    including those submitted meanwhile, runs exactly once."""
    stack = tcp_stack
    ids = submit_many(stack, 5, **JOB)
    first = stack.start_worker("before")
    victim = running_on(stack, ids, first.name, timeout=60)
    assert victim is not None, "no job started"
    stack.redis.stop()  # SIGKILL: every queued message is gone with it
    first.kill(signal.SIGKILL)
    stack.start_worker("during")  # starts while the broker is away
    during = submit_many(stack, 2, **JOB)  # accepted; their messages wait for the broker
    wait_until(
        stack,
        [str(victim.id)],
        lambda js: js[0].status == "queued" and js[0].worker_id is None,
        timeout=30,
        what="the dead run to be requeued while the broker is away",
    )
    stack.redis.start()  # back, empty: the reaper re-sends what it lost
    all_done(stack, ids + during, timeout=120)
    assert_each_succeeded_once(stack, ids + during, frames=FRAMES)
    assert stack.job(str(victim.id)).attempts == 2
