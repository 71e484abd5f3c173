"""The reaper while the broker is away: the database moves still happen, sends wait for the broker.

(The stall that a user saw: a killed Redis left jobs ``running`` on expired leases for minutes.)
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from jobservice.broker import JobMessage
from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.jobs.queries import get_job
from jobservice.jobs.reaper import ReapResult, reap
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

    def __call__(self, message: JobMessage) -> None:
        self.attempts += 1
        if not self.up:
            raise ConnectionError("Error 111 connecting to redis.sock. Connection refused.")
        self.sent.append(str(message.job_id))

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


def dispatched(db: Database, job_ids: list[uuid.UUID], *, sent_ago: float | None) -> None:
    at = None if sent_ago is None else utcnow() - timedelta(seconds=sent_ago)
    with db.session() as s:
        s.execute(update(Job).where(Job.id.in_(job_ids)).values(dispatched_to="g1", enqueued_at=at))


def reap_(db: Database, broker: Broker) -> ReapResult:
    return reap(db, broker, broker.pending, lambda: {"g1"}, resend_after_seconds=10)


def test_expired_leases_are_requeued_while_the_broker_is_away(db: Database) -> None:
    runs = [expired_run(db) for _ in range(2)]
    broker = Broker()
    result = reap_(db, broker)
    assert sorted(result.requeued) == sorted(str(j) for j in runs)
    for job_id in runs:
        row = job(db, job_id)
        assert row.status == JobStatus.QUEUED and row.worker_id is None and row.dispatched_to is None
    assert broker.attempts == 0, "requeued jobs wait in the table for the dispatcher: nothing to send"


def test_one_failed_send_stops_the_pass_and_the_next_pass_catches_up(db: Database) -> None:
    never_sent = [new_job(db) for _ in range(5)]
    dispatched(db, never_sent, sent_ago=None)
    broker = Broker()
    result = reap_(db, broker)
    # Each send may wait out a connect timeout: after the first failure the pass sends no more.
    assert broker.attempts == 1 and len(result.unsent) == 5
    broker.up = True
    result = reap_(db, broker)
    assert sorted(broker.sent) == sorted(str(j) for j in never_sent) and result.unsent == []
    assert all(job(db, j).enqueued_at is not None for j in never_sent)


def test_messages_lost_with_the_broker_are_handed_back_when_it_returns(db: Database) -> None:
    lost = new_job(db)
    dispatched(db, [lost], sent_ago=60)  # sent a minute ago, into a Redis that has since restarted empty
    broker = Broker()
    result = reap_(db, broker)
    assert result.handed_back == [], "the broker cannot be read: nothing is judged lost"
    broker.up = True
    result = reap_(db, broker)
    assert result.handed_back == [str(lost)] and job(db, lost).dispatched_to is None
