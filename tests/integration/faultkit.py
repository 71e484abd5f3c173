"""Helpers of the fault tests: services a test owns and may break (a Redis on a free TCP port, a
PostgreSQL cluster of its own), patient waits that ride out outages, and the one verdict every
fault test gives: each job ended exactly once, with a video that decodes.

Never the shared Redis at 6379 or the shared PostgreSQL at 5432: other people use them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis
from sqlalchemy.exc import DBAPIError

from jobservice.cli.embedded import redis_binary
from jobservice.db.tables import Job
from jobservice.media.probe import probe_media
from tests.conftest import free_port
from tests.integration.conftest import RedisServer, Stack, WorkerProcess, build_stack

TERMINAL = ("succeeded", "failed", "canceled")


class TcpRedisServer(RedisServer):
    """A private redis-server on a free TCP port of 127.0.0.1 (killed and restarted by tests)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(self.folder), "--logfile", str(self.folder / "redis.log")]
        self.process = subprocess.Popen(argv, start_new_session=True)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")


def fault_stack(tmp: Path, server: RedisServer, **overrides: object) -> Stack:
    """A test stack (see tests/integration/conftest.py) on ``server``, with the fake zoo."""
    return build_stack(tmp, server=server, **overrides)


def patient_job(stack: Stack, job_id: str) -> Job | None:
    """The job's row, or None while the database is away."""
    try:
        return stack.job(job_id)
    except DBAPIError:
        stack.services.db.dispose()
        return None


def wait_until(
    stack: Stack, job_ids: list[str], predicate: Callable[[list[Job]], bool], *, timeout: float, what: str
) -> list[Job]:
    """Poll the jobs until ``predicate`` holds for all of them (riding out database outages)."""
    deadline = time.monotonic() + timeout
    jobs: list[Job | None] = []
    while time.monotonic() < deadline:
        jobs = [patient_job(stack, j) for j in job_ids]
        found = [j for j in jobs if j is not None]
        if len(found) == len(job_ids) and predicate(found):
            return found
        time.sleep(0.1)
    states = [(str(j.id)[:8], j.status, j.stage, j.attempts) if j else None for j in jobs]
    logs = "\n".join(f"--- {w.name}\n{w.log_text()[-3000:]}" for w in stack.workers)
    raise AssertionError(f"{what}: not within {timeout:.0f} s; jobs {states}\n{logs}\n{_who_holds_files()}")


def _who_holds_files() -> str:
    """File locks and live jobservice processes (why a database may be locked), for a failure message."""
    try:
        locks = Path("/proc/locks").read_text()
    except OSError:
        locks = "(no /proc/locks)"
    procs = []
    for proc in psutil.process_iter(["pid", "ppid", "status", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "jobservice" in cmd or "celery" in cmd:
            procs.append(
                f"{proc.info['pid']} (parent {proc.info['ppid']}, {proc.info['status']}): {cmd[:160]}"
            )
    return "--- /proc/locks\n" + locks + "--- processes\n" + "\n".join(procs)


def all_done(stack: Stack, job_ids: list[str], *, timeout: float) -> list[Job]:
    """Wait until every job is terminal."""
    return wait_until(
        stack,
        job_ids,
        lambda js: all(j.status in TERMINAL for j in js),
        timeout=timeout,
        what="jobs to finish",
    )


def assert_each_succeeded_once(stack: Stack, job_ids: list[str], *, frames: int) -> dict[str, int]:
    """Every job succeeded with exactly one move to ``succeeded`` in its events, and its video
    decodes to ``frames`` frames. Returns how many attempts the jobs took, by job."""
    attempts: dict[str, int] = {}
    for job_id in job_ids:
        job = stack.job(job_id)
        assert job.status == "succeeded", (job_id, job.status, job.error_code, job.error_message)
        moves = [(e.from_status, e.to_status) for e in stack.events(job_id)]
        assert [m for m in moves if m[1] == "succeeded"] == [("running", "succeeded")], moves
        assert sum(1 for m in moves if m[1] in TERMINAL) == 1, moves
        assert job.output_key is not None
        path = stack.services.store.local_path(job.output_key)
        assert path is not None and path.is_file()
        facts = probe_media(path, count_frames=True)
        assert facts.video is not None and facts.video.nb_read_frames == frames, (job_id, facts)
        attempts[job_id] = job.attempts
    return attempts


def kill_child_only(worker: WorkerProcess) -> int:
    """SIGKILL the Celery pool child that runs jobs (the parent stays and forks a new one)."""
    children = psutil.Process(worker.process.pid).children()
    assert children, "the worker has no pool child"
    os.kill(children[0].pid, signal.SIGKILL)
    return children[0].pid


def running_on(
    stack: Stack,
    job_ids: list[str],
    worker_name: str,
    *,
    timeout: float,
    killed: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset(),
) -> Job | None:
    """A job that ``worker_name`` is running past its first frames, if one shows up in time;
    ``killed``: (job id, attempt) of runs already killed, whose rows still say ``running``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job_id in job_ids:
            job = stack.job(job_id)
            owner = job.worker_id or ""
            live = (job_id, job.attempts) not in killed
            if (
                job.status == "running"
                and owner.startswith(f"{worker_name}@")
                and job.progress > 0.2
                and live
            ):
                return job
        if all(stack.job(j).status in TERMINAL for j in job_ids):
            return None
        time.sleep(0.05)
    return None


class PostgresCluster:
    """A PostgreSQL cluster of the test's own (initdb in a temp folder, a free port), run as the
    ``postgres`` OS user because the server refuses to run as root."""

    def __init__(self) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
        if not found:
            pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bin = found[-1].parent
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="jobservice-pg-"))
        self.data = self.folder / "data"
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")

    def database(self, name: str) -> str:
        """Create database ``name``; its SQLAlchemy URL."""
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *argv: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [*self._as_postgres, *argv], capture_output=True, text=True, timeout=timeout, cwd=self.folder
        )
        assert result.returncode == 0, f"{argv[0]} failed: {result.stdout}\n{result.stderr}"

    def init(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"
        )
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off"
        log = str(self.folder / "server.log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.SubprocessError, OSError):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def submit_many(stack: Stack, count: int, **params: object) -> list[str]:
    """``count`` fake-good jobs with ``params``; their ids."""
    return [
        stack.submit({"model": "fake-good", "prompt": f"job {i} {uuid.uuid4()}", **params})
        for i in range(count)
    ]
