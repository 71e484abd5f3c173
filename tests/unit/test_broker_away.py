"""The reaper while the broker is away: the database moves still happen, sends wait for the broker.

(The stall that a user saw: a killed Redis left jobs ``running`` on expired leases for minutes.)
"""

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
from jobservice.jobs.transitions import claim_job
from tests.factories import new_job, sqlite_copy


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    return sqlite_copy(migrated_sqlite, tmp_path)


class Broker:
    """A sender whose broker can be down; counts every attempt."""

    def __init__(self) -> None:
        self.up = False
        self.attempts = 0
        self.sent: list[str] = []

    def __call__(self, job_id: uuid.UUID, model: str, priority: int) -> None:
        self.attempts += 1
        if not self.up:
            raise ConnectionError("Error 111 connecting to redis.sock. Connection refused.")
        self.sent.append(str(job_id))

    def pending(self, queues: set[str]) -> set[str]:
        if not self.up:
            raise ConnectionError("cannot read the broker")
        return set()


def expired_run(db: Database) -> uuid.UUID:
    job_id = new_job(db)
    with db.session() as s:
        claim_job(s, job_id, worker_id="dead#1", lease_seconds=30)
        s.execute(
            update(Job).where(Job.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    return job_id


def job(db: Database, job_id: uuid.UUID) -> Job:
    with db.session() as s:
        found = get_job(s, job_id)
    assert found is not None
    return found


def test_expired_leases_are_requeued_while_the_broker_is_away(db: Database) -> None:
    runs = [expired_run(db) for _ in range(2)]
    broker = Broker()
    result = reap(db, broker, broker.pending, resend_after_seconds=10)
    assert sorted(result.requeued) == sorted(str(j) for j in runs)
    for job_id in runs:
        row = job(db, job_id)
        assert row.status == JobStatus.QUEUED and row.worker_id is None and row.enqueued_at is None
    assert sorted(result.unsent) == sorted(str(j) for j in runs) and result.resent == []


def test_one_failed_send_stops_the_pass_and_the_next_pass_catches_up(db: Database) -> None:
    never_sent = [new_job(db) for _ in range(5)]
    with db.session() as s:
        s.execute(update(Job).where(Job.id.in_(never_sent)).values(enqueued_at=None))
    broker = Broker()
    result = reap(db, broker, broker.pending, resend_after_seconds=10)
    # Each send may wait out a connect timeout: after the first failure the pass sends no more.
    assert broker.attempts == 1 and len(result.unsent) == 5
    broker.up = True
    result = reap(db, broker, broker.pending, resend_after_seconds=10)
    assert sorted(broker.sent) == sorted(str(j) for j in never_sent) and result.unsent == []
    assert all(job(db, j).enqueued_at is not None for j in never_sent)


def test_messages_lost_with_the_broker_are_resent_when_it_returns(db: Database) -> None:
    lost = new_job(db)
    with db.session() as s:  # sent a minute ago, into a Redis that has since restarted empty
        s.execute(update(Job).where(Job.id == lost).values(enqueued_at=utcnow() - timedelta(seconds=60)))
    requeued = expired_run(db)
    broker = Broker()
    reap(db, broker, broker.pending, resend_after_seconds=10)
    assert broker.sent == [] and job(db, requeued).status == JobStatus.QUEUED
    broker.up = True
    result = reap(db, broker, broker.pending, resend_after_seconds=10)
    # Never-sent first (the requeued run), then the one whose message the broker lost.
    assert broker.sent == [str(requeued), str(lost)] and result.resent == broker.sent
