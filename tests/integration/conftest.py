"""Real parts for end-to-end tests: a redis-server we own, real Celery worker processes, the real app.

Each stack has its own Redis (on a unix socket, so tests can kill and restart it), its own SQLite
database and local object store under tmp, and worker processes started exactly as users start
them (``jobservice worker --devices cpu``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from jobservice.cli.embedded import exported, redis_binary
from jobservice.db.migrate import upgrade
from jobservice.db.tables import Job, JobEvent
from jobservice.http.app import create_app
from jobservice.jobs.queries import events_of, get_job
from jobservice.wiring import Services, build_services
from tests.conftest import MOTO_CREDENTIALS, ROOT, make_settings


class RedisServer:
    """A redis-server on a unix socket that a test may stop and restart (empty)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.sock = folder / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+socket://{self.sock}"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [
            redis_binary(),
            "--port",
            "0",
            "--unixsocket",
            str(self.sock),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.folder),
            "--logfile",
            str(self.folder / "redis.log"),
        ]
        self.process = subprocess.Popen(argv, start_new_session=True)
        client = redis.Redis(unix_socket_path=str(self.sock), socket_timeout=1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.sock.unlink(missing_ok=True)


@dataclass
class WorkerProcess:
    """A ``jobservice worker`` process group."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=15)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill(signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Stack:
    """Settings, services, the app's test client, and worker processes of one test stack."""

    tmp: Path
    redis: RedisServer
    services: Services
    env: dict[str, str]
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def client(self) -> Any:
        if not hasattr(self, "_client"):
            self._client = create_app(services=self.services).test_client()
        return self._client

    def start_worker(
        self, name: str = "w1", devices: str = "cpu", extra_env: dict[str, str] | None = None
    ) -> WorkerProcess:
        log = self.tmp / f"worker-{name}-{len(self.workers)}.log"
        env = {**self.env, **(extra_env or {})}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "jobservice.cli.main",
                    "worker",
                    "--devices",
                    devices,
                    "--name",
                    f"{name}@test",
                ],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(name, process, log)
        self.workers.append(worker)
        return worker

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``jobservice ...`` as a user or an operator would, against this stack."""
        return subprocess.run(
            [sys.executable, "-m", "jobservice.cli.main", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def submit(self, body: dict[str, Any]) -> str:
        response = self.client.post("/jobs", json=body)
        assert response.status_code == 202, response.get_data(as_text=True)
        return str(response.get_json()["id"])

    def job(self, job_id: str) -> Job:
        with self.services.db.session() as s:
            job = get_job(s, uuid.UUID(job_id))
        assert job is not None
        return job

    def events(self, job_id: str) -> list[JobEvent]:
        with self.services.db.session() as s:
            return events_of(s, uuid.UUID(job_id))

    def wait(
        self,
        job_id: str,
        *,
        statuses: tuple[str, ...] = ("succeeded", "failed", "canceled"),
        timeout: float = 90.0,
        predicate: Any = None,
    ) -> Job:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if (predicate and predicate(job)) or (not predicate and job.status in statuses):
                return job
            time.sleep(0.1)
        logs = "\n".join(f"--- {w.name}\n{w.log_text()[-4000:]}" for w in self.workers)
        raise AssertionError(
            f"job {job_id} is {self.job(job_id).status}/{self.job(job_id).stage} after {timeout}s\n{logs}"
        )

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.redis.stop()
        self.services.db.dispose()


def build_stack(tmp: Path, *, server: RedisServer | None = None, **overrides: object) -> Stack:
    """A stack on a private Redis (``server``, or one made under ``tmp``) with the fake zoo."""
    server = server or RedisServer(tmp / "redis")
    server.start()
    settings = make_settings(
        tmp / "var", broker_url=server.url, catalog_extra=["tests.fakes.zoo:specs"], **overrides
    )
    upgrade(settings.resolved_database_url())
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update({f"JOBSERVICE_{k.upper()}": v for k, v in exported(settings).items()})
    env["JOBSERVICE_DATABASE_URL"] = settings.resolved_database_url()
    env["PYTHONPATH"] = str(ROOT)
    return Stack(tmp=tmp, redis=server, services=build_services(settings), env=env)


@pytest.fixture
def prod_stack(tmp_path: Path, pg_url: str, moto_server: str) -> Iterator[Stack]:
    """A stack on PostgreSQL and S3 (moto's server), as production runs, no worker started yet."""
    s = build_stack(
        tmp_path,
        database_url=pg_url,
        storage_backend="s3",
        s3_bucket=f"jobs-{uuid.uuid4().hex[:12]}",
        s3_endpoint_url=moto_server,
        s3_access_key_id=MOTO_CREDENTIALS["aws_access_key_id"],
        s3_secret_access_key=MOTO_CREDENTIALS["aws_secret_access_key"],
    )
    yield s
    s.close()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A fresh stack with no worker started yet."""
    s = build_stack(tmp_path)
    yield s
    s.close()


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack with one CPU worker, shared by a module's tests."""
    s = build_stack(tmp_path_factory.mktemp("stack"))
    s.start_worker("shared")
    yield s
    s.close()
