"""The reaper on its own: expired leases, exhausted attempts, pending cancels, lost messages."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.jobs.queries import get_job
from jobservice.jobs.reaper import reap
from jobservice.jobs.transitions import Owner, claim_job, request_cancel
from tests.factories import new_job, sqlite_copy


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    return sqlite_copy(migrated_sqlite, tmp_path)


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[str] = []
        self.fail = fail

    def __call__(self, job_id: uuid.UUID, model: str, priority: int) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.sent.append(str(job_id))


def expire(db: Database, job_id: uuid.UUID) -> None:
    with db.session() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def age_message(db: Database, job_id: uuid.UUID, seconds: float = 60) -> None:
    with db.session() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(enqueued_at=utcnow() - timedelta(seconds=seconds))
        )


def running(db: Database, worker: str = "w1") -> uuid.UUID:
    job_id = new_job(db)
    with db.session() as s:
        claim_job(s, job_id, worker_id=worker, lease_seconds=30)
    return job_id


def status(db: Database, job_id: uuid.UUID) -> Job:
    with db.session() as s:
        job = get_job(s, job_id)
    assert job is not None
    return job


def test_live_lease_is_left_alone(db: Database) -> None:
    job_id = running(db)
    send = Recorder()
    result = reap(db, send, lambda queues: set(), resend_after_seconds=0)
    assert not result.changed and send.sent == []
    assert status(db, job_id).status == JobStatus.RUNNING


def test_expired_lease_is_requeued_and_resent(db: Database) -> None:
    job_id = running(db)
    expire(db, job_id)
    send = Recorder()
    result = reap(db, send, lambda queues: set(), resend_after_seconds=60)
    assert result.requeued == [str(job_id)] and send.sent == [str(job_id)]
    job = status(db, job_id)
    assert job.status == JobStatus.QUEUED and job.worker_id is None and job.enqueued_at is not None
    # The old owner can no longer touch it; a new claim is attempt 2.
    with db.session() as s:
        again = claim_job(s, job_id, worker_id="w2", lease_seconds=30)
    assert again is not None and again.attempts == 2


def test_attempts_exhausted_fail_as_worker_lost(db: Database) -> None:
    job_id = running(db)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(max_attempts=1))
    expire(db, job_id)
    result = reap(db, Recorder(), None, resend_after_seconds=60)
    job = status(db, job_id)
    assert (
        result.failed == [str(job_id)] and job.status == JobStatus.FAILED and job.error_code == "worker_lost"
    )


def test_pending_cancel_of_a_dead_run_cancels(db: Database) -> None:
    job_id = running(db)
    with db.session() as s:
        request_cancel(s, job_id)
    expire(db, job_id)
    send = Recorder()
    result = reap(db, send, None, resend_after_seconds=60)
    assert result.canceled == [str(job_id)] and send.sent == []
    assert status(db, job_id).status == JobStatus.CANCELED


def test_lost_messages_are_resent_but_live_ones_are_not(db: Database) -> None:
    lost, live, fresh = new_job(db), new_job(db), new_job(db)
    age_message(db, lost)
    age_message(db, live)
    age_message(db, fresh, seconds=0)  # just sent: give the broker time before judging
    send = Recorder()
    result = reap(db, send, lambda queues: {str(live)}, resend_after_seconds=10)
    assert result.resent == [str(lost)] and send.sent == [str(lost)]
    resent_at = status(db, lost).enqueued_at
    assert resent_at is not None and resent_at > utcnow() - timedelta(seconds=5)
    assert fresh not in [uuid.UUID(s) for s in send.sent]


def test_never_sent_jobs_are_sent_even_when_the_broker_cannot_be_inspected(db: Database) -> None:
    never = new_job(db)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == never).values(enqueued_at=None))
    old = new_job(db)
    age_message(db, old)

    def broken(queues: set[str]) -> set[str]:
        raise ConnectionError("cannot read the broker")

    send = Recorder()
    reap(db, send, broken, resend_after_seconds=10)
    assert send.sent == [str(never)], "without the broker's view only never-sent jobs are sent"


def test_failed_send_is_retried_on_the_next_pass(db: Database) -> None:
    job_id = running(db)
    expire(db, job_id)
    reap(db, Recorder(fail=True), None, resend_after_seconds=60)
    job = status(db, job_id)
    assert job.status == JobStatus.QUEUED and job.enqueued_at is None
    send = Recorder()
    reap(db, send, lambda queues: set(), resend_after_seconds=60)
    assert send.sent == [str(job_id)]


def test_owner_identity_matters(db: Database) -> None:
    job_id = running(db, worker="w1")
    assert Owner("w1", 1) != Owner("w1", 2)
    assert status(db, job_id).worker_id == "w1"


def test_cancel_racing_a_requeue_still_cancels(db: Database) -> None:
    """A cancel that lands while the reaper requeues must not leave the job queued forever."""
    from jobservice.jobs.transitions import InvalidTransition, requeue_job

    job_id = running(db)
    expire(db, job_id)
    with db.session() as s:
        request_cancel(s, job_id)  # arrives after the reaper read the expired row...
    with pytest.raises(InvalidTransition), db.session() as s:  # ...so its requeue is refused
        requeue_job(s, job_id, owner=Owner("w1", 1), reason="test")
    result = reap(db, Recorder(), None, resend_after_seconds=60)
    assert result.canceled == [str(job_id)]
    assert status(db, job_id).status == JobStatus.CANCELED


def test_queued_job_with_a_stranded_cancel_request_is_canceled(db: Database) -> None:
    job_id = new_job(db)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(cancel_requested_at=utcnow()))
    send = Recorder()
    result = reap(db, send, lambda queues: set(), resend_after_seconds=0)
    assert result.canceled == [str(job_id)] and send.sent == []
    assert status(db, job_id).status == JobStatus.CANCELED


def test_lost_messages_are_resent_never_sent_first_then_in_queue_order(db: Database) -> None:
    batch_old = new_job(db, priority=6, created_offset=-50)
    young = new_job(db, created_offset=-10)
    old = new_job(db, created_offset=-40)
    never = new_job(db, priority=6, created_offset=-5)
    live = new_job(db, created_offset=-60)
    for job_id in (batch_old, young, old, live):
        age_message(db, job_id)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == never).values(enqueued_at=None))
    send = Recorder()
    reap(db, send, lambda queues: {str(live)}, resend_after_seconds=10)
    assert send.sent == [str(never), str(old), str(young), str(batch_old)]


def test_a_requeued_job_is_sent_although_its_dead_delivery_is_still_unacknowledged(db: Database) -> None:
    """The killed worker's delivery stays in Redis's unacked set for hours: it must not count as live.

    CI hung on this: a job requeued after its worker was SIGKILLed was never sent again, because its
    id was in the broker's unacked entries and another queued job made the reaper read them.
    """
    job_id = running(db)
    expire(db, job_id)
    waiting = new_job(db)
    age_message(db, waiting)  # another job waiting longer than resend_after: the broker is read
    send = Recorder()
    result = reap(db, send, lambda queues: {str(job_id), str(waiting)}, resend_after_seconds=10)
    assert result.requeued == [str(job_id)] and send.sent == [str(job_id)]
    assert status(db, job_id).enqueued_at is not None
