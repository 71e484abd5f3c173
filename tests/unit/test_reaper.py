"""The reaper on its own: expired leases, exhausted attempts, pending cancels, and the messages of
jobs handed to card groups (sent again, or handed back to the dispatcher)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from jobservice.broker import JobMessage
from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus, JobUsage, utcnow
from jobservice.jobs.queries import get_job
from jobservice.jobs.reaper import ReapResult, reap
from jobservice.jobs.transitions import Owner, claim_job, request_cancel
from tests.factories import new_job, sqlite_copy


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    return sqlite_copy(migrated_sqlite, tmp_path)


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[str] = []
        self.groups: list[str] = []
        self.messages: list[JobMessage] = []
        self.fail = fail

    def __call__(self, message: JobMessage) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.sent.append(str(message.job_id))
        self.groups.append(message.group)
        self.messages.append(message)


def expire(db: Database, job_id: uuid.UUID) -> None:
    with db.session() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def dispatched(db: Database, job_id: uuid.UUID, *, group: str = "g1", sent_ago: float | None = 60) -> None:
    """The job handed to ``group``; its message sent ``sent_ago`` seconds ago (None: never sent)."""
    at = None if sent_ago is None else utcnow() - timedelta(seconds=sent_ago)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(dispatched_to=group, enqueued_at=at))


def online(*groups: str) -> Callable[[], set[str]]:
    return lambda: set(groups)


def reap_(
    db: Database, send: Recorder, pending: Callable[[set[str]], set[str]] | None, **kw: Any
) -> ReapResult:
    alive = kw.pop("alive", ("g1",))
    return reap(
        db, send, pending, online(*alive), resend_after_seconds=kw.pop("resend_after_seconds", 10), **kw
    )


def running(db: Database, worker: str = "w1", group: str | None = None) -> uuid.UUID:
    job_id = new_job(db)
    if group is not None:
        dispatched(db, job_id, group=group)
    with db.session() as s:
        claim_job(s, job_id, worker_id=worker, lease_seconds=30, group=group)
    return job_id


def status(db: Database, job_id: uuid.UUID) -> Job:
    with db.session() as s:
        job = get_job(s, job_id)
    assert job is not None
    return job


def test_live_lease_is_left_alone(db: Database) -> None:
    job_id = running(db)
    send = Recorder()
    result = reap_(db, send, lambda queues: set(), resend_after_seconds=0)
    assert not result.changed and send.sent == []
    assert status(db, job_id).status == JobStatus.RUNNING


def test_expired_lease_is_requeued_back_to_the_dispatcher(db: Database) -> None:
    job_id = running(db, group="g1")
    expire(db, job_id)
    send = Recorder()
    result = reap_(db, send, lambda queues: set(), resend_after_seconds=60)
    assert result.requeued == [str(job_id)] and send.sent == []  # the dispatcher places it again
    job = status(db, job_id)
    assert job.status == JobStatus.QUEUED and job.worker_id is None
    assert job.dispatched_to is None and job.enqueued_at is None
    # The old owner can no longer touch it; a new claim is attempt 2.
    dispatched(db, job_id, group="g2")
    with db.session() as s:
        again = claim_job(s, job_id, worker_id="w2", lease_seconds=30, group="g2")
    assert again is not None and again.attempts == 2


def test_the_lost_attempts_card_time_is_written_off_not_charged(db: Database) -> None:
    job_id = running(db, group="g1")
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(heartbeat_at=utcnow() + timedelta(seconds=4)))
    expire(db, job_id)
    reap_(db, Recorder(), None, cards_of=lambda model: 2)
    with db.session() as s:
        rows = list(s.scalars(select(JobUsage).where(JobUsage.job_id == job_id)))
        job = s.get(Job, job_id)
    assert [(r.outcome, r.charged, r.cards) for r in rows] == [("worker_lost", False, 2)]
    assert rows[0].card_seconds == pytest.approx(8.0, abs=0.5)  # 4 s held, two cards
    assert job is not None and job.usage is not None
    assert job.usage["card_seconds"] == 0.0 and job.usage["wasted_card_seconds"] == rows[0].card_seconds


def test_attempts_exhausted_fail_as_worker_lost(db: Database) -> None:
    job_id = running(db)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(max_attempts=1))
    expire(db, job_id)
    result = reap_(db, Recorder(), None, resend_after_seconds=60)
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
    result = reap_(db, send, None, resend_after_seconds=60)
    assert result.canceled == [str(job_id)] and send.sent == []
    assert status(db, job_id).status == JobStatus.CANCELED


def test_queued_jobs_not_handed_out_are_left_to_the_dispatcher(db: Database) -> None:
    waiting = new_job(db, created_offset=-600)
    send = Recorder()
    result = reap_(db, send, lambda queues: set(), resend_after_seconds=0)
    assert not result.changed and send.sent == []
    assert status(db, waiting).dispatched_to is None


def test_never_sent_messages_are_sent_to_their_group(db: Database) -> None:
    never, live, fresh = new_job(db), new_job(db), new_job(db)
    dispatched(db, never, group="g1", sent_ago=None)
    dispatched(db, live, group="g1")
    dispatched(db, fresh, group="g1", sent_ago=0)  # just sent: give the broker time before judging
    send = Recorder()
    result = reap_(db, send, lambda queues: {str(live)})
    assert result.resent == [str(never)] and send.sent == [str(never)] and send.groups == ["g1"]
    resent_at = status(db, never).enqueued_at
    assert resent_at is not None and resent_at > utcnow() - timedelta(seconds=5)


def test_a_message_gone_from_the_broker_is_handed_back(db: Database) -> None:
    lost, live = new_job(db), new_job(db)
    dispatched(db, lost, group="g1")
    dispatched(db, live, group="g1")
    seen: list[set[str]] = []

    def pending(queues: set[str]) -> set[str]:
        seen.append(queues)
        return {str(live)}

    send = Recorder()
    result = reap_(db, send, pending)
    assert seen == [{"group.g1"}]  # the group's own queue is read
    assert result.handed_back == [str(lost)] and send.sent == []
    assert status(db, lost).dispatched_to is None and status(db, live).dispatched_to == "g1"


def test_a_job_whose_group_went_away_is_handed_back(db: Database) -> None:
    orphan = new_job(db)
    dispatched(db, orphan, group="gone", sent_ago=None)
    send = Recorder()
    result = reap_(db, send, lambda queues: {str(orphan)}, alive=("g1",))
    assert result.handed_back == [str(orphan)] and send.sent == []
    assert status(db, orphan).dispatched_to is None


def test_never_sent_jobs_are_sent_even_when_the_broker_cannot_be_inspected(db: Database) -> None:
    never, old = new_job(db), new_job(db)
    dispatched(db, never, sent_ago=None)
    dispatched(db, old)

    def broken(queues: set[str]) -> set[str]:
        raise ConnectionError("cannot read the broker")

    send = Recorder()
    result = reap_(db, send, broken)
    assert send.sent == [str(never)], "without the broker's view only never-sent jobs are sent"
    assert result.handed_back == [], "nothing is handed back on a guess"


def test_failed_send_is_retried_on_the_next_pass(db: Database) -> None:
    job_id = new_job(db)
    dispatched(db, job_id, sent_ago=None)
    result = reap_(db, Recorder(fail=True), None)
    assert result.unsent == [str(job_id)] and status(db, job_id).enqueued_at is None
    send = Recorder()
    reap_(db, send, lambda queues: set())
    assert send.sent == [str(job_id)]


def test_owner_identity_matters(db: Database) -> None:
    job_id = running(db, worker="w1")
    assert Owner("w1", 1) != Owner("w1", 2)
    assert status(db, job_id).worker_id == "w1"


def test_a_claim_needs_the_group_the_job_was_handed_to(db: Database) -> None:
    job_id = new_job(db)
    dispatched(db, job_id, group="g1")
    with db.session() as s:
        assert claim_job(s, job_id, worker_id="w2", lease_seconds=30, group="g2") is None
    with db.session() as s:
        assert claim_job(s, job_id, worker_id="w1", lease_seconds=30, group="g1") is not None


def test_cancel_racing_a_requeue_still_cancels(db: Database) -> None:
    """A cancel that lands while the reaper requeues must not leave the job queued forever."""
    from jobservice.jobs.transitions import InvalidTransition, requeue_job

    job_id = running(db)
    expire(db, job_id)
    with db.session() as s:
        request_cancel(s, job_id)  # arrives after the reaper read the expired row...
    with pytest.raises(InvalidTransition), db.session() as s:  # ...so its requeue is refused
        requeue_job(s, job_id, owner=Owner("w1", 1), reason="test")
    result = reap_(db, Recorder(), None, resend_after_seconds=60)
    assert result.canceled == [str(job_id)]
    assert status(db, job_id).status == JobStatus.CANCELED


def test_queued_job_with_a_stranded_cancel_request_is_canceled(db: Database) -> None:
    job_id = new_job(db)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(cancel_requested_at=utcnow()))
    send = Recorder()
    result = reap_(db, send, lambda queues: set(), resend_after_seconds=0)
    assert result.canceled == [str(job_id)] and send.sent == []
    assert status(db, job_id).status == JobStatus.CANCELED
