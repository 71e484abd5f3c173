"""Whose job runs next, end to end on the CPU with a real worker: fair share, ETAs and usage.

Tenant A queues 1,000 batch jobs; tenant B then submits one: B's job is the next the card group takes
when it frees up, not the 1,001st. Every queued job carries an ETA from the fleet's forecast. After
the runs, ``GET /usage`` over the day equals the sum of the jobs' own ``usage`` for every tenant,
and /metrics' ``jobservice_tenant_card_seconds_total`` agrees.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from jobservice.auth.principal import Principal
from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.fleet import eta
from jobservice.jobs.submit import Submission, submit_job
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = {"prompt": "x", "num_frames": 12, "fps": 12, "size": 32, "step_seconds": 0.02}


@pytest.fixture
def fair(tmp_path: Path) -> Iterator[Stack]:
    stack = build_stack(tmp_path, metrics_settle_seconds=0.0, forecast_interval_seconds=1.0)
    try:
        yield stack
    finally:
        stack.close()


def submit_as(stack: Stack, tenant: str, *, priority: int = 6) -> uuid.UUID:
    """A job submitted the way ``POST /jobs`` and batches submit it (``submit_job``)."""
    sub = Submission(
        task="text2video",
        model="fake-good",
        params=dict(JOB),
        priority=priority,
        source="batch",
        principal=Principal(tenant=tenant, role="user", key_id=None),
        admitted=True,
    )
    job, _ = submit_job(stack.services, sub)
    return job.id


def claimed_between(stack: Stack, tenant: str, start: datetime, end: datetime) -> int:
    with stack.services.db.session() as s:
        rows = s.scalars(select(Job.claimed_at).where(Job.tenant == tenant, Job.claimed_at.is_not(None)))
        return sum(1 for at in rows if at is not None and start <= at < end)


def test_a_lone_job_is_not_starved_by_a_thousand_queued_ahead(fair: Stack) -> None:
    stack = fair
    bulk = [submit_as(stack, "tenant-a") for _ in range(1000)]
    stack.start_worker("w1")
    stack.wait(str(bulk[0]), timeout=90)  # the group has been running A's jobs a while
    stack.wait(str(bulk[2]), timeout=60)
    asked = utcnow()
    lone = submit_as(stack, "tenant-b")
    done = stack.wait(str(lone), timeout=60)
    assert done.status == JobStatus.SUCCEEDED
    assert done.claimed_at is not None
    # At most the job the group was running when B's arrived (and one handed to it just then).
    ahead = claimed_between(stack, "tenant-a", asked, done.claimed_at)
    assert ahead <= 1, f"{ahead} of tenant A's jobs started before B's"
    with stack.services.db.session() as s:
        waiting = s.scalar(
            select(Job).where(Job.tenant == "tenant-a", Job.status == JobStatus.QUEUED).limit(1)
        )
    assert waiting is not None, "A's backlog is still there: B did not simply come after it"

    # Every queued job carries an ETA from the forecast, later for jobs further back.
    deadline = time.monotonic() + 30
    views: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        views = [stack.client.get(f"/jobs/{j}").get_json() for j in (bulk[-2], bulk[-1])]
        if all(v.get("estimated_start_at") for v in views if v["status"] == "queued"):
            break
        time.sleep(0.5)
    queued = [v for v in views if v["status"] == "queued"]
    assert queued and all(v["eta_basis"] in {"forecast", "not_measured"} for v in queued), views
    assert str(queued[0]["estimated_start_at"]) <= str(queued[-1]["estimated_start_at"])


def test_usage_over_a_day_sums_the_jobs_usage_and_metrics_agree(fair: Stack) -> None:
    stack = fair
    ids = {tenant: [submit_as(stack, tenant, priority=0) for _ in range(4)] for tenant in ("acme", "beta")}
    stack.start_worker("w1")
    for tenant_ids in ids.values():
        for job_id in tenant_ids:
            assert stack.wait(str(job_id), timeout=120).status == JobStatus.SUCCEEDED
    now = utcnow()
    span = {"from": (now - timedelta(days=1)).isoformat(), "to": (now + timedelta(minutes=1)).isoformat()}
    report = stack.client.get(
        "/usage", query_string={"group_by": "tenant", "bucket": "day", **span}
    ).get_json()
    by_tenant: dict[str, float] = {}
    for row in report["rows"]:
        by_tenant[row["tenant"]] = by_tenant.get(row["tenant"], 0.0) + row["card_seconds"]
    for tenant, tenant_ids in ids.items():
        jobs = [stack.job(str(j)) for j in tenant_ids]
        own = sum(j.usage["card_seconds"] for j in jobs if j.usage)
        assert own > 0 and by_tenant[tenant] == pytest.approx(own, abs=0.01), tenant
        assert all(j.usage and j.usage["phases"]["generate"] > 0 for j in jobs)
    csv = stack.client.get(
        "/usage", query_string={"group_by": "tenant", **span}, headers={"Accept": "text/csv"}
    )
    assert csv.mimetype == "text/csv" and csv.get_data(as_text=True).splitlines()[0].startswith(
        "bucket,tenant,"
    )

    deadline = time.monotonic() + 20
    metrics: dict[str, float] = {}
    while time.monotonic() < deadline:
        text = stack.client.get("/metrics").get_data(as_text=True)
        metrics = {}
        for line in text.splitlines():
            if line.startswith("jobservice_tenant_card_seconds_total{"):
                labels, value = line.rsplit(" ", 1)
                tenant = labels.split('tenant="', 1)[1].split('"', 1)[0]
                metrics[tenant] = metrics.get(tenant, 0.0) + float(value)
        if set(metrics) >= set(by_tenant):
            break
        time.sleep(0.5)
    for tenant, total in by_tenant.items():
        assert metrics[tenant] == pytest.approx(total, abs=0.01), (tenant, metrics)


def test_a_newcomers_position_and_eta_come_true(fair: Stack) -> None:
    """Tenant A queues 14 jobs on one CPU group; tenant B then submits one. The forecast that places
    B's job gives it a position equal to the jobs that start after that forecast and before it (fair
    share starts it after at most the job handed to the group), and its start comes within
    max(10 s, 25 % of its wait) of the ETA it was given."""
    stack = fair
    slow = {**JOB, "num_frames": 24, "step_seconds": 0.08}  # a couple of seconds each

    def submit(tenant: str) -> uuid.UUID:
        sub = Submission(
            task="text2video",
            model="fake-good",
            params=dict(slow),
            priority=6,
            source="batch",
            principal=Principal(tenant=tenant, role="user", key_id=None),
            admitted=True,
        )
        return submit_job(stack.services, sub)[0].id

    queued = [submit("tenant-a") for _ in range(14)]
    stack.start_worker("w1")
    stack.wait(str(queued[3]), timeout=90)  # its speed is measured by now
    lone = submit("tenant-b")
    svc = stack.services
    assert eta.refresh(svc.db, svc.catalog, svc.settings, force=True)
    svc.caches.forecast.drop(None)  # this process replaced the forecast
    placed_at = datetime.fromtimestamp(eta.latest(svc).forecast.at, UTC)  # type: ignore[union-attr]
    shown = stack.client.get(f"/jobs/{lone}").get_json()
    assert shown["status"] == "queued" and shown["eta_basis"] == "forecast", shown
    position = shown["queue_position"]
    promised = datetime.fromisoformat(shown["estimated_start_at"])
    assert position is not None and position <= 1, shown
    assert shown["fair_share"]["tenants"] == 2, shown["fair_share"]
    done = stack.wait(str(lone), timeout=90)
    assert done.status == JobStatus.SUCCEEDED and done.claimed_at is not None
    started = claimed_between(stack, "tenant-a", placed_at, done.claimed_at)
    assert position == started, f"position {position}, but {started} of A's jobs started before it"
    wait = (done.claimed_at - done.created_at).total_seconds()
    error = abs((done.claimed_at - promised).total_seconds())
    assert error <= max(10.0, 0.25 * wait), (error, wait)
