#!/usr/bin/env python3
"""A year of history: the API's reads, submits and the reaper over a million-job PostgreSQL table.

Creates (drops and recreates) its own PostgreSQL database, migrates it with our Alembic
migrations and fills it server-side (``INSERT ... SELECT`` from ``generate_series``) with:

- 1,000,000 finished jobs over 3 models and 400 days (92 % succeeded, 6 % failed, 2 % canceled;
  5 tenants; params, timings, verdicts, retention marks) and their 3 job events each;
- one running nightly batch of 10,000 queued jobs (priority ``queue_batch_priority``), with their
  queue messages in the broker;
- 4 running jobs with live leases.

Then it starts its own Redis (unix socket) and the API under gunicorn with 2 processes
(``jobservice api --workers 2``, auth off, quotas out of the way), and measures over HTTP:

  list_p95_ms / list_status_p95_ms / list_model_p95_ms   GET /jobs?limit=50 (newest, ?status=failed,
                                                          ?model=reference-talking-head)
  list_deep_p95_ms        GET /jobs?limit=50&cursor=<cursor of page 20>
  get_queued_p95_ms       GET /jobs/<id> of random queued batch jobs (with their queue position)
  batch_jobs_p95_ms       GET /batches/<id>/jobs?limit=100, pages walked by cursor
  submit_rps / submit_p99_ms   POST /jobs (text2video JSON) paced at --rate for --seconds
  reap_ms                 one reaper pass in-process (median of 5), broker holding every message
  db_mb_per_million       pg_database_size / millions of jobs in the table

Its LAST line is one JSON object with those keys (and the goals it was measured against).

Usage: scripts/bench_scale.py [--jobs 1000000] [--reuse] [--rate 200] [--seconds 30]
  --reuse   keep an already filled database (drops only what a previous run submitted)
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobservice.broker import BrokerInspector, JobMessage, make_celery, send_job  # noqa: E402
from jobservice.cli.embedded import Child, start_redis, wait_http  # noqa: E402
from jobservice.db.engine import Database  # noqa: E402
from jobservice.db.migrate import upgrade  # noqa: E402
from jobservice.jobs.pages import encode_cursor  # noqa: E402
from jobservice.jobs.reaper import reap  # noqa: E402
from jobservice.settings import Settings  # noqa: E402
from scripts.bench_lib import QUOTAS_OFF  # noqa: E402

GOALS = {
    "list_p95_ms": 20.0,
    "list_status_p95_ms": 20.0,
    "list_model_p95_ms": 20.0,
    "list_deep_p95_ms": 20.0,
    "get_queued_p95_ms": 5.0,
    "submit_rps": 200.0,
    "submit_p99_ms": 100.0,
    "reap_ms": 100.0,
}
SERVER = "postgresql://postgres@127.0.0.1:5432"
BATCH_PRIORITY = 6
T = TypeVar("T")

FINISHED_SQL = """
INSERT INTO jobs (id, task, model, params, source, priority, status, stage, progress, input_keys,
    input_meta, output_key, report_key, error_code, error_message, attempts, max_attempts, worker_id,
    heartbeat_at, created_at, enqueued_at, claimed_at, started_at, finished_at, updated_at, timings,
    verdict, validation_summary, cold_start, tenant, expires_at, expired_at)
SELECT id, task, model,
    json_build_object('prompt', 'a short clip number ' || g, 'seed', g, 'num_frames', 49, 'fps', 24,
                      'width', 512, 'height', 320, 'steps', 20),
    CASE WHEN r3 < 0.85 THEN 'api' ELSE 'web' END, 0, status,
    'done', CASE WHEN status = 'succeeded' THEN 1.0 ELSE 0.6 END,
    CASE WHEN task = 'audio2video'
         THEN json_build_object('audio', 'jobs/' || id || '/inputs/audio.wav') ELSE '{}'::json END,
    CASE WHEN task = 'audio2video'
         THEN json_build_object('audio', json_build_object('duration_s', round((r4 * 20)::numeric, 2),
                                'sample_rate', 16000)) ELSE '{}'::json END,
    CASE WHEN status = 'succeeded' THEN 'jobs/' || id || '/video.mp4' END,
    CASE WHEN status <> 'canceled' THEN 'jobs/' || id || '/report.json' END,
    CASE WHEN status = 'failed' THEN 'model_error' END,
    CASE WHEN status = 'failed' THEN 'The model process exited with status 1.' END,
    1, 3, 'cpu@bench-host', finished, created, created, claimed, claimed + interval '0.2 s',
    finished, finished,
    json_build_object('queue_s', round(extract(epoch FROM claimed - created)::numeric, 3),
                      'generate_s', round((20 + r4 * 60)::numeric, 3), 'encode_s', 0.4,
                      'validate_s', 0.17, 'upload_s', 0.05),
    CASE WHEN status = 'succeeded' THEN 'pass' END,
    CASE WHEN status = 'succeeded'
         THEN json_build_object('failed_checks', json_build_array(), 'duration_s', 10.0,
                                'fps', 24, 'width', 512, 'height', 320) ELSE '{}'::json END,
    r4 < 0.02, tenant, created + interval '30 days',
    CASE WHEN created + interval '30 days' < now() THEN created + interval '30 days' END
FROM (
    SELECT *, created + (1 + r4 * 30) * interval '1 s' AS claimed,
           created + (25 + r4 * 70) * interval '1 s' AS finished
    FROM (
        SELECT g, id, r1, r2, r3, r4,
               CASE WHEN r1 < 0.5 THEN 'reference-t2v' WHEN r1 < 0.8 THEN 'reference-talking-head'
                    ELSE 'flashhead' END AS model,
               CASE WHEN r1 >= 0.5 AND r1 < 0.8 THEN 'audio2video'
                    WHEN r1 >= 0.8 THEN 'audio2video' ELSE 'text2video' END AS task,
               CASE WHEN r2 < 0.92 THEN 'succeeded' WHEN r2 < 0.98 THEN 'failed'
                    ELSE 'canceled' END AS status,
               (ARRAY['default', 'team-a', 'team-b', 'research', 'marketing'])[1 + (r3 * 5)::int %% 5]
                   AS tenant,
               now() - interval '400 days' - interval '1 day'
                   + (g::float8 / %(n)s) * interval '400 days' + r4 * interval '20 s' AS created
        FROM (SELECT g, gen_random_uuid() AS id, random() AS r1, random() AS r2, random() AS r3,
                     random() AS r4
              FROM generate_series(1, %(n)s) AS g) AS draws
    ) AS shaped
) AS timed
"""

EVENTS_SQL = """
INSERT INTO job_events (job_id, at, from_status, to_status, attempt, worker_id, detail, actor)
SELECT j.id,
       CASE k WHEN 1 THEN j.created_at WHEN 2 THEN j.claimed_at ELSE j.finished_at END,
       CASE k WHEN 1 THEN NULL WHEN 2 THEN 'queued' ELSE 'running' END,
       CASE k WHEN 1 THEN 'queued' WHEN 2 THEN 'running' ELSE j.status END,
       CASE k WHEN 1 THEN 0 ELSE 1 END,
       CASE k WHEN 1 THEN NULL ELSE j.worker_id END,
       CASE k WHEN 1 THEN 'submitted' WHEN 2 THEN 'claimed' ELSE j.status END,
       CASE k WHEN 1 THEN 'key_bench' ELSE 'worker:' || j.worker_id END
FROM jobs j CROSS JOIN generate_series(1, 3) AS k
WHERE j.status IN ('succeeded', 'failed', 'canceled')
"""

BATCH_SQL = """
INSERT INTO batches (id, name, spec_digest, spec, spec_text, origin, source, status, pinned,
    total_jobs, environment, results, created_at, submitted_at, updated_at, tenant)
VALUES (%(batch)s, 'nightly-regression', repeat('ab', 32), '{}', '', 'batches/nightly.yaml', 'beat',
    'running', false, %(n)s, '{}', '{}', %(start)s, %(start)s, %(start)s, 'default');
INSERT INTO jobs (id, task, model, params, source, priority, status, stage, progress, input_keys,
    input_meta, attempts, max_attempts, created_at, enqueued_at, updated_at, timings,
    validation_summary, batch_id, batch_case, batch_repeat, tenant, expires_at)
SELECT gen_random_uuid(), 'text2video', 'reference-t2v',
       json_build_object('prompt', 'nightly case ' || (g / 5), 'seed', g %% 5),
       'batch', %(priority)s, 'queued', 'queued', 0.0, '{}', '{}', 0, 3,
       %(start)s + g * interval '10 ms', %(start)s + g * interval '10 ms' + interval '5 ms',
       %(start)s + g * interval '10 ms', '{}', '{}', %(batch)s, 'case-' || lpad((g / 5)::text, 4, '0'),
       g %% 5, 'default', %(start)s + interval '30 days'
FROM generate_series(0, %(n)s - 1) AS g;
INSERT INTO jobs (id, task, model, params, source, priority, status, stage, progress, input_keys,
    input_meta, attempts, max_attempts, worker_id, lease_expires_at, heartbeat_at, created_at,
    enqueued_at, claimed_at, started_at, updated_at, timings, validation_summary, tenant, expires_at)
SELECT gen_random_uuid(), 'text2video', 'reference-t2v', json_build_object('prompt', 'live ' || g),
       'api', 0, 'running', 'generating', 0.4, '{}', '{}', 1, 3, 'cpu' || g || '@bench-host',
       now() + interval '1 hour', now(), now() - interval '2 min', now() - interval '2 min',
       now() - interval '110 s', now() - interval '110 s', now(), '{}', '{}', 'team-a',
       now() + interval '30 days'
FROM generate_series(1, 4) AS g;
"""


def admin(sql: str) -> None:
    """Run one statement on the server's maintenance database (CREATE/DROP DATABASE)."""
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(sql.encode())


def timed(label: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` and say how long it took (on stderr, so stdout stays the report)."""
    start = time.perf_counter()
    value = fn()
    print(f"  {label}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return value


# How migration 0009 counts the queue (per model, priority and tenant, with the seconds of video).
QUEUE_BACKFILL = importlib.import_module(
    "jobservice.db.migrations.versions.2026_12_03_0009_fleet_residency_usage_and_fair_share"
).BACKFILL


def fill(dsn: str, jobs: int, queued: int) -> None:
    """The history, the batch and the running jobs; indexes rebuilt once, then VACUUM ANALYZE."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("SET session_replication_role = replica")  # no per-row foreign-key triggers
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes i WHERE tablename IN ('jobs', 'job_events') "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)"
        ).fetchall()
        for name, _ in indexes:  # rebuilding once is much faster than maintaining them row by row
            conn.execute(f'DROP INDEX "{name}"'.encode())
        conn.execute("SELECT setseed(0.42)")
        timed(f"{jobs:,} finished jobs", lambda: conn.execute(FINISHED_SQL, {"n": jobs}))
        timed("their events", lambda: conn.execute(EVENTS_SQL))
        start = conn.execute(
            "SELECT date_trunc('day', now()) + interval '2 hours' - "
            "CASE WHEN now() < date_trunc('day', now()) + interval '2 hours' THEN interval '1 day' "
            "ELSE interval '0' END"
        ).fetchone()[0]  # type: ignore[index]
        batch = "00000000-0000-4000-8000-00000000ba7c"
        params = {"batch": batch, "n": queued, "start": start, "priority": BATCH_PRIORITY}
        for statement in filter(str.strip, BATCH_SQL.split(";\n")):
            timed(statement.split("(")[0].strip(), partial(conn.execute, statement.encode(), params))
        for _, definition in indexes:
            timed(definition.split(" ON ")[0], partial(conn.execute, definition.encode()))
        conn.execute("SET session_replication_role = origin")
        # The counters' triggers (migrations 0007, 0008) were off too: count what the fill made.
        for table in ("tenant_usage", "tenant_job_minutes", "queue_counts"):
            conn.execute(f"DELETE FROM {table}".encode())
        conn.execute(QUEUE_BACKFILL.encode())  # the migration's own count (per tenant, with seconds)
        conn.execute(
            "INSERT INTO tenant_usage (tenant, active_jobs) SELECT tenant, count(*) FROM jobs"
            " WHERE status IN ('queued', 'running') AND batch_id IS NULL GROUP BY tenant"
        )
        conn.execute(
            "INSERT INTO tenant_job_minutes (tenant, minute, jobs) SELECT tenant,"
            " date_trunc('minute', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*) FROM jobs"
            " WHERE created_at >= now() - interval '2 hours' GROUP BY 1, 2"
        )
        timed("VACUUM ANALYZE", lambda: conn.execute("VACUUM (ANALYZE) jobs, job_events, batches"))


def prepare(dsn: str, url: str, args: argparse.Namespace) -> None:
    """A migrated, filled database: new (dropped and recreated) or, with --reuse, the last one."""
    name = dsn.rsplit("/", 1)[1]
    if args.reuse:
        upgrade(url)  # new migrations (indexes) apply to the filled table
        with psycopg.connect(dsn, autocommit=True) as conn:  # what earlier runs submitted
            conn.execute("DELETE FROM jobs WHERE status = 'queued' AND batch_id IS NULL")
            conn.execute("VACUUM (ANALYZE) jobs")
        return
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{name}"')
    upgrade(url)
    fill(dsn, args.jobs, args.queued)


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``, in ms, 2 decimals."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 2)


class Client:
    """One keep-alive HTTP connection per thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.local = threading.local()

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, float]:
        """Status, body and elapsed ms of one request."""
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        start = time.perf_counter()
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, data, (time.perf_counter() - start) * 1000

    def get_json(self, path: str) -> Any:
        """A GET that must answer 200."""
        status, data, _ = self.call("GET", path)
        if status != 200:
            raise SystemExit(f"GET {path}: {status} {data[:300]!r}")
        return json.loads(data)

    def p95(self, paths: list[str], warmup: int = 5) -> tuple[float, float]:
        """p95 and p50 ms of GETting ``paths`` one after another (after a few warm-up requests)."""
        for path in paths[:warmup]:
            self.get_json(path)
        times = []
        for path in paths:
            status, data, ms = self.call("GET", path)
            if status != 200:
                raise SystemExit(f"GET {path}: {status} {data[:300]!r}")
            times.append(ms)
        return pct(times, 0.95), pct(times, 0.5)


def measure_reads(client: Client, dsn: str, requests: int) -> dict[str, float]:
    """The list, get and batch-page latencies."""
    figures: dict[str, float] = {}
    for key, path in (
        ("list_p95_ms", "/jobs?limit=50"),
        ("list_status_p95_ms", "/jobs?limit=50&status=failed"),
        ("list_model_p95_ms", "/jobs?limit=50&model=reference-talking-head"),
    ):
        figures[key], figures[key.replace("p95", "p50")] = timed(key, partial(client.p95, [path] * requests))
    cursor = None
    for _ in range(20):
        page = client.get_json("/jobs?limit=50" + (f"&cursor={cursor}" if cursor else ""))
        cursor = page["next_cursor"]
    with psycopg.connect(dsn) as conn:  # older cursors too: 20 pages into last month's history
        row = conn.execute(
            "SELECT created_at, id FROM jobs WHERE created_at < now() - interval '30 days' "
            "ORDER BY created_at DESC LIMIT 1 OFFSET 1000"
        ).fetchone()
        assert row is not None
        old = (row[0], row[1])  # a position: (created_at, id)
        queued = [r[0] for r in conn.execute("SELECT id FROM jobs WHERE status = 'queued'")]
        batch = conn.execute("SELECT id FROM batches LIMIT 1").fetchone()[0]  # type: ignore[index]
    paths = [f"/jobs?limit=50&cursor={cursor}", f"/jobs?limit=50&cursor={encode_cursor(old)}"]
    deep = timed("list_deep_p95_ms", lambda: client.p95(paths * (requests // 2)))
    figures["list_deep_p95_ms"], figures["list_deep_p50_ms"] = deep
    rng = random.Random(7)
    picks = [f"/jobs/{rng.choice(queued)}" for _ in range(requests)]
    figures["get_queued_p95_ms"], figures["get_queued_p50_ms"] = timed(
        "get_queued_p95_ms", lambda: client.p95(picks)
    )
    figures.update(timed("batch jobs", lambda: measure_batch_jobs(client, str(batch))))
    return figures


def measure_batch_jobs(client: Client, batch: str) -> dict[str, float]:
    """GET /batches/<id>/jobs: pages of 100 walked by cursor when paged, else the one full answer."""
    status, data, ms = client.call("GET", f"/batches/{batch}/jobs?limit=100")
    body = json.loads(data)
    if status != 200:
        raise SystemExit(f"GET /batches/{batch}/jobs: {status} {data[:300]!r}")
    if "next_cursor" not in body:  # not paged: one answer with every job
        return {
            "batch_jobs_p95_ms": round(ms, 2),
            "batch_jobs_paged": 0,
            "batch_jobs_rows": len(body["jobs"]),
        }
    times, rows, cursor = [ms], len(body["jobs"]), body["next_cursor"]
    while cursor and len(times) < 100:
        status, data, ms = client.call("GET", f"/batches/{batch}/jobs?limit=100&cursor={cursor}")
        body = json.loads(data)
        times.append(ms)
        rows += len(body["jobs"])
        cursor = body["next_cursor"]
    return {"batch_jobs_p95_ms": pct(times, 0.95), "batch_jobs_paged": 1, "batch_jobs_rows": rows}


def measure_submits(client: Client, rate: float, seconds: float) -> dict[str, float]:
    """POST /jobs paced at ``rate`` per second for ``seconds`` from 48 threads (open loop)."""
    total = int(rate * seconds)
    times: list[float] = []
    errors: list[int] = []  # statuses of refused submissions
    start = time.perf_counter() + 0.2

    def one(i: int) -> None:
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        body = json.dumps({"task": "text2video", "model": "reference-t2v", "prompt": f"submit {i}"})
        status, data, ms = client.call("POST", "/jobs", body.encode())
        if status == 202:
            times.append(ms)
        else:
            errors.append(status)

    with ThreadPoolExecutor(48) as pool:
        list(pool.map(one, range(total)))
    elapsed = time.perf_counter() - start
    if errors:
        print(f"  submit errors: {len(errors)} (first statuses {errors[:5]})", file=sys.stderr)
    return {
        "submit_rps": round(len(times) / elapsed, 1),
        "submit_p50_ms": pct(times, 0.5),
        "submit_p99_ms": pct(times, 0.99),
        "submit_errors": len(errors),
    }


GROUP = "bench@scale"  # the one card group the reaper sees online


def measure_reaper(url: str, broker: str, dsn: str) -> dict[str, float]:
    """Hand a group's worth of queued jobs to one card group with their messages sent, as the
    dispatcher leaves them (the rest wait in the table), then time reaper passes in-process
    (median of 5)."""
    settings = Settings(database_url=url, broker_url=broker)
    celery = make_celery(settings)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "UPDATE jobs SET dispatched_to = %s, enqueued_at = now() - interval '1 hour' WHERE id IN"
            " (SELECT id FROM jobs WHERE status = 'queued' ORDER BY priority DESC, created_at LIMIT 16)"
            " RETURNING id, priority",
            (GROUP,),
        ).fetchall()

    def publish() -> None:
        for job_id, priority in rows:
            send_job(celery, JobMessage(job_id=job_id, group=GROUP, priority=priority))

    timed(f"publish {len(rows):,} messages", publish)
    db = Database(url)
    inspector = BrokerInspector(broker)
    sent: list[str] = []
    passes = []
    for _ in range(6):
        t0 = time.perf_counter()
        result = reap(
            db,
            lambda message: sent.append(str(message.job_id)),
            lambda queues: inspector.pending_job_ids(queues, unacked_grace_seconds=settings.lease_seconds),
            lambda: {GROUP},
            resend_after_seconds=10,
        )
        passes.append((time.perf_counter() - t0) * 1000)
    inspector.close()
    if sent or result.changed:
        print(f"  reaper moved something: {result}", file=sys.stderr)
    return {"reap_ms": round(statistics.median(passes[1:]), 1), "reap_resent": len(sent)}


def database_size(dsn: str) -> dict[str, float]:
    """Megabytes per million jobs: the database, and the jobs and job_events tables."""
    with psycopg.connect(dsn) as conn:
        jobs, db, jobs_rel, events_rel = conn.execute(
            "SELECT (SELECT count(*) FROM jobs), pg_database_size(current_database()), "
            "pg_total_relation_size('jobs'), pg_total_relation_size('job_events')"
        ).fetchone()  # type: ignore[misc]
    millions = jobs / 1e6
    return {
        "jobs_in_table": jobs,
        "db_mb_per_million": round(db / 2**20 / millions, 1),
        "jobs_table_mb_per_million": round(jobs_rel / 2**20 / millions, 1),
        "events_table_mb_per_million": round(events_rel / 2**20 / millions, 1),
    }


def main() -> None:
    """Fill, serve, measure, print the JSON line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000, help="finished jobs of history")
    parser.add_argument("--queued", type=int, default=10_000, help="queued jobs of the nightly batch")
    parser.add_argument("--db", default="jobservice_bench_scale", help="database name (dropped first)")
    parser.add_argument("--reuse", action="store_true", help="keep the filled database of a last run")
    parser.add_argument("--requests", type=int, default=200, help="requests per read figure")
    parser.add_argument("--rate", type=float, default=200.0, help="target submits per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to submit")
    parser.add_argument("--port", type=int, default=18500 + os.getpid() % 400)
    args = parser.parse_args()

    dsn = f"{SERVER}/{args.db}"
    url = dsn.replace("postgresql://", "postgresql+psycopg://")
    timed("database ready", lambda: prepare(dsn, url, args))
    tmp = Path(tempfile.mkdtemp(prefix="jobservice-bench-scale-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    redis_child, broker = start_redis(tmp / "var", env)
    env.update(
        {
            "JOBSERVICE_VAR_DIR": str(tmp / "var"),
            "JOBSERVICE_DATABASE_URL": url,
            "JOBSERVICE_BROKER_URL": broker,
            "JOBSERVICE_LOG_LEVEL": "WARNING",
            **QUOTAS_OFF,
        }
    )
    api = Child(
        "api",
        [sys.executable, "-m", "jobservice.cli.main", "api", "--port", str(args.port), "--workers", "2"],
        env,
        tmp / "api.log",
    )
    figures: dict[str, Any] = {}
    try:
        api.start()
        wait_http(f"http://127.0.0.1:{args.port}/healthz", api)
        client = Client(args.port)
        figures.update(measure_reads(client, dsn, args.requests))
        figures.update(timed("reaper", lambda: measure_reaper(url, broker, dsn)))
        figures.update(database_size(dsn))
        figures.update(timed("submits", lambda: measure_submits(client, args.rate, args.seconds)))
    finally:
        api.stop(signal.SIGTERM, grace=10)
        redis_child.stop(signal.SIGTERM, grace=5)
        shutil.rmtree(tmp, ignore_errors=True)
    figures["load_avg_1m"] = round(os.getloadavg()[0], 2)
    figures["goals"] = GOALS
    for key, goal in GOALS.items():
        ok = figures[key] >= goal if key == "submit_rps" else figures[key] <= goal
        print(f"{key:<22} {figures[key]:>10} (goal {goal:g}) {'ok' if ok else 'MISSED'}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
