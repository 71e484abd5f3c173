"""Quotas on SQLite: limits resolution, admission (active, batch, hourly), and count+insert atomicity."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from jobservice.auth.principal import Principal, anonymous
from jobservice.caches import Caches
from jobservice.db.engine import Database
from jobservice.db.tables import Batch, Job, JobStatus, Tenant, utcnow
from jobservice.errors import TooMany
from jobservice.jobs.transitions import record_created
from jobservice.quotas.admit import NEVER_FITS_RETRY_SECONDS, admit_jobs
from jobservice.quotas.limits import Limits, default_limits, effective_limits, resolve_limits
from jobservice.quotas.usage import tenant_usage
from jobservice.settings import Settings
from tests.factories import sqlite_copy


def quota_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "_env_file": None,
        "quota_active_jobs": 3,
        "quota_batch_jobs": 10,
        "quota_jobs_per_hour": 20,
        "quota_requests_per_minute": 100,
        "retention_hours": 48.0,
    }
    values.update(overrides)
    return Settings(**values)


def user(tenant: str = "acme", **limits: Any) -> Principal:
    return Principal(tenant=tenant, role="user", key_id="key_0123456789ab", limits=limits)


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Database]:
    database = sqlite_copy(migrated_sqlite, tmp_path)
    yield database
    database.dispose()


def add_jobs(
    db: Database,
    tenant: str,
    n: int,
    *,
    batch_id: uuid.UUID | None = None,
    created_at: datetime | None = None,
    status: JobStatus = JobStatus.QUEUED,
) -> None:
    """``n`` jobs of ``tenant`` recorded as the service records them, then moved to ``status``."""
    with db.session() as session:
        ids = []
        for _ in range(n):
            job = Job(
                id=uuid.uuid4(),
                task="text2video",
                model="reference-t2v",
                params={"prompt": "x"},
                created_at=created_at or utcnow(),
                max_attempts=3,
                tenant=tenant,
                batch_id=batch_id,
            )
            record_created(session, job)
            ids.append(job.id)
        if status != JobStatus.QUEUED:
            session.execute(update(Job).where(Job.id.in_(ids)).values(status=status))


def new_batch(db: Database, tenant: str = "acme") -> uuid.UUID:
    batch = Batch(id=uuid.uuid4(), name="nightly", spec_digest="0" * 64, tenant=tenant)
    with db.session() as session:
        session.add(batch)
    return batch.id


def refusal(exc: pytest.ExceptionInfo[TooMany]) -> dict[str, Any]:
    error = exc.value
    assert error.status == 429 and error.code == "quota_exceeded"
    assert "Nothing was created" in error.message
    assert int(error.headers["Retry-After"]) >= 1
    detail: dict[str, Any] = error.details[0]
    return detail


# --- limits -------------------------------------------------------------------------------------
def test_defaults_come_from_the_settings() -> None:
    assert default_limits(quota_settings()) == Limits(
        active_jobs=3, batch_jobs=10, jobs_per_hour=20, requests_per_minute=100, retention_hours=48.0
    )


def test_a_key_override_beats_the_tenant_override_which_beats_the_default() -> None:
    limits = resolve_limits(
        quota_settings(),
        tenant={"active_jobs": 7, "jobs_per_hour": 70, "retention_hours": 2},
        key={"active_jobs": 1, "requests_per_minute": None},
    )
    assert limits.active_jobs == 1  # the key's
    assert limits.jobs_per_hour == 70  # the tenant's
    assert limits.batch_jobs == 10  # the default
    assert limits.requests_per_minute == 100  # None overrides nothing
    assert limits.retention_hours == 2.0 and isinstance(limits.retention_hours, float)


def test_unusable_stored_overrides_are_ignored_not_fatal() -> None:
    limits = resolve_limits(
        quota_settings(), tenant={"active_jobs": -1, "batch_jobs": "many", "retention_hours": 0, "x": 1}
    )
    assert limits == default_limits(quota_settings())


def test_zero_requests_per_minute_means_no_rate_limit_but_zero_jobs_means_none() -> None:
    limits = resolve_limits(quota_settings(), key={"requests_per_minute": 0, "active_jobs": 0})
    assert not limits.rate_limited
    assert resolve_limits(quota_settings()).rate_limited
    assert limits.active_jobs == 0


def test_effective_limits_read_the_tenant_row(db: Database) -> None:
    with db.session() as session:
        session.add(Tenant(name="acme", limits={"active_jobs": 9, "batch_jobs": 2}))
    with db.session() as session:
        limits = effective_limits(session, quota_settings(), user(batch_jobs=5))
        other = effective_limits(session, quota_settings(), user("other"))
    assert (limits.active_jobs, limits.batch_jobs) == (9, 5)
    assert other == default_limits(quota_settings())


@dataclass
class Host:
    """What ``recent_limits`` reads of ``Services``: one process's database, settings and caches."""

    db: Database
    settings: Settings
    caches: Caches


def test_recent_limits_reread_a_tenants_overrides_after_a_few_seconds_per_process(
    db: Database, tmp_path: Path, migrated_sqlite: Path
) -> None:
    from jobservice.caches import OVERRIDES_SECONDS
    from jobservice.quotas.limits import recent_limits

    clock = [1000.0]
    settings = quota_settings()
    one = Host(db, settings, Caches.on_clock(lambda: clock[0]))
    assert recent_limits(one, user()).active_jobs == 3  # no row: the default
    with db.session() as session:
        session.add(Tenant(name="acme", limits={"active_jobs": 9}))
    assert recent_limits(one, user()).active_jobs == 3  # kept for a while
    other = sqlite_copy(migrated_sqlite, tmp_path / "other")  # another process keeps its own
    with other.session() as session:
        session.add(Tenant(name="acme", limits={"active_jobs": 4}))
    assert recent_limits(Host(other, settings, Caches()), user()).active_jobs == 4
    clock[0] += OVERRIDES_SECONDS + 0.1
    assert recent_limits(one, user()).active_jobs == 9  # read again
    assert recent_limits(one, user(active_jobs=2)).active_jobs == 2  # the key's own
    with db.session() as session:
        session.get(Tenant, "acme").limits = {"active_jobs": 1}  # type: ignore[union-attr]
    assert recent_limits(Host(db, settings, Caches()), user()).active_jobs == 1  # a fresh process
    other.dispose()


# --- admission ------------------------------------------------------------------------------------
def test_active_jobs_admit_up_to_the_cap_and_refuse_beyond(db: Database) -> None:
    settings = quota_settings()
    add_jobs(db, "acme", 2)
    with db.session() as session:
        limits = admit_jobs(session, settings, user(), 1)
    assert limits.retention_hours == 48.0
    add_jobs(db, "acme", 1)
    with pytest.raises(TooMany) as exc, db.session() as session:
        admit_jobs(session, settings, user(), 1)
    detail = refusal(exc)
    assert detail == {"limit": "active_jobs", "value": 3, "usage": 3, "requested": 1}
    assert "tenants set acme --active-jobs" in exc.value.message


def test_only_this_tenants_queued_and_running_interactive_jobs_count(db: Database) -> None:
    settings = quota_settings()
    add_jobs(db, "other", 5)
    add_jobs(db, "acme", 1, status=JobStatus.RUNNING)
    add_jobs(db, "acme", 4, status=JobStatus.SUCCEEDED)
    add_jobs(db, "acme", 2, status=JobStatus.CANCELED)
    add_jobs(db, "acme", 6, batch_id=new_batch(db))
    with db.session() as session:
        admit_jobs(session, settings, user(), 2)  # 1 running + 2 = 3
        usage = tenant_usage(session, "acme")
    assert (usage.active_jobs, usage.active_batch_jobs, usage.jobs_last_hour) == (1, 6, 13)


def test_a_key_with_its_own_lower_cap_is_told_so(db: Database) -> None:
    with pytest.raises(TooMany) as exc, db.session() as session:
        admit_jobs(session, quota_settings(), user(active_jobs=0), 1)
    assert refusal(exc)["value"] == 0
    assert "this key sets its own active_jobs" in exc.value.message


def test_a_batch_of_500_fits_the_defaults_although_active_jobs_is_100(db: Database) -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (settings.quota_active_jobs, settings.quota_batch_jobs) == (100, 500)
    add_jobs(db, "acme", 100)  # the interactive cap is full
    with db.session() as session:
        admit_jobs(session, settings, user(), 500, batch=True)


def test_a_batch_over_its_cap_is_refused_up_front(db: Database) -> None:
    with pytest.raises(TooMany) as exc, db.session() as session:
        admit_jobs(session, quota_settings(), user(), 11, batch=True)
    detail = refusal(exc)
    assert detail["limit"] == "batch_jobs" and detail["requested"] == 11
    assert exc.value.retry_after == NEVER_FITS_RETRY_SECONDS
    assert "Split it" in exc.value.message


def test_jobs_per_hour_counts_batch_jobs_and_says_when_enough_age_out(db: Database) -> None:
    settings = quota_settings()
    now = utcnow()
    add_jobs(db, "acme", 5, created_at=now - timedelta(minutes=50), status=JobStatus.SUCCEEDED)
    add_jobs(db, "acme", 5, created_at=now - timedelta(minutes=20), status=JobStatus.SUCCEEDED)
    add_jobs(db, "acme", 10, batch_id=new_batch(db), created_at=now - timedelta(minutes=10))
    add_jobs(db, "acme", 50, created_at=now - timedelta(minutes=61), status=JobStatus.SUCCEEDED)
    with pytest.raises(TooMany) as exc, db.session() as session:
        admit_jobs(session, settings, user(), 1, batch=True, now=now)
    assert refusal(exc) == {"limit": "jobs_per_hour", "value": 20, "usage": 20, "requested": 1}
    assert exc.value.retry_after == pytest.approx(600, abs=2)  # the oldest of the hour ages out in 10 min
    with pytest.raises(TooMany) as exc, db.session() as session:
        admit_jobs(session, settings, user(), 7, batch=True, now=now)
    assert exc.value.retry_after == pytest.approx(2400, abs=2)  # 7 must age out: 5 at -50, 2 at -20 min


def test_a_request_bigger_than_the_hourly_cap_never_fits(db: Database) -> None:
    with pytest.raises(TooMany) as exc, db.session() as session:
        admit_jobs(session, quota_settings(quota_batch_jobs=100), user(), 21, batch=True)
    assert exc.value.retry_after == NEVER_FITS_RETRY_SECONDS


def test_the_anonymous_admin_of_auth_off_has_the_default_tenants_quota(db: Database) -> None:
    add_jobs(db, "default", 3)
    with pytest.raises(TooMany), db.session() as session:
        admit_jobs(session, quota_settings(), anonymous("default"), 1)


# --- atomicity on SQLite ---------------------------------------------------------------------------
def submit_one(db: Database, settings: Settings, principal: Principal) -> bool:
    """Admission and insert in one transaction, as submit_job does; False when refused."""
    try:
        with db.session() as session:
            admit_jobs(session, settings, principal, 1)
            job = Job(
                id=uuid.uuid4(),
                task="text2video",
                model="reference-t2v",
                params={"prompt": "x"},
                max_attempts=3,
                tenant=principal.tenant,
            )
            record_created(session, job)
    except TooMany:
        return False
    return True


def test_concurrent_submissions_on_sqlite_never_exceed_the_cap(db: Database) -> None:
    settings = quota_settings(quota_active_jobs=4)
    threads, barrier = 12, threading.Barrier(12)
    results: list[bool] = []

    def run() -> None:
        barrier.wait()
        results.append(submit_one(db, settings, user()))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(results) == [False] * 8 + [True] * 4
    with db.session() as session:
        assert session.scalar(select(func.count()).where(Job.tenant == "acme")) == 4
