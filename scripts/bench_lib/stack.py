"""A throwaway stack for benchmarks: its own Redis (unix socket), SQLite, local object store, the
API under gunicorn and one CPU worker with its models preloaded, all under one temporary folder."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from jobservice.cli.embedded import Child, start_redis, wait_http  # noqa: E402
from jobservice.db.engine import Database  # noqa: E402
from jobservice.db.migrate import upgrade  # noqa: E402

TERMINAL = {"succeeded", "failed", "canceled"}


@dataclass
class BenchStack:
    """Redis, SQLite, the API and one worker; ``deployment`` is an optional deployment file."""

    deployment: Path | None = None
    keep: bool = False
    devices: str = "cpu"  # the main worker's card group
    preload: bool = True  # False: each model's first job is a cold start
    worker_env: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # for every process (API and workers)
    # More workers beyond the main one: (devices, models), e.g. ("npu:0", ["soulx-flashhead-1.3b"]),
    # or (devices, models, more `jobservice worker` options), e.g. [..., ["--name", "b"]].
    more_workers: list[tuple[str, list[str]] | tuple[str, list[str], list[str]]] = field(default_factory=list)
    worker_args: list[str] = field(default_factory=list)  # more options of the main worker
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="jobservice-bench-")))
    children: list[Child] = field(default_factory=list)

    @property
    def var(self) -> Path:
        """The stack's state folder (database, object store, logs)."""
        return self.tmp / "var"

    @property
    def store_root(self) -> Path:
        """Where the local object store keeps its objects."""
        return self.var / "objects"

    def start(self) -> BenchStack:
        """Start everything and wait for the API to answer."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
        redis_child, broker = start_redis(self.var, env)
        self.children.append(redis_child)
        db_url = f"sqlite:///{self.var / 'jobservice.db'}"
        upgrade(db_url)
        env.update(
            {
                "JOBSERVICE_VAR_DIR": str(self.var),
                "JOBSERVICE_DATABASE_URL": db_url,
                "JOBSERVICE_BROKER_URL": broker,
                "JOBSERVICE_LOG_LEVEL": "WARNING",
                "JOBSERVICE_AUTH": "off",  # loopback only, as under `jobservice up`
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.deployment is not None:
            env["JOBSERVICE_DEPLOYMENT_FILE"] = str(self.deployment)
        env.update(self.env)
        port = 18000 + os.getpid() % 1000
        me = [sys.executable, "-m", "jobservice.cli.main"]
        worker = [*me, "worker", "--devices", self.devices, "--loglevel", "WARNING"]
        worker.append("--preload" if self.preload else "--no-preload")
        worker += self.worker_args
        api = [*me, "api", "--port", str(port), "--workers", "1", "--threads", "4"]
        self.children.append(Child("worker", worker, {**env, **self.worker_env}, self.var / "worker.log"))
        for n, (devices, models, *options) in enumerate(self.more_workers):
            argv = [*me, "worker", "--devices", devices, "--loglevel", "WARNING"]
            argv += ["--models", ",".join(models)] if models else []
            argv += [str(o) for more in options for o in more]
            self.children.append(Child(f"worker{n + 1}", argv, env, self.var / f"worker{n + 1}.log"))
        self.children.append(Child("api", api, env, self.var / "api.log"))
        for child in self.children[1:]:
            child.start()
        self.base = f"http://127.0.0.1:{port}"
        wait_http(f"{self.base}/healthz", self.children[-1])
        self.db = Database(db_url)
        return self

    def close(self) -> None:
        """Stop every child and (unless kept) remove the folder."""
        for child in reversed(self.children):
            child.stop(signal.SIGTERM, grace=10)
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> BenchStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- jobs ----------------------------------------------------------------------------
    def submit_json(self, body: dict[str, Any]) -> str:
        """POST /jobs with a JSON body; the job id."""
        response = requests.post(f"{self.base}/jobs", json=body, timeout=60)
        response.raise_for_status()
        return str(response.json()["id"])

    def submit_a2v(self, *, image: Path, audio: Path, fields: dict[str, Any]) -> str:
        """POST /jobs as multipart (a portrait and a speech file); the job id."""
        with image.open("rb") as img, audio.open("rb") as wav:
            response = requests.post(
                f"{self.base}/jobs",
                data={k: str(v) for k, v in fields.items()},
                files={"image": img, "audio": wav},
                timeout=60,
            )
        response.raise_for_status()
        return str(response.json()["id"])

    def wait(self, job_id: str, timeout: float = 300) -> dict[str, Any]:
        """Poll until the job ends; its view."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = requests.get(f"{self.base}/jobs/{job_id}", timeout=10).json()
            if job["status"] in TERMINAL:
                return job
            time.sleep(0.05)
        raise SystemExit(f"job {job_id} did not finish in {timeout}s; see {self.var}/worker.log")

    def report(self, job_id: str) -> dict[str, Any]:
        """The job's RunReport."""
        return requests.get(f"{self.base}/jobs/{job_id}/report", timeout=10).json()

    def row_times(self, job_id: str) -> tuple[Any, Any, Any]:
        """(created_at, claimed_at, finished_at) of the job's row."""
        from jobservice.jobs.queries import get_job

        with self.db.session() as session:
            row = get_job(session, uuid.UUID(job_id))
        assert row is not None and row.claimed_at and row.finished_at, job_id
        return row.created_at, row.claimed_at, row.finished_at
