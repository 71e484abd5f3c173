"""Retention on SQLite and the local store: expired jobs lose their files and keep their rows.

The helpers here (``retention_services``, ``finished_job``, ``batch_row``, ``job_keys``) are shared
with tests/integration/test_retention_stores.py, which runs the same sweeps on PostgreSQL and S3.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from jobservice.db.tables import Batch, Job, JobEvent, JobGroup, JobStatus, Tenant, utcnow
from jobservice.http.app import create_app
from jobservice.jobs.transitions import Owner, claim_job, mark_canceled, mark_succeeded
from jobservice.retention import mark_expired, sweep_expired
from jobservice.retention.sweep import EXPIRED_DETAIL, due_jobs
from jobservice.storage import LocalStore, ObjectStore
from jobservice.wiring import Services, build_services
from tests.conftest import make_settings
from tests.factories import copy_template, new_job

HOUR = timedelta(hours=1)


# --- helpers (also used by the integration tests) ----------------------------------------------
def retention_services(
    tmp_path: Path, migrated_sqlite: Path, *, store: ObjectStore | None = None, **overrides: Any
) -> Services:
    """Services on a copy of the migrated SQLite template, auth off and no rate limit (no Redis)."""
    var = tmp_path / "var"
    copy_template(migrated_sqlite, var, "jobservice.db")
    (var / "secret_key").write_text("0" * 64)
    settings = make_settings(var, quota_requests_per_minute=0, **overrides)
    return build_services(settings, store=store)


def job_keys(job_id: uuid.UUID) -> list[str]:
    """The objects ``finished_job`` stores for a job: inputs, video, report, log and a retry's files."""
    prefix = f"jobs/{job_id}/"
    return [
        f"{prefix}attempt-2/log.txt",
        f"{prefix}inputs/image.png",
        f"{prefix}log.txt",
        f"{prefix}output.mp4",
        f"{prefix}report.json",
    ]


def finished_job(
    services: Services,
    *,
    expires_at: datetime | None,
    created_at: datetime | None = None,
    status: JobStatus = JobStatus.SUCCEEDED,
    batch_id: uuid.UUID | None = None,
    tenant: str = "default",
) -> uuid.UUID:
    """A finished job with its files in the store, as a worker leaves it; ``expires_at`` None is a
    row from before migration 0003 (it then counts from ``created_at``)."""
    job_id = new_job(services.db)
    for key in job_keys(job_id):
        services.store.put_bytes(key, b"{}" if key.endswith(".json") else b"data")
    with services.db.session() as session:
        if status == JobStatus.CANCELED:
            mark_canceled(session, job_id, from_statuses=frozenset({JobStatus.QUEUED}))
        else:
            assert claim_job(session, job_id, worker_id="w", lease_seconds=30) is not None
    if status == JobStatus.SUCCEEDED:
        with services.db.session() as session:
            mark_succeeded(
                session,
                job_id,
                owner=Owner("w", 1),
                output_key=f"jobs/{job_id}/output.mp4",
                report_key=f"jobs/{job_id}/report.json",
                verdict="pass",
                timings={},
                validation_summary={},
                cold_start=False,
            )
    values: dict[str, Any] = {
        "expires_at": expires_at,
        "batch_id": batch_id,
        "group_id": batch_id,  # a batch's jobs are its job group's
        "tenant": tenant,
    }
    if created_at is not None:
        values["created_at"] = created_at
    with services.db.session() as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))
    return job_id


def batch_row(services: Services, *, pinned: bool = False, status: str = "finished") -> uuid.UUID:
    """A batch and its job group, with shared inputs in the store as a batch made before 0.2.0 kept
    them (``batches/<id>/inputs/sha256/...``) and as one made now does (``groups/<id>/...``)."""
    batch_id = uuid.uuid4()
    with services.db.session() as session:
        session.add(JobGroup(id=batch_id, name="nightly", manifest_format="spec", manifest_sha256="0" * 64))
        session.flush()
        session.add(
            Batch(id=batch_id, name="nightly", spec_digest="0" * 64, spec={}, status=status, pinned=pinned)
        )
    services.store.put_bytes(f"batches/{batch_id}/inputs/sha256/{'a' * 64}.png", b"png")
    services.store.put_bytes(f"groups/{batch_id}/inputs/sha256/{'a' * 64}.png", b"png")
    return batch_id


def stored(store: ObjectStore, prefix: str) -> list[str]:
    """The keys under ``prefix``."""
    return [info.key for info in store.list(prefix)]


def expiry_events(services: Services, job_id: uuid.UUID) -> list[JobEvent]:
    """The job's retention events."""
    with services.db.session() as session:
        return list(
            session.scalars(
                select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.detail == EXPIRED_DETAIL)
            )
        )


def job_row(services: Services, job_id: uuid.UUID) -> Job:
    """The job's row, freshly read."""
    with services.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


# --- tests -------------------------------------------------------------------------------------
@pytest.fixture
def svc(tmp_path: Path, migrated_sqlite: Path) -> Any:
    services = retention_services(tmp_path, migrated_sqlite)
    yield services
    services.db.dispose()


def test_an_expired_job_loses_its_files_and_keeps_its_row(svc: Services) -> None:
    now = utcnow()
    old = finished_job(svc, expires_at=now - HOUR)
    fresh = finished_job(svc, expires_at=now + HOUR)
    result = sweep_expired(svc, now=now)
    assert result.expired == [str(old)]
    assert result.objects_deleted == len(job_keys(old))
    assert stored(svc.store, f"jobs/{old}/") == []
    assert stored(svc.store, f"jobs/{fresh}/") == job_keys(fresh)
    row = job_row(svc, old)
    assert row.status == JobStatus.SUCCEEDED and row.expired_at == now
    assert job_row(svc, fresh).expired_at is None
    [event] = expiry_events(svc, old)
    assert event.actor == "system" and event.from_status is None and event.to_status is None
    # A second pass finds nothing more to do.
    again = sweep_expired(svc, now=now)
    assert again.expired == [] and again.objects_deleted == 0
    assert len(expiry_events(svc, old)) == 1


def test_the_api_answers_410_expired_and_the_view_says_so(svc: Services) -> None:
    job_id = finished_job(svc, expires_at=utcnow() - HOUR)
    client = create_app(services=svc).test_client()
    before = client.get(f"/jobs/{job_id}/video")
    before.close()
    assert before.status_code == 200  # before the sweep the video is served
    sweep_expired(svc)
    for part in ("video", "report", "log"):
        response = client.get(f"/jobs/{job_id}/{part}")
        assert response.status_code == 410, part
        assert response.get_json()["error"]["code"] == "expired"
    view = client.get(f"/jobs/{job_id}").get_json()
    assert view["expired"] is True and view["status"] == "succeeded"
    assert "video" not in (view.get("links") or {})


def test_only_finished_jobs_expire(svc: Services) -> None:
    past = utcnow() - HOUR
    queued = new_job(svc.db)
    running = new_job(svc.db)
    with svc.db.session() as session:
        claim_job(session, running, worker_id="w", lease_seconds=30)
        session.execute(update(Job).where(Job.id.in_([queued, running])).values(expires_at=past))
    canceled = finished_job(svc, expires_at=past, status=JobStatus.CANCELED)
    failed_run = finished_job(svc, expires_at=past, status=JobStatus.RUNNING)  # still running
    assert sweep_expired(svc).expired == [str(canceled)]
    assert stored(svc.store, f"jobs/{failed_run}/") == job_keys(failed_run)
    with svc.db.session() as session:  # the compare-and-set refuses a live job outright
        assert not mark_expired(session, running, at=utcnow())


def test_rows_from_before_expires_at_count_from_creation_and_their_tenant(svc: Services) -> None:
    now = utcnow()
    with svc.db.session() as session:
        session.add(Tenant(name="short", limits={"retention_hours": 2}))
    old_default = finished_job(svc, expires_at=None, created_at=now - timedelta(hours=721))
    young_default = finished_job(svc, expires_at=None, created_at=now - timedelta(hours=700))
    short = finished_job(svc, expires_at=None, created_at=now - timedelta(hours=3), tenant="short")
    short_young = finished_job(svc, expires_at=None, created_at=now - HOUR, tenant="short")
    with svc.db.session() as session:
        due = set(due_jobs(session, svc.settings, now=now, limit=100))
    assert due == {old_default, short}
    assert young_default not in due and short_young not in due


def test_a_pinned_batch_keeps_its_jobs_and_inputs(svc: Services) -> None:
    past = utcnow() - HOUR
    pinned = batch_row(svc, pinned=True)
    jobs = [finished_job(svc, expires_at=past, batch_id=pinned) for _ in range(2)]
    result = sweep_expired(svc)
    assert result.expired == [] and result.batch_inputs == []
    assert all(stored(svc.store, f"jobs/{j}/") for j in jobs)
    assert stored(svc.store, f"batches/{pinned}/")
    with svc.db.session() as session:  # unpinned: the next pass takes them
        session.execute(update(Batch).where(Batch.id == pinned).values(pinned=False))
    assert sorted(sweep_expired(svc).expired) == sorted(str(j) for j in jobs)
    assert stored(svc.store, f"batches/{pinned}/") == [] and stored(svc.store, f"groups/{pinned}/") == []


def test_shared_batch_inputs_go_only_when_every_job_expired(svc: Services) -> None:
    now = utcnow()
    batch = batch_row(svc)
    first = finished_job(svc, expires_at=now - HOUR, batch_id=batch)
    second = finished_job(svc, expires_at=now + HOUR, batch_id=batch)
    result = sweep_expired(svc, now=now)
    assert result.expired == [str(first)] and result.batch_inputs == []
    assert len(stored(svc.store, f"batches/{batch}/")) == 1
    later = now + 2 * HOUR
    result = sweep_expired(svc, now=later)
    assert result.expired == [str(second)] and result.batch_inputs == [str(batch)]
    assert stored(svc.store, f"batches/{batch}/") == [] and stored(svc.store, f"groups/{batch}/") == []


def test_a_running_batch_keeps_its_inputs(svc: Services) -> None:
    batch = batch_row(svc, status="running")  # more jobs may still be queued from its inputs
    finished_job(svc, expires_at=utcnow() - HOUR, batch_id=batch)
    assert sweep_expired(svc).batch_inputs == []
    assert stored(svc.store, f"batches/{batch}/")


def test_dry_run_deletes_nothing(svc: Services) -> None:
    batch = batch_row(svc)
    job_id = finished_job(svc, expires_at=utcnow() - HOUR, batch_id=batch)
    result = sweep_expired(svc, dry_run=True)
    assert result.dry_run and result.expired == [str(job_id)] and result.batch_inputs == [str(batch)]
    assert result.objects_deleted == len(job_keys(job_id)) + 2  # its inputs under groups/ and batches/
    assert stored(svc.store, f"jobs/{job_id}/") == job_keys(job_id)
    assert job_row(svc, job_id).expired_at is None and expiry_events(svc, job_id) == []


class FlakyStore(LocalStore):
    """A local store whose deletions under the given prefixes fail (an S3 hiccup, a read-only file)."""

    def __init__(self, root: Path, failing: set[str]) -> None:
        super().__init__(root)
        self.failing = failing

    def delete_prefix(self, prefix: str) -> int:
        if prefix in self.failing:
            from jobservice.storage import StoreUnavailable

            raise StoreUnavailable(f"refused {prefix}")
        return super().delete_prefix(prefix)


def test_one_failed_deletion_does_not_stop_the_pass_and_is_retried(
    tmp_path: Path, migrated_sqlite: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore(tmp_path / "objects", set())
    services = retention_services(tmp_path, migrated_sqlite, store=store)
    now = utcnow()
    bad = finished_job(services, expires_at=now - 2 * HOUR)
    good = finished_job(services, expires_at=now - HOUR)
    store.failing.add(f"jobs/{bad}/")
    result = sweep_expired(services, now=now)
    assert result.expired == [str(good)] and result.failed == [f"jobs/{bad}/"]
    assert job_row(services, bad).expired_at is None  # not marked: its files are still there
    assert f"jobs/{bad}/" in caplog.text
    store.failing.clear()
    assert sweep_expired(services, now=now).expired == [str(bad)]
    services.db.dispose()


class RendezvousStore(LocalStore):
    """Two sweeps meet inside the deletion of the same job, so both then try to mark it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.barrier = threading.Barrier(2, timeout=20)

    def delete_prefix(self, prefix: str) -> int:
        count = super().delete_prefix(prefix)
        self.barrier.wait()
        return count


def concurrent_sweeps(services: Services, store: RendezvousStore) -> list[Any]:
    """Run two sweeps at once over one due job; returns both results."""
    results: list[Any] = []
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            results.append(sweep_expired(services))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


def test_two_sweeps_at_once_record_one_event(tmp_path: Path, migrated_sqlite: Path) -> None:
    store = RendezvousStore(tmp_path / "objects")
    services = retention_services(tmp_path, migrated_sqlite, store=store)
    job_id = finished_job(services, expires_at=utcnow() - HOUR)
    results = concurrent_sweeps(services, store)
    assert sorted(len(r.expired) for r in results) == [0, 1]
    assert sum(r.marked_elsewhere for r in results) == 1
    assert len(expiry_events(services, job_id)) == 1
    services.db.dispose()


def test_each_pass_is_bounded(svc: Services) -> None:
    past = utcnow() - HOUR
    jobs = [finished_job(svc, expires_at=past - timedelta(minutes=i)) for i in range(5)]
    assert len(sweep_expired(svc, limit=2).expired) == 2
    assert len(sweep_expired(svc, limit=2).expired) == 2
    assert len(sweep_expired(svc, limit=2).expired) == 1
    assert all(job_row(svc, j).expired_at is not None for j in jobs)
