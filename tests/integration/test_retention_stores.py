"""Retention on PostgreSQL with S3 (moto) and with the local store: the sweeps the beat runs.

Expired jobs lose their objects and answer 410; pinned batches keep theirs; shared batch inputs go
with the last job; orphans on S3 are judged by LastModified; concurrent sweeps record one event;
a bucket the service creates aborts abandoned multipart uploads.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from pydantic import SecretStr
from sqlalchemy import func, select

from jobservice.db.tables import JobEvent
from jobservice.db.tables import utcnow as now_utc
from jobservice.http.app import create_app
from jobservice.retention import sweep_expired, sweep_orphans
from jobservice.retention.sweep import EXPIRED_DETAIL
from jobservice.storage import LocalStore, ObjectStore, S3Store
from jobservice.storage.s3 import ABORT_MULTIPART_AFTER_DAYS
from jobservice.wiring import Services, build_services
from tests.conftest import MOTO_CREDENTIALS, make_settings
from tests.unit.test_retention import (
    HOUR,
    batch_row,
    expiry_events,
    finished_job,
    job_keys,
    job_row,
    stored,
)


def s3_store(endpoint: str, bucket: str | None = None, cls: type[S3Store] = S3Store) -> S3Store:
    """A store on a fresh bucket of the moto server, created on first use."""
    return cls(
        bucket or f"retention-{uuid.uuid4().hex[:20]}",
        endpoint_url=endpoint,
        region="us-east-1",
        access_key_id=MOTO_CREDENTIALS["aws_access_key_id"],
        secret_access_key=MOTO_CREDENTIALS["aws_secret_access_key"],
        create_bucket=True,
    )


def raw_client(endpoint: str) -> Any:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        **MOTO_CREDENTIALS,
    )


def pg_services(tmp_path: Path, pg_url: str, store: ObjectStore) -> Services:
    """Services on a fresh PostgreSQL database and ``store``; auth off, no rate limit (no Redis)."""
    var = tmp_path / "var"
    var.mkdir(parents=True, exist_ok=True)
    (var / "secret_key").write_text("0" * 64)
    settings = make_settings(var, database_url=pg_url, quota_requests_per_minute=0)
    return build_services(settings, store=store)


@pytest.fixture(params=["s3", "local"])
def pg_stack(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str, moto_server: str
) -> Iterator[Services]:
    """PostgreSQL with, in turn, an S3 bucket on moto and a local store."""
    store: ObjectStore = s3_store(moto_server) if request.param == "s3" else LocalStore(tmp_path / "objects")
    services = pg_services(tmp_path, pg_url, store)
    yield services
    services.db.dispose()


def test_expired_jobs_lose_their_objects_and_answer_410(pg_stack: Services) -> None:
    now = now_utc()
    old = finished_job(pg_stack, expires_at=now - HOUR)
    fresh = finished_job(pg_stack, expires_at=now + HOUR)
    client = create_app(services=pg_stack).test_client()
    before = client.get(f"/jobs/{old}/video")
    before.close()
    assert before.status_code in (200, 302)  # served, or redirected to S3
    result = sweep_expired(pg_stack, now=now)
    assert result.expired == [str(old)] and result.objects_deleted == len(job_keys(old))
    assert stored(pg_stack.store, f"jobs/{old}/") == []
    assert stored(pg_stack.store, f"jobs/{fresh}/") == job_keys(fresh)
    assert job_row(pg_stack, old).expired_at is not None
    for part in ("video", "report", "log"):
        response = client.get(f"/jobs/{old}/{part}")
        assert response.status_code == 410 and response.get_json()["error"]["code"] == "expired", part
    assert client.get(f"/jobs/{old}").get_json()["expired"] is True
    assert client.get(f"/jobs/{fresh}").get_json()["expired"] is False


def test_pinned_batches_keep_and_shared_inputs_go_with_the_last_job(pg_stack: Services) -> None:
    now = now_utc()
    pinned, plain = batch_row(pg_stack, pinned=True), batch_row(pg_stack)
    kept = finished_job(pg_stack, expires_at=now - HOUR, batch_id=pinned)
    first = finished_job(pg_stack, expires_at=now - HOUR, batch_id=plain)
    last = finished_job(pg_stack, expires_at=now + HOUR, batch_id=plain)
    assert sweep_expired(pg_stack, now=now).expired == [str(first)]
    assert stored(pg_stack.store, f"batches/{plain}/")  # `last` still reads them
    result = sweep_expired(pg_stack, now=now + 2 * HOUR)
    assert result.expired == [str(last)] and result.batch_inputs == [str(plain)]
    assert stored(pg_stack.store, f"batches/{plain}/") == []
    assert stored(pg_stack.store, f"jobs/{kept}/") == job_keys(kept)
    assert stored(pg_stack.store, f"batches/{pinned}/")


class S3Rendezvous(S3Store):
    """Two sweeps meet inside the deletion of the same job, so both then try to mark it."""

    barrier = threading.Barrier(2, timeout=30)

    def delete_prefix(self, prefix: str) -> int:
        count = super().delete_prefix(prefix)
        self.barrier.wait()
        return count


def run_together(services: Services, count: int = 2) -> list[Any]:
    """``count`` sweeps in threads at once; their results."""
    results: list[Any] = []
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            results.append(sweep_expired(services))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=sweep) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results


def test_two_sweeps_in_the_same_job_record_one_event(tmp_path: Path, pg_url: str, moto_server: str) -> None:
    S3Rendezvous.barrier.reset()
    services = pg_services(tmp_path, pg_url, s3_store(moto_server, cls=S3Rendezvous))
    job_id = finished_job(services, expires_at=now_utc() - HOUR)
    results = run_together(services)
    assert sorted(len(r.expired) for r in results) == [0, 1]
    [event] = expiry_events(services, job_id)
    assert event.actor == "system"
    services.db.dispose()


def test_many_sweeps_over_many_jobs_never_double_an_event(pg_stack: Services) -> None:
    past = now_utc() - HOUR
    jobs = [finished_job(pg_stack, expires_at=past - timedelta(seconds=i)) for i in range(12)]
    results = run_together(pg_stack, count=4)
    assert sorted(j for r in results for j in r.expired) == sorted(str(j) for j in jobs)
    with pg_stack.db.session() as session:
        counts = dict(
            session.execute(
                select(JobEvent.job_id, func.count())
                .where(JobEvent.detail == EXPIRED_DETAIL)
                .group_by(JobEvent.job_id)
            ).all()
        )
    assert counts == {j: 1 for j in jobs}


def test_s3_orphan_prefixes_are_judged_by_last_modified(
    tmp_path: Path, pg_url: str, moto_server: str
) -> None:
    services = pg_services(tmp_path, pg_url, s3_store(moto_server))
    with_row = finished_job(services, expires_at=now_utc() + HOUR)
    lost = uuid.uuid4()
    services.store.put_bytes(f"jobs/{lost}/attempt-2/output.mp4", b"data")
    services.store.put_bytes(f"batches/{uuid.uuid4()}/inputs/sha256/{'c' * 64}.png", b"png")
    young = sweep_orphans(services)  # just stored: maybe a submission still in flight
    assert young.prefixes == [] and stored(services.store, f"jobs/{lost}/")
    later = sweep_orphans(services, now=now_utc() + 2 * HOUR)
    assert f"jobs/{lost}/" in later.prefixes and len(later.prefixes) == 2
    assert stored(services.store, f"jobs/{lost}/") == [] and stored(services.store, "batches/") == []
    assert stored(services.store, f"jobs/{with_row}/") == job_keys(with_row)
    services.db.dispose()


def test_a_bucket_the_service_creates_aborts_abandoned_multipart_uploads(moto_server: str) -> None:
    store = s3_store(moto_server)
    store.check()  # creates the bucket
    rules = raw_client(moto_server).get_bucket_lifecycle_configuration(Bucket=store.bucket)["Rules"]
    [rule] = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
    assert rule["Status"] == "Enabled"
    assert rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == ABORT_MULTIPART_AFTER_DAYS


def test_an_existing_bucket_is_left_as_its_owner_configured_it(moto_server: str) -> None:
    client = raw_client(moto_server)
    bucket = f"owned-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=bucket)
    s3_store(moto_server, bucket).check()
    with pytest.raises(ClientError) as caught:
        client.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert caught.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"


def test_s3_settings_build_a_store_that_sets_the_rule(moto_server: str, tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path / "var",
        storage_backend="s3",
        s3_bucket=f"settings-{uuid.uuid4().hex[:20]}",
        s3_endpoint_url=moto_server,
        s3_access_key_id=MOTO_CREDENTIALS["aws_access_key_id"],
        s3_secret_access_key=SecretStr(MOTO_CREDENTIALS["aws_secret_access_key"]),
    )
    store = S3Store.from_settings(settings)
    store.put_bytes("probe.txt", b"x")  # first use creates the bucket
    rules = raw_client(moto_server).get_bucket_lifecycle_configuration(Bucket=store.bucket)["Rules"]
    assert any("AbortIncompleteMultipartUpload" in r for r in rules)
