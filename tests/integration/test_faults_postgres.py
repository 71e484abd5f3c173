"""PostgreSQL restarted under a running queue: heartbeats and final writes ride out a short
outage; a run that cannot renew its lease through a long one stops, and the reaper gives the job
to another attempt. Every job ends exactly once with a video that decodes.

The cluster is the test's own (initdb into a temp folder, a free port); the shared server at
127.0.0.1:5432 is never touched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import RedisServer
from tests.integration.faultkit import (
    PostgresCluster,
    all_done,
    assert_each_succeeded_once,
    fault_stack,
    running_on,
    submit_many,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRAMES = 24


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    pg = PostgresCluster()
    pg.init()
    yield pg
    pg.destroy()


def test_postgres_restart_during_a_run(tmp_path: Path, cluster: PostgresCluster) -> None:
    # A lease long enough to outlive the restart: the runs in flight keep their jobs.
    url = cluster.database("restart")
    stack = fault_stack(tmp_path, RedisServer(tmp_path / "redis"), database_url=url, lease_seconds=8.0)
    try:
        ids = submit_many(stack, 6, num_frames=FRAMES, step_seconds=0.05)
        worker = stack.start_worker("pg")
        assert running_on(stack, ids, worker.name, timeout=60) is not None
        cluster.stop("fast")  # every connection is cut
        time.sleep(2.0)  # the run finishes its frames meanwhile; its final write must wait
        cluster.start()
        all_done(stack, ids, timeout=120)
        assert_each_succeeded_once(stack, ids, frames=FRAMES)
        log = worker.log_text()
        assert "database unavailable for the final write" in log or "heartbeat failed" in log, log[-3000:]
    finally:
        stack.close()


def test_a_run_that_cannot_renew_its_lease_stops_and_the_job_is_retried(
    tmp_path: Path, cluster: PostgresCluster
) -> None:
    url = cluster.database("lease")
    stack = fault_stack(tmp_path, RedisServer(tmp_path / "redis"), database_url=url, lease_seconds=3.0)
    try:
        [job_id] = submit_many(stack, 1, num_frames=120, step_seconds=0.05)  # about 6 s of frames
        worker = stack.start_worker("pg")
        assert running_on(stack, [job_id], worker.name, timeout=60) is not None
        cluster.stop("fast")
        time.sleep(4.0)  # longer than the lease
        cluster.start()
        all_done(stack, [job_id], timeout=120)
        attempts = assert_each_succeeded_once(stack, [job_id], frames=120)
        assert attempts[job_id] == 2, "the first run gave the job up; a second attempt finished it"
        log = worker.log_text()
        assert "stopping the run" in log and "'lease_lost'" in log, log[-3000:]
    finally:
        stack.close()
