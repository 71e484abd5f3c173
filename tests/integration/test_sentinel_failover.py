"""A broker that fails over (issue 24, item 2): a Redis primary, a replica and three sentinels on
this machine; the primary is killed while jobs run; the replica is promoted, the worker and the API
reconnect through the sentinels, and every job ends exactly once."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from jobservice.broker import redis_client
from jobservice.cli.embedded import redis_binary
from jobservice.db.tables import JobStatus
from tests.conftest import free_port
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MASTER = "jobservice"  # the settings' default broker_sentinel_master


def _count(answer: object) -> int:
    """The length of a list answer from a sentinel (redis-py types it as list | bool)."""
    return len(answer) if isinstance(answer, list) else -1


class SentinelCluster:
    """A primary, a replica and three sentinels (quorum 2), each a redis-server process we own.
    Duck-types the tests' RedisServer: ``url``, ``start``, ``stop``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.primary_port, self.replica_port = free_port(), free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return ";".join(f"sentinel://127.0.0.1:{port}" for port in self.sentinel_ports) + "/0"

    def _run(self, name: str, *argv: str) -> None:
        folder = self.folder / name
        folder.mkdir(parents=True, exist_ok=True)
        log = str(folder / "redis.log")
        self.processes[name] = subprocess.Popen(
            [*argv, "--dir", str(folder), "--logfile", log], start_new_session=True
        )

    def start(self) -> None:
        base = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
        self._run("primary", redis_binary(), "--port", str(self.primary_port), *base)
        self._run(
            "replica",
            redis_binary(),
            "--port",
            str(self.replica_port),
            "--replicaof",
            "127.0.0.1",
            str(self.primary_port),
            *base,
        )
        for index, port in enumerate(self.sentinel_ports):
            conf = self.folder / f"sentinel-{index}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 10000\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            self._run(f"sentinel-{index}", redis_binary(), str(conf), "--sentinel")
        # Ready when the replica is in sync and every sentinel knows the replica and the others.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                role = redis.Redis(port=self.replica_port, socket_timeout=1).info("replication")
                views = [redis.Redis(port=p, socket_timeout=1) for p in self.sentinel_ports]
                if role.get("master_link_status") == "up" and all(
                    _count(v.sentinel_slaves(MASTER)) == 1 and _count(v.sentinel_sentinels(MASTER)) == 2
                    for v in views
                ):
                    return
            time.sleep(0.2)
        raise RuntimeError("the sentinel cluster did not come up")

    def primary(self) -> int:
        """The port the sentinels name as the primary now."""
        view = redis.Redis(port=self.sentinel_ports[0], socket_timeout=1)
        address = view.sentinel_get_master_addr_by_name(MASTER)
        assert isinstance(address, tuple), address
        return int(address[1])

    def kill(self, name: str) -> None:
        self.processes[name].kill()
        self.processes[name].wait(timeout=10)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


@pytest.fixture
def sentinel_stack(tmp_path: Path) -> Iterator[tuple[Stack, SentinelCluster]]:
    cluster = SentinelCluster(tmp_path / "redis")
    stack = build_stack(tmp_path, server=cluster)  # type: ignore[arg-type]
    yield stack, cluster
    stack.close()


def test_the_primary_dies_while_jobs_run_and_nothing_is_lost_or_run_twice(
    sentinel_stack: tuple[Stack, SentinelCluster],
) -> None:
    stack, cluster = sentinel_stack
    assert stack.services.settings.broker_url.startswith("sentinel://")
    stack.start_worker("w1")
    jobs = [stack.submit({"model": "fake-good", "num_frames": 16, "step_seconds": 0.05}) for _ in range(6)]
    stack.wait(jobs[0], statuses=("succeeded",))
    stack.wait(jobs[1], predicate=lambda j: j.status == "running")

    killed_at = time.monotonic()
    cluster.kill("primary")
    # The sentinels promote the replica; the API's readiness and the rate counters follow them.
    deadline = killed_at + 30
    while time.monotonic() < deadline and cluster.primary() != cluster.replica_port:
        time.sleep(0.2)
    assert cluster.primary() == cluster.replica_port, "the replica was not promoted"
    answering = None
    while time.monotonic() < deadline:
        ready = stack.client.get("/readyz").get_json()
        if ready["checks"]["broker"]["ok"]:
            answering = time.monotonic() - killed_at
            break
        time.sleep(0.2)
    assert answering is not None and answering < 30, "the API did not reach the new primary in 30 s"
    client = redis_client(stack.services.settings.broker_url, sentinel_master=MASTER, timeout=2)
    assert int(client.info("server")["tcp_port"]) == cluster.replica_port

    jobs += [stack.submit({"model": "fake-good", "num_frames": 16, "step_seconds": 0.05}) for _ in range(3)]
    for job_id in jobs:
        job = stack.wait(job_id, timeout=150)
        assert job.status == JobStatus.SUCCEEDED, (job_id, job.error_code, job.error_message)
        events = stack.events(job_id)
        ends = [e for e in events if e.to_status in ("succeeded", "failed", "canceled")]
        assert len(ends) == 1, f"job {job_id} ended {len(ends)} times"
        runs = [e for e in events if e.to_status == "running"]
        assert len(runs) == 1 and job.attempts == 1, f"job {job_id} ran {len(runs)} times"
        outputs = list(stack.services.store.list(f"jobs/{job_id}/output"))
        assert len(outputs) == 1
    print(f"failover: the API answered again {answering:.1f} s after the primary was killed")
