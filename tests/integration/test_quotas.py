"""Quotas against real services: PostgreSQL admission under concurrency, the Redis rate limiter,
the disk floor on a small tmpfs, and ``GET /quota``."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import func, select

from jobservice.auth.keys import create_key
from jobservice.auth.principal import Principal
from jobservice.db.engine import Database
from jobservice.db.tables import Job, Tenant
from jobservice.errors import InsufficientStorage, TooMany
from jobservice.http.app import create_app
from jobservice.jobs.transitions import record_created
from jobservice.quotas import disk, rate
from jobservice.quotas.admit import admit_jobs
from jobservice.settings import Settings
from jobservice.storage import LocalStore
from jobservice.wiring import Services, build_services
from tests.unit.test_quotas_rate_disk import Host

pytestmark = pytest.mark.integration


def key(key_id: str = "key_0123456789ab", tenant: str = "acme", **limits: Any) -> Principal:
    return Principal(tenant=tenant, role="user", key_id=key_id, limits=limits)


def new_job(tenant: str) -> Job:
    return Job(
        id=uuid.uuid4(),
        task="text2video",
        model="reference-t2v",
        params={"prompt": "x"},
        max_attempts=3,
        tenant=tenant,
    )


# --- PostgreSQL: two submissions never both pass when one fits -------------------------------------
def submit_one(db: Database, settings: Settings, principal: Principal, *, insert_first: bool) -> bool:
    try:
        with db.session() as session:  # admission and insert in one transaction
            if insert_first:  # as submit_job does: the row, then the lock and the counts
                record_created(session, new_job(principal.tenant))
                session.flush()
                admit_jobs(session, settings, principal, 1, inserted=1)
            else:  # admission, then the insert
                admit_jobs(session, settings, principal, 1)
                record_created(session, new_job(principal.tenant))
    except TooMany:
        return False
    return True


@pytest.mark.parametrize("insert_first", [False, True])
def test_concurrent_submissions_on_postgresql_admit_exactly_the_cap(pg_url: str, insert_first: bool) -> None:
    settings = Settings(_env_file=None, database_url=pg_url, quota_active_jobs=4)  # type: ignore[call-arg]
    db = Database(pg_url)
    callers = [key(tenant="acme")] * 8 + [key(tenant="beta", active_jobs=2)] * 4
    barrier = threading.Barrier(len(callers))
    results: dict[str, list[bool]] = {"acme": [], "beta": []}

    def run(principal: Principal) -> None:
        barrier.wait()
        results[principal.tenant].append(submit_one(db, settings, principal, insert_first=insert_first))

    threads = [threading.Thread(target=run, args=(p,)) for p in callers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert sorted(results["acme"]) == [False] * 4 + [True] * 4
        assert sorted(results["beta"]) == [False] * 2 + [True] * 2
        with db.session() as session:
            counts = dict(session.execute(select(Job.tenant, func.count()).group_by(Job.tenant)).all())
        assert counts == {"acme": 4, "beta": 2}
    finally:
        db.dispose()


# --- Redis: the rate limiter every API process shares ----------------------------------------------
@pytest.fixture
def rate_settings(clean_redis: str) -> Settings:
    return Settings(_env_file=None, broker_url=clean_redis, quota_requests_per_minute=3)  # type: ignore[call-arg]


def test_the_rate_limit_refuses_past_the_limit_until_the_window_ends(rate_settings: Settings) -> None:
    now = 1_000_000 * 60 + 45.0  # 15 s before a window ends
    counter = rate.RateCounter(rate_settings)
    for _ in range(3):
        counter.check(key(), now=now)
    with pytest.raises(TooMany) as exc:
        counter.check(key(), now=now)
    assert exc.value.status == 429 and exc.value.code == "rate_limited"
    assert exc.value.retry_after == pytest.approx(15.0)
    assert exc.value.headers["Retry-After"] == "15"
    assert "3 requests per minute" in exc.value.message
    counter.check(key("key_other0000000"), now=now)  # another key has its own count
    counter.check(key(), now=now + 15.0)  # the next window
    assert counter.this_minute(key(), now=now) == 4
    counter.close()
    ttl = redis.Redis.from_url(rate_settings.broker_url).ttl(rate.window_key(key(), now))
    assert 0 < ttl <= 2 * rate.WINDOW_SECONDS  # windows clean themselves up


def test_two_processes_share_one_count(rate_settings: Settings) -> None:
    now = 2_000_000 * 60 + 1.0
    one, two = rate.RateCounter(rate_settings), rate.RateCounter(rate_settings)  # two processes
    one.check(key(), now=now)
    two.check(key(), now=now)
    two.check(key(), now=now)
    with pytest.raises(TooMany):
        one.check(key(), now=now)
    one.close()
    two.close()


# --- the disk floor on a real, small file system ---------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs (mounting needs root, as the test machines have)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.fail(f"mounting a tmpfs needs root: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_filling_disk_turns_submissions_away_with_507(small_disk: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, var_dir=small_disk, min_free_mb=2, spool_dir=small_disk / "spool"
    )
    host = Host(settings, LocalStore(small_disk / "objects"))
    disk.check_free_space(host)  # 4 MB free
    (small_disk / "ballast").write_bytes(b"\0" * (3 * 2**20))
    with pytest.raises(InsufficientStorage) as exc:
        disk.check_free_space(Host(settings, host.store))  # a process measuring afresh
    assert exc.value.status == 507 and "under the floor of 2 MB" in exc.value.message
    assert len(disk.storage_problems(Host(settings, host.store))) == 2  # spool and store share the tmpfs


# --- GET /quota ------------------------------------------------------------------------------------
def test_quota_shows_the_default_tenants_limits_and_usage(services: Services, client: FlaskClient) -> None:
    with services.db.session() as session:
        for tenant in ("default", "default", "other"):
            record_created(session, new_job(tenant))
    response = client.get("/quota")
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert body["tenant"] == "default"
    assert body["limits"] == {
        "active_jobs": 100,
        "batch_jobs": 500,
        "jobs_per_hour": 2000,
        "requests_per_minute": 1200,
        "retention_hours": 720.0,
        "group_jobs": 5000,
        "pending_uploads": 100,
        "pending_upload_mb": 65536,
    }
    usage = body["usage"]
    assert (usage["active_jobs"], usage["active_batch_jobs"], usage["jobs_last_hour"]) == (2, 0, 2)
    assert isinstance(usage["requests_this_minute"], int)


def test_quota_with_keys_shows_the_callers_tenant_and_overrides(settings: Settings) -> None:
    services = build_services(settings.model_copy(update={"auth": "keys"}))
    try:
        with services.db.session() as session:
            session.add(Tenant(name="acme", limits={"batch_jobs": 7, "active_jobs": 50}))
            _, secret = create_key(session, name="ci", tenant="acme", limits={"active_jobs": 2})
        client = create_app(services=services).test_client()
        assert client.get("/quota").status_code == 401
        response = client.get("/quota", headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 200, response.get_data(as_text=True)
        body = response.get_json()
        assert body["tenant"] == "acme"
        assert (body["limits"]["active_jobs"], body["limits"]["batch_jobs"]) == (2, 7)
        assert secret not in response.get_data(as_text=True)
    finally:
        services.db.dispose()
