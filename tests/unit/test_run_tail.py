"""The end of a run under faults: the store retries and fails cleanly when full, the final write
retries while the lease holds, and a lease that cannot be renewed stops the run."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from jobservice.db.engine import Database
from jobservice.db.tables import JobStatus
from jobservice.jobs.transitions import Owner, claim_job, mark_succeeded, requeue_job
from jobservice.storage import LocalStore, StoreFull, StoreUnavailable
from jobservice.storage import local as local_module
from jobservice.storage import retry as retry_module
from jobservice.storage.s3 import _translate
from tests.factories import new_job, sqlite_copy
from workers.run import tail
from workers.run.heartbeat import Heartbeat

OUTAGE = OperationalError("UPDATE jobs ...", {}, Exception("server closed the connection unexpectedly"))


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))
    monkeypatch.setattr(tail, "FIRST_RETRY_SECONDS", 0.01)
    monkeypatch.setattr(tail, "MAX_RETRY_SECONDS", 0.02)


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    return sqlite_copy(migrated_sqlite, tmp_path)


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --- the object store --------------------------------------------------------------------------
def test_a_full_disk_fails_cleanly_with_nothing_half_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path / "store")
    video = tmp_path / "video.mp4"
    video.write_bytes(b"x" * 100_000)
    calls = []

    def half_then_full(src: Path, dst: Path) -> None:
        calls.append(dst)
        Path(dst).write_bytes(b"x" * 4096)  # some bytes landed before the disk filled up
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(local_module.shutil, "copyfile", half_then_full)
    with pytest.raises(StoreFull, match="no room"):
        store.put_file("jobs/a/output.mp4", video)
    assert len(calls) == 1, "a full disk is not retried"
    assert leftovers(store.root) == [] and not store.exists("jobs/a/output.mp4")


def test_a_transient_write_error_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path / "store")
    video = tmp_path / "video.mp4"
    video.write_bytes(b"frames" * 1000)
    real_copy = shutil.copyfile
    failures = [OSError(errno.EIO, "Input/output error"), OSError(errno.EAGAIN, "try again")]

    def flaky(src: Path, dst: Path) -> Any:
        if failures:
            raise failures.pop(0)
        return real_copy(src, dst)

    monkeypatch.setattr(local_module.shutil, "copyfile", flaky)
    info = store.put_file("jobs/a/output.mp4", video)
    assert info.size == 6000 and store.get_bytes("jobs/a/output.mp4") == video.read_bytes()
    assert leftovers(store.root) == ["jobs/a/output.mp4"]


def test_a_refused_write_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path / "store")
    attempts = []

    def read_only(self: Path, data: bytes) -> int:
        attempts.append(1)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "write_bytes", read_only)
    with pytest.raises(StoreUnavailable) as caught:
        store.put_bytes("jobs/a/report.json", b"{}")
    assert not caught.value.transient and len(attempts) == 1


@pytest.mark.parametrize(
    ("error", "kind", "transient"),
    [
        (ClientError({"Error": {"Code": "XMinioStorageFull"}}, "PutObject"), StoreFull, False),
        (ClientError({"Error": {"Code": "SlowDown"}}, "PutObject"), StoreUnavailable, True),
        (
            ClientError({"Error": {"Code": "X"}, "ResponseMetadata": {"HTTPStatusCode": 502}}, "PutObject"),
            StoreUnavailable,
            True,
        ),
        (ClientError({"Error": {"Code": "AccessDenied"}}, "PutObject"), StoreUnavailable, False),
        (EndpointConnectionError(endpoint_url="http://s3"), StoreUnavailable, True),
    ],
)
def test_s3_errors_are_told_apart(error: Exception, kind: type[Exception], transient: bool) -> None:
    with pytest.raises(kind) as caught, _translate("jobs/a/output.mp4"):
        raise error
    assert isinstance(caught.value, StoreUnavailable) and caught.value.transient is transient


def test_a_full_store_fails_the_job_with_a_clear_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.adapters.base import AdapterError

    store = LocalStore(tmp_path / "store")
    video = tmp_path / "video.mp4"
    video.write_bytes(b"v")
    monkeypatch.setattr(
        local_module.shutil, "copyfile", lambda *_: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    with pytest.raises(AdapterError) as caught:
        tail.store_output(store, "jobs/a/output.mp4", video)
    assert caught.value.code == "storage_full" and "nothing was stored" in caught.value.message


# --- the final database write ------------------------------------------------------------------
def running_job(db: Database, worker: str = "w#1") -> tuple[uuid.UUID, Owner]:
    job_id = new_job(db)
    with db.session() as s:
        claim_job(s, job_id, worker_id=worker, lease_seconds=30)
    return job_id, Owner(worker, 1)


def succeed(job_id: uuid.UUID, owner: Owner) -> Any:
    return lambda session: mark_succeeded(
        session,
        job_id,
        owner=owner,
        output_key="o",
        report_key="r",
        verdict="passed",
        timings={},
        validation_summary={},
        cold_start=False,
    )


def test_the_final_write_retries_while_the_lease_holds(db: Database) -> None:
    job_id, owner = running_job(db)
    outages = [OUTAGE] * 6
    write = succeed(job_id, owner)

    def flaky(session: Session) -> None:
        if outages:
            raise outages.pop()
        write(session)

    outcome = tail.write_final(
        db, flaky, job_id=job_id, owner=owner, target=JobStatus.SUCCEEDED, lease_held=lambda: True
    )
    assert outcome == "written" and outages == []


def test_the_final_write_gives_up_when_the_lease_is_gone(db: Database) -> None:
    job_id, owner = running_job(db)
    tries = []

    def down(session: Session) -> None:
        tries.append(1)
        raise OUTAGE

    held = iter([True, True, False])
    outcome = tail.write_final(
        db, down, job_id=job_id, owner=owner, target=JobStatus.SUCCEEDED, lease_held=lambda: next(held)
    )
    assert outcome == "unknown" and len(tries) == 3


def test_a_commit_whose_answer_was_lost_counts_as_written(db: Database) -> None:
    job_id, owner = running_job(db)
    write = succeed(job_id, owner)
    first = [True]

    def committed_then_dropped(session: Session) -> None:
        if first:
            first.clear()
            with db.session() as other:
                write(other)  # the server committed...
            raise OUTAGE  # ...and the connection died before the answer came back
        write(session)

    outcome = tail.write_final(
        db,
        committed_then_dropped,
        job_id=job_id,
        owner=owner,
        target=JobStatus.SUCCEEDED,
        lease_held=lambda: True,
    )
    assert outcome == "written"


def test_a_job_taken_by_another_attempt_is_lost(db: Database) -> None:
    job_id, owner = running_job(db)
    with db.session() as s:
        requeue_job(s, job_id, owner=owner, reason="test")
        claim_job(s, job_id, worker_id="w#2", lease_seconds=30)
    outcome = tail.write_final(
        db,
        succeed(job_id, owner),
        job_id=job_id,
        owner=owner,
        target=JobStatus.SUCCEEDED,
        lease_held=lambda: True,
    )
    assert outcome == "lost"


# --- the heartbeat -----------------------------------------------------------------------------
class DownDatabase:
    """A database that is away."""

    @contextmanager
    def session(self) -> Iterator[Session]:
        raise OUTAGE
        yield  # pragma: no cover


def test_a_lease_that_cannot_be_renewed_stops_the_run_before_it_runs_out() -> None:
    beat = Heartbeat(
        DownDatabase(),  # type: ignore[arg-type]
        uuid.uuid4(),
        Owner("w#1", 1),
        lease_seconds=1.0,
        beat_seconds=0.1,
        progress_interval=0.05,
        deadline_seconds=60,
    )
    assert beat.lease_held()
    beat.start()
    try:
        assert beat.stop_requested.wait(timeout=10), "the run was never told to stop"
        assert beat.stop_reason == "lease_lost" and not beat.lease_held()
    finally:
        beat.stop()


class HangingDatabase:
    """A database whose calls hang (a host that drops packets) until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()

    @contextmanager
    def session(self) -> Iterator[Session]:
        self.release.wait(timeout=30)
        raise OUTAGE
        yield  # pragma: no cover


def test_the_model_thread_stops_the_run_when_the_heartbeat_hangs() -> None:
    db = HangingDatabase()
    beat = Heartbeat(
        db,  # type: ignore[arg-type]
        uuid.uuid4(),
        Owner("w#1", 1),
        lease_seconds=1.0,
        beat_seconds=0.1,
        progress_interval=0.05,
        deadline_seconds=60,
    )
    beat.start()
    try:
        deadline = time.monotonic() + 10
        while not beat.stop_requested.is_set() and time.monotonic() < deadline:
            beat.give_up_if_overdue()  # what check_cancel does at each step of the model
            time.sleep(0.05)
        assert beat.stop_reason == "lease_lost" and not beat.lease_held()
    finally:
        db.release.set()
        beat.stop()
