#!/usr/bin/env python3
"""How many live event streams one API process holds, and how fast they hear of a change.

Starts a throwaway stack in a temporary folder (its own Redis on a unix socket, SQLite or the
database of --database-url, no worker) and ``jobservice api`` under gunicorn with ONE worker
process and --threads threads. It records --streams queued jobs straight into the database, opens
one ``GET /jobs/<id>/stream`` per job at once (a thread each here), and for --hold seconds:

- counts the streams that got their first event within --grace seconds (served) and those still
  waiting (gunicorn's gthread worker holds one thread per open stream: the rest queue);
- writes the progress of a few jobs every second, as a worker's heartbeat does, and times the
  write -> event delay on their streams;
- times ``GET /healthz`` while the streams are open (does the process still answer others?);
- reads the keep-alive gaps (the stream heartbeat is set to --heartbeat seconds).

The last line is one JSON object. Usage:
  scripts/bench_streams.py [--streams 200] [--threads 64] [--hold 20] [--database-url URL] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import update

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobservice.cli.embedded import Child, start_redis, wait_http  # noqa: E402
from jobservice.db.engine import Database  # noqa: E402
from jobservice.db.migrate import upgrade  # noqa: E402
from jobservice.db.tables import Job  # noqa: E402
from jobservice.jobs.transitions import record_created  # noqa: E402
from jobservice.jobs.watch import read_job_states  # noqa: E402


@dataclass
class Client:
    """One open stream, as seen from outside."""

    job_id: uuid.UUID
    opened: float = 0.0
    first_event: float | None = None
    last_line: float | None = None
    max_gap: float = 0.0
    keep_alives: int = 0
    progress_seen: dict[float, float] = field(default_factory=dict)  # progress -> when received
    error: str | None = None


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of ``values``, in ms, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def read(base: str, client: Client, stop: threading.Event) -> None:
    """Hold one stream open until ``stop``, noting when each line arrives."""
    client.opened = time.monotonic()
    try:
        with requests.get(f"{base}/jobs/{client.job_id}/stream", stream=True, timeout=(60, 60)) as response:
            if response.status_code != 200:
                client.error = f"HTTP {response.status_code}"
                return
            for line in response.iter_lines(chunk_size=None, decode_unicode=True):
                now = time.monotonic()
                if client.last_line is not None and client.first_event is not None:
                    client.max_gap = max(client.max_gap, now - client.last_line)
                client.last_line = now
                if line.startswith("data: "):
                    client.first_event = client.first_event or now
                    client.progress_seen.setdefault(json.loads(line[6:])["progress"], now)
                elif line == ": keep-alive":
                    client.keep_alives += 1
                if stop.is_set():
                    return
    except requests.RequestException as exc:
        if not stop.is_set():
            client.error = type(exc).__name__


def start_api(
    var: Path, *, threads: int, heartbeat: float, database_url: str | None
) -> tuple[list[Child], str, str]:
    """Redis and ``jobservice api`` (one process); the children, the base URL and the database URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    redis_child, broker = start_redis(var, env)
    db_url = database_url or f"sqlite:///{var / 'jobservice.db'}"
    upgrade(db_url)
    env.update(
        {
            "JOBSERVICE_VAR_DIR": str(var),
            "JOBSERVICE_DATABASE_URL": db_url,
            "JOBSERVICE_BROKER_URL": broker,
            "JOBSERVICE_LOG_LEVEL": "WARNING",
            "JOBSERVICE_AUTH": "off",
            "JOBSERVICE_STREAM_HEARTBEAT_SECONDS": str(heartbeat),
            "JOBSERVICE_STREAM_MAX_SECONDS": "3600",  # the bench measures holding, not reconnecting
            "PYTHONUNBUFFERED": "1",
        }
    )
    port = 19000 + os.getpid() % 1000
    argv = [sys.executable, "-m", "jobservice.cli.main", "api", "--port", str(port)]
    api = Child("api", [*argv, "--workers", "1", "--threads", str(threads)], env, var / "api.log")
    api.start()
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", api)
    return [redis_child, api], base, db_url


def make_jobs(db: Database, count: int) -> list[uuid.UUID]:
    """``count`` queued jobs recorded as POST /jobs records them (no worker will take them)."""
    ids = []
    for _ in range(count):
        job = Job(
            id=uuid.uuid4(), task="text2video", model="reference-t2v", params={"prompt": "x"}, max_attempts=1
        )
        with db.session() as session:
            record_created(session, job)
        ids.append(job.id)
    return ids


def time_watch_query(db: Database, ids: list[uuid.UUID], rounds: int = 20) -> float | None:
    """The median time of the watcher's one query over every watched job, in ms."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        with db.session() as session:
            read_job_states(session, ids)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def drive(db: Database, base: str, clients: list[Client], hold: float) -> tuple[list[float], list[float]]:
    """Write progress on a few jobs each second and time /healthz; the change and health delays."""
    movers = clients[:: max(1, len(clients) // 10)][:10]
    writes: list[tuple[float, float, Client]] = []
    health: list[float] = []
    deadline = time.monotonic() + hold
    step = 0
    while time.monotonic() < deadline:
        step += 1
        value = round(step / 1000, 4)
        with db.session() as session:
            session.execute(update(Job).where(Job.id.in_([c.job_id for c in movers])).values(progress=value))
        written = time.monotonic()
        writes.extend((value, written, c) for c in movers)
        started = time.monotonic()
        try:
            requests.get(f"{base}/healthz", timeout=30)
            health.append(time.monotonic() - started)
        except requests.RequestException:
            health.append(30.0)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - written)))
    time.sleep(1.0)
    delays = [c.progress_seen[v] - t for v, t, c in writes if v in c.progress_seen]
    return delays, health


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--threads", type=int, default=64, help="gunicorn threads of the one API process")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds the streams stay open")
    parser.add_argument("--grace", type=float, default=5.0, help="a stream counts as served within this")
    parser.add_argument("--heartbeat", type=float, default=2.0)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="jobservice-bench-streams-"))
    children, base, db_url = start_api(
        tmp / "var", threads=args.threads, heartbeat=args.heartbeat, database_url=args.database_url
    )
    db = Database(db_url)
    stop = threading.Event()
    try:
        clients = [Client(job_id) for job_id in make_jobs(db, args.streams)]
        watch_ms = time_watch_query(db, [c.job_id for c in clients])
        readers = [threading.Thread(target=read, args=(base, c, stop), daemon=True) for c in clients]
        opened = time.monotonic()
        for reader in readers:
            reader.start()
        time.sleep(args.grace)
        served_in_grace = sum(c.first_event is not None for c in clients)
        served = [c for c in clients if c.first_event is not None]
        delays, health = drive(db, base, served, max(0.0, args.hold - args.grace))
        result = summarize(args, clients, served_in_grace, opened, delays, health)
        result["watch_query_ms_for_all_streams"] = watch_ms
    finally:
        stop.set()
        for child in reversed(children):
            child.stop(signal.SIGTERM, grace=10)
        db.dispose()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{result['served']}/{args.streams} streams served by one API process with {args.threads} threads")
    print(json.dumps(result))


def summarize(
    args: argparse.Namespace,
    clients: list[Client],
    served_in_grace: int,
    opened: float,
    delays: list[float],
    health: list[float],
) -> dict[str, Any]:
    """The figures of one run."""
    served = [c for c in clients if c.first_event is not None]
    first = [c.first_event - opened for c in served if c.first_event is not None]
    gaps = [c.max_gap for c in served if c.keep_alives]
    return {
        "streams": args.streams,
        "threads": args.threads,
        "served_within_grace": served_in_grace,
        "served": len(served),
        "refused_503": sum(c.error == "HTTP 503" for c in clients),
        "waiting": sum(c.first_event is None and c.error is None for c in clients),
        "errors": sum(c.error is not None and c.error != "HTTP 503" for c in clients),
        "first_event_ms_p50": pct(first, 0.5),
        "first_event_ms_p95": pct(first, 0.95),
        "change_to_event_ms_p50": pct(delays, 0.5),
        "change_to_event_ms_p95": pct(delays, 0.95),
        "changes_timed": len(delays),
        "healthz_ms_p50": pct(health, 0.5),
        "healthz_ms_max": pct(health, 1.0),
        "heartbeat_s": args.heartbeat,
        "keep_alive_max_gap_s": round(max(gaps), 2) if gaps else None,
        "keep_alives_median": statistics.median([c.keep_alives for c in served]) if served else 0,
    }


if __name__ == "__main__":
    main()
