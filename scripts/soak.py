"""A soak with faults: the whole service runs a stream of jobs while faults come one after another.

    python scripts/soak.py --minutes 30 --jobs 600 --seed 1      # the long soak (issue 24)
    python scripts/soak.py --minutes 3 --jobs 90 --seed 1        # what CI runs (tests/integration/test_soak.py)

A process soak, not a container soak: this machine kind has no Docker engine, so every part is a
process of this host, each the soak's own (never the shared Redis or PostgreSQL): a PostgreSQL
cluster (initdb in a temp folder), a redis-server, moto's S3 server, the API under gunicorn with
API keys on, two CPU workers serving the fake zoo (tests/fakes/zoo.py), and a webhook receiver.
Three tenants submit short jobs through the API (some with webhooks, some asking to retry a failed
gate, some canceled soon after), a regression batch runs among them (one case fails its gate by
design), and the beat delivers the webhooks, while a fault injector on
a seeded random schedule:

- kills a worker (SIGKILL of its process group) and starts it again after 2-5 s;
- restarts Redis (its queues are lost: the dispatcher and reaper must send again what was lost);
- restarts PostgreSQL (fast shutdown: every connection is cut);
- freezes the object store for 10-30 s (SIGSTOP of moto's server: requests hang, then go on);
- cuts a worker off for 20-60 s (SIGSTOP of its process group: no heartbeat, no broker, no
  database; its lease runs out and its job runs elsewhere; SIGCONT then wakes it, and what it
  writes must not double the job): the process-level form of ``docker network disconnect``.

At the end, once every accepted job has ended: each ended exactly once (one terminal event), every
succeeded job's video decodes with the frames asked for and matches its RunReport (size, sha256),
``jobservice check`` finds nothing (no orphan objects, no missing files), every webhook event in the
outbox reached the receiver exactly once, and /metrics counts what the table holds. The last line
is one JSON object; the exit status is 0 only when nothing was lost or doubled.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import free_port  # noqa: E402
from tests.integration.faultkit import PostgresCluster, TcpRedisServer  # noqa: E402

FRAMES = 12
TERMINAL = {"succeeded", "failed", "canceled"}
FAULTS = ("kill_worker", "restart_redis", "restart_postgres", "freeze_store", "cut_off_worker")


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


# --- the parts ----------------------------------------------------------------------------------
@dataclass
class Proc:
    """A child process in its own process group (so a kill or a stop reaches its children)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


class Receiver(ThreadingHTTPServer):
    """The webhook receiver: answers 204 and counts each message id it is sent."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", free_port()), _Hook)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the http.server interface
        self.rfile.read(int(self.headers.get("content-length") or 0))
        server = self.server
        assert isinstance(server, Receiver)
        with server.lock:
            server.seen[self.headers.get("webhook-id") or "?"] += 1
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        return


@dataclass
class Soak:
    """Everything the soak started, and what it saw."""

    args: argparse.Namespace
    tmp: Path
    rng: random.Random
    env: dict[str, str] = field(default_factory=dict)
    workers: list[Proc] = field(default_factory=list)
    api: Proc | None = None
    beat: Proc | None = None
    store: Proc | None = None
    base: str = ""
    keys: dict[str, str] = field(default_factory=dict)  # tenant -> secret ("admin" too)
    accepted: dict[str, str] = field(default_factory=dict)  # job id -> tenant
    refused: Counter[str] = field(default_factory=Counter)
    faults: list[dict[str, Any]] = field(default_factory=list)
    batch_id: str | None = None
    receiver_url: str = ""
    stop: threading.Event = field(default_factory=threading.Event)

    # --- setup ---------------------------------------------------------------------------------
    def start(self, pg: PostgresCluster, redis_server: TcpRedisServer, receiver: Receiver) -> None:
        store_port = free_port()
        self.store = Proc(
            "s3",
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(store_port)],
            dict(os.environ),
            self.tmp / "moto.log",
        )
        self.store.start()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
        self.env.update(
            {
                "PYTHONPATH": str(ROOT),
                "JOBSERVICE_VAR_DIR": str(self.tmp / "var"),
                "JOBSERVICE_DATABASE_URL": pg.database("soak"),
                "JOBSERVICE_BROKER_URL": redis_server.url,
                "JOBSERVICE_STORAGE_BACKEND": "s3",
                "JOBSERVICE_S3_BUCKET": "soak",
                "JOBSERVICE_S3_ENDPOINT_URL": f"http://127.0.0.1:{store_port}",
                "JOBSERVICE_S3_ACCESS_KEY_ID": "testing",
                "JOBSERVICE_S3_SECRET_ACCESS_KEY": "testing",
                "JOBSERVICE_AUTH": "keys",
                "JOBSERVICE_CATALOG_EXTRA": '["tests.fakes.zoo:specs"]',
                "JOBSERVICE_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
                "JOBSERVICE_LEASE_SECONDS": "8",
                "JOBSERVICE_HEARTBEAT_SECONDS": "1",
            }
        )
        self.cli("db", "upgrade")
        for tenant in ("alpha", "beta", "gamma"):
            self.keys[tenant] = self.new_key(tenant, "user")
        self.keys["admin"] = self.new_key("ops", "admin")
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        jobservice = str(Path(sys.executable).parent / "jobservice")
        self.api = Proc(
            "api", [jobservice, "api", "--port", str(port), "--threads", "8"], self.env, self.tmp / "api.log"
        )
        self.api.start()
        # The beat: nightly schedules and the webhook outbox's sweep and deliveries.
        self.beat = Proc("beat", [jobservice, "beat"], self.env, self.tmp / "beat.log")
        self.beat.start()
        for n in range(self.args.workers):
            worker = Proc(
                f"w{n}",
                [jobservice, "worker", "--devices", "cpu", "--name", f"w{n}@soak"],
                self.env,
                self.tmp / f"worker-{n}.log",
            )
            worker.start()
            self.workers.append(worker)
        self.wait_ready()
        self.receiver_url = receiver.url

    def cli(self, *argv: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "jobservice.cli.main", *argv],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"jobservice {' '.join(argv)}: {result.stderr[-2000:]}")
        return result.stdout

    def new_key(self, tenant: str, role: str) -> str:
        limits = ["--active-jobs", "100000", "--batch-jobs", "100000", "--jobs-per-hour", "1000000"]
        answer = json.loads(
            self.cli(
                "keys", "create", "--name", f"soak-{tenant}", "--tenant", tenant, "--role", role, "--json",
                "--requests-per-minute", "0", *limits,
            )
        )  # fmt: skip
        return str(answer["secret"])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                ready = requests.get(f"{self.base}/readyz", timeout=5).json()
                if ready.get("ready") and ready.get("workers_online", 0) >= self.args.workers:
                    return
            time.sleep(1)
        raise RuntimeError("the service did not become ready within 120 s")

    # --- load ----------------------------------------------------------------------------------
    def call(self, method: str, path: str, tenant: str, **kwargs: Any) -> requests.Response | None:
        """One API call, retried through outages (503, connection errors); the same
        Idempotency-Key on every try of a create, so a retry cannot make a second job."""
        headers = {"Authorization": f"Bearer {self.keys[tenant]}", **kwargs.pop("headers", {})}
        deadline = time.monotonic() + 120
        while True:
            try:
                response = requests.request(method, self.base + path, headers=headers, timeout=30, **kwargs)
                if response.status_code < 500:
                    return response
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                return None
            time.sleep(1)

    def submit(self, tenant: str, body: dict[str, Any]) -> str | None:
        key = str(uuid.uuid4())
        response = self.call("POST", "/jobs", tenant, json=body, headers={"Idempotency-Key": key})
        if response is None or response.status_code not in (200, 202):
            self.refused[str(response.status_code if response is not None else "unreachable")] += 1
            return None
        job_id = str(response.json()["id"])
        self.accepted[job_id] = tenant
        return job_id

    def load(self) -> None:
        """``--jobs`` jobs from three tenants, spread over the soak's minutes."""
        gap = self.args.minutes * 60 / self.args.jobs
        for n in range(self.args.jobs):
            if self.stop.is_set():
                return
            tenant = self.rng.choice(("alpha", "beta", "gamma"))
            body: dict[str, Any] = {"model": "fake-good", "prompt": f"soak {n}", "num_frames": FRAMES}
            roll = self.rng.random()
            if roll < 0.1:  # a retry on a failed gate: black below seed 1001, so two tries
                body = {"model": "fake-seeded", "num_frames": FRAMES, "seed": 1000, "good_from_seed": 1001}
                body["retry_on_validation_failure"] = 2
            if self.rng.random() < 0.25:
                body["webhook"] = self.receiver_url
            job_id = self.submit(tenant, body)
            if job_id and self.rng.random() < 0.05:
                time.sleep(self.rng.uniform(0, 1.5))
                self.call("POST", f"/jobs/{job_id}/cancel", tenant)
            if n == self.args.jobs // 3:
                self.start_batch()
            time.sleep(gap * self.rng.uniform(0.5, 1.5))

    def start_batch(self) -> None:
        spec = {
            "name": "soak",
            "repeat": 2,
            "cases": [
                {"name": "good", "model": "fake-good", "params": {"num_frames": FRAMES, "prompt": "batch"}},
                {"name": "black", "model": "fake-black", "params": {"num_frames": FRAMES}},
            ],
        }
        response = self.call(
            "POST", "/batches", "alpha", json={"spec": spec}, headers={"Idempotency-Key": "soak"}
        )
        if response is None or response.status_code not in (200, 202):
            self.refused["batch"] += 1
            return
        self.batch_id = str(response.json()["id"])

    # --- faults --------------------------------------------------------------------------------
    def inject(self, pg: PostgresCluster, redis_server: TcpRedisServer) -> None:
        while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.args.fault_every):
            kind = self.rng.choice(FAULTS)
            started = time.monotonic()
            detail = self.fault(kind, pg, redis_server)
            self.faults.append(
                {"kind": kind, "detail": detail, "seconds": round(time.monotonic() - started, 1)}
            )
            log(f"fault {len(self.faults)}: {kind} {detail}")

    def fault(self, kind: str, pg: PostgresCluster, redis_server: TcpRedisServer) -> str:
        if kind == "kill_worker":  # a card group's worker, or the beat (webhooks in flight)
            worker = self.rng.choice([*self.workers, *([self.beat] if self.beat else [])])
            worker.kill()
            time.sleep(self.rng.uniform(2, 5))
            worker.start()
            return worker.name
        if kind == "restart_redis":
            redis_server.stop()
            time.sleep(self.rng.uniform(1, 3))
            redis_server.start()
            return "queues lost"
        if kind == "restart_postgres":
            pg.stop("fast")
            time.sleep(self.rng.uniform(2, 5))
            pg.start()
            return "connections cut"
        if kind == "freeze_store":
            assert self.store is not None
            seconds = self.rng.uniform(10, 30)
            self.store.signal(signal.SIGSTOP)
            time.sleep(seconds)
            self.store.signal(signal.SIGCONT)
            return f"{seconds:.0f} s"
        worker = self.rng.choice(self.workers)
        seconds = self.rng.uniform(20, 60)
        worker.signal(signal.SIGSTOP)
        time.sleep(seconds)
        worker.signal(signal.SIGCONT)
        return f"{worker.name} {seconds:.0f} s"


# --- the verdict ----------------------------------------------------------------------------------
def drain(soak: Soak, timeout: float) -> dict[str, str]:
    """Wait until every accepted job has ended; the status of each."""
    services = build(soak)
    deadline = time.monotonic() + timeout
    status: dict[str, str] = {}
    while time.monotonic() < deadline:
        status = job_statuses(services, list(soak.accepted) + batch_jobs(services, soak.batch_id))
        open_jobs = [j for j, s in status.items() if s not in TERMINAL]
        if not open_jobs:
            return status
        log(f"waiting for {len(open_jobs)} jobs to end")
        time.sleep(5)
    return status


def build(soak: Soak) -> Any:
    from jobservice.settings import Settings
    from jobservice.wiring import build_services

    saved = dict(os.environ)
    os.environ.update({k: v for k, v in soak.env.items() if k.startswith("JOBSERVICE_")})
    try:
        return build_services(Settings())
    finally:
        os.environ.clear()
        os.environ.update(saved)


def job_statuses(services: Any, ids: list[str]) -> dict[str, str]:
    from sqlalchemy import select

    from jobservice.db.tables import Job

    wanted = [uuid.UUID(i) for i in ids]
    with services.db.session() as session:
        rows = session.execute(select(Job.id, Job.status).where(Job.id.in_(wanted))).all()
    found = {str(r.id): str(r.status.value if hasattr(r.status, "value") else r.status) for r in rows}
    return {i: found.get(i, "missing") for i in ids}


def batch_jobs(services: Any, batch_id: str | None) -> list[str]:
    if batch_id is None:
        return []
    from sqlalchemy import select

    from jobservice.db.tables import Job

    with services.db.session() as session:
        return [str(i) for i in session.scalars(select(Job.id).where(Job.batch_id == uuid.UUID(batch_id)))]


def verdict(soak: Soak, status: dict[str, str], receiver: Receiver) -> dict[str, Any]:
    from sqlalchemy import func, select

    from jobservice.db.tables import Job, JobEvent, WebhookDelivery
    from jobservice.retention.consistency import check

    services = build(soak)
    ids = [uuid.UUID(i) for i in status]
    with services.db.session() as session:
        endings = dict(
            session.execute(
                select(JobEvent.job_id, func.count())
                .where(JobEvent.job_id.in_(ids), JobEvent.to_status.in_(sorted(TERMINAL)))
                .group_by(JobEvent.job_id)
            ).all()
        )
        deliveries = list(session.execute(select(WebhookDelivery.message_id, WebhookDelivery.status)).all())
        succeeded = list(session.scalars(select(Job).where(Job.id.in_(ids), Job.status == "succeeded")))
    lost = [i for i, s in status.items() if s not in TERMINAL]
    doubled = [str(i) for i in ids if endings.get(i, 0) > 1]
    unended = [str(i) for i in ids if status[str(i)] in TERMINAL and endings.get(i, 0) == 0]
    bad_videos = [str(job.id) for job in succeeded if not video_matches(soak, job)]
    found = check(services, min_age=timedelta(0))
    expected = {d.message_id for d in deliveries}
    missing = sorted(expected - set(receiver.seen))
    twice = sorted(m for m, n in receiver.seen.items() if n > 1)
    counts = Counter(status.values())
    return {
        "jobs": len(status),
        "faults": len(soak.faults),
        "lost": len(lost) + len(unended),
        "doubled": len(doubled),
        "orphans": len(found.orphans) + len(found.missing) + len(found.corrupt) + len(found.expired_leases),
        "webhooks_missing": len(missing),
        "webhooks_doubled": len(twice),
        "bad_videos": len(bad_videos),
        "metrics_agree": metrics_agree(soak, counts),
        "succeeded": counts["succeeded"],
        "failed": counts["failed"],
        "canceled": counts["canceled"],
        "refused_at_submit": dict(soak.refused),
        "fault_kinds": dict(Counter(f["kind"] for f in soak.faults)),
        "examples": {
            "lost": lost[:3],
            "doubled": doubled[:3],
            "bad_videos": bad_videos[:3],
            "missing": missing[:3],
        },
    }


def video_matches(soak: Soak, job: Any) -> bool:
    """The stored video decodes to the frames asked for, and its size and digest are the report's."""
    from jobservice.media.probe import probe_media

    headers = {"Authorization": f"Bearer {soak.keys['admin']}"}
    report = requests.get(f"{soak.base}/jobs/{job.id}/report", headers=headers, timeout=30).json()
    video = requests.get(f"{soak.base}/jobs/{job.id}/video", headers=headers, timeout=60)
    artifact = next((a for a in report.get("artifacts", []) if a.get("kind") == "video"), None)
    if video.status_code != 200 or artifact is None:
        return False
    path = soak.tmp / f"{job.id}.mp4"
    path.write_bytes(video.content)
    probe = probe_media(path)
    frames = probe.video.nb_frames if probe.video else None
    wanted = (job.params or {}).get("num_frames")
    return (
        hashlib.sha256(video.content).hexdigest() == artifact["sha256"]
        and len(video.content) == artifact["size_bytes"]
        and frames == wanted
    )


def metrics_agree(soak: Soak, counts: Counter[str]) -> bool:
    """/metrics' finished jobs by status equal the table's, once its counters caught up (60 s)."""
    headers = {"Authorization": f"Bearer {soak.keys['admin']}"}
    deadline = time.monotonic() + 60
    seen: Counter[str] = Counter()
    while time.monotonic() < deadline:
        seen = Counter()
        text = requests.get(f"{soak.base}/metrics", headers=headers, timeout=30).text
        for line in text.splitlines():
            if line.startswith("jobservice_jobs_finished_total{"):
                labels, value = line.rsplit(" ", 1)
                status = labels.split('status="', 1)[1].split('"', 1)[0]
                seen[status] += int(float(value))
        if all(seen[s] == counts[s] for s in TERMINAL):
            return True
        time.sleep(3)
    log(f"/metrics says {dict(seen)}, the table {dict(counts)}")
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="How long jobs keep coming.")
    parser.add_argument("--jobs", type=int, default=600, help="Jobs submitted over those minutes.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fault-every", type=float, default=45.0, help="Mean seconds between faults.")
    parser.add_argument("--min-faults", type=int, default=20, help="Fewer injected faults fail the soak.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="Keep the soak's folder (logs) afterwards.")
    args = parser.parse_args()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="jobservice-soak-"))
    soak = Soak(args=args, tmp=tmp, rng=random.Random(args.seed))
    pg, redis_server, receiver = PostgresCluster(), TcpRedisServer(tmp / "redis"), Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    result: dict[str, Any] = {}
    try:
        pg.init()
        redis_server.start()
        soak.start(pg, redis_server, receiver)
        log(f"service up at {soak.base}; {args.jobs} jobs over {args.minutes:g} min; logs in {tmp}")
        injector = threading.Thread(target=soak.inject, args=(pg, redis_server), daemon=True)
        injector.start()
        soak.load()
        soak.stop.set()
        injector.join()
        log(f"load done ({len(soak.accepted)} accepted); faults over ({len(soak.faults)}); draining")
        status = drain(soak, timeout=600)
        time.sleep(10)  # the webhook deliveries of the last endings
        result = verdict(soak, status, receiver)
    finally:
        soak.stop.set()
        for part in [*soak.workers, soak.beat, soak.api, soak.store]:
            if part is not None:
                part.stop()
        redis_server.stop()
        pg.destroy()
        receiver.shutdown()
        if not args.keep and result:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
    result["seconds"] = round(time.monotonic() - started, 1)
    failed = any(
        result[k]
        for k in ("lost", "doubled", "orphans", "webhooks_missing", "webhooks_doubled", "bad_videos")
    )
    failed = failed or not result["metrics_agree"] or result["faults"] < args.min_faults
    print(json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
