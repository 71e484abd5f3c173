"""The job state machine: named transitions, CAS claims, and random sequences of calls."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import update

from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.jobs.leases import heartbeat
from jobservice.jobs.queries import events_of, get_job
from jobservice.jobs.transitions import (
    ALLOWED,
    InvalidTransition,
    LeaseLost,
    Owner,
    claim_job,
    mark_canceled,
    mark_failed,
    mark_succeeded,
    request_cancel,
    requeue_job,
    transition_allowed,
)
from tests.factories import new_job, sqlite_copy


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    return sqlite_copy(migrated_sqlite, tmp_path)


def status_of(db: Database, job_id: uuid.UUID) -> JobStatus:
    with db.session() as s:
        job = get_job(s, job_id)
        assert job is not None
        return JobStatus(job.status)


def test_transition_table_is_closed_over_terminal_states() -> None:
    for status in JobStatus:
        if status.is_terminal:
            assert ALLOWED[status] == frozenset()
    assert transition_allowed(JobStatus.QUEUED, JobStatus.RUNNING)
    assert not transition_allowed(JobStatus.SUCCEEDED, JobStatus.RUNNING)
    assert not transition_allowed(JobStatus.QUEUED, JobStatus.SUCCEEDED)


def test_claim_is_exactly_once(db: Database) -> None:
    job_id = new_job(db)
    with db.session() as s:
        first = claim_job(s, job_id, worker_id="w1", lease_seconds=30)
    with db.session() as s:
        second = claim_job(s, job_id, worker_id="w2", lease_seconds=30)
    assert first is not None and first.worker_id == "w1" and first.attempts == 1
    assert second is None
    assert status_of(db, job_id) == JobStatus.RUNNING


def test_a_worker_that_lost_its_lease_cannot_finish_the_job(db: Database) -> None:
    job_id = new_job(db)
    with db.session() as s:
        claim_job(s, job_id, worker_id="w1", lease_seconds=30)
    with db.session() as s:
        requeue_job(s, job_id, owner=Owner("w1", 1), reason="test")
    with db.session() as s:
        claim_job(s, job_id, worker_id="w2", lease_seconds=30)
    with pytest.raises(LeaseLost), db.session() as s:
        mark_succeeded(
            s,
            job_id,
            owner=Owner("w1", 1),
            output_key="o",
            report_key="r",
            verdict="passed",
            timings={},
            validation_summary={},
            cold_start=False,
        )
    with db.session() as s:
        assert heartbeat(s, job_id, owner=Owner("w1", 1), lease_seconds=5).owned is False
        beat = heartbeat(s, job_id, owner=Owner("w2", 2), lease_seconds=5, stage="generating", progress=0.5)
    assert beat.owned and not beat.cancel_requested
    with db.session() as s:
        job = get_job(s, job_id)
        assert (
            job is not None
            and job.progress == 0.5
            and job.stage == "generating"
            and job.started_at is not None
        )


def test_cancel_queued_is_immediate_and_running_is_requested(db: Database) -> None:
    queued = new_job(db)
    with db.session() as s:
        assert request_cancel(s, queued) == JobStatus.CANCELED
    with db.session() as s:
        assert claim_job(s, queued, worker_id="w", lease_seconds=5) is None

    running = new_job(db)
    with db.session() as s:
        claim_job(s, running, worker_id="w", lease_seconds=5)
    with db.session() as s:
        assert request_cancel(s, running) == JobStatus.RUNNING
    with db.session() as s:
        assert heartbeat(s, running, owner=Owner("w", 1), lease_seconds=5).cancel_requested
    with db.session() as s:
        mark_canceled(s, running, owner=Owner("w", 1))
    with pytest.raises(InvalidTransition), db.session() as s:
        request_cancel(s, running)


def test_events_record_every_transition(db: Database) -> None:
    job_id = new_job(db)
    with db.session() as s:
        claim_job(s, job_id, worker_id="w", lease_seconds=5)
    with db.session() as s:
        mark_failed(s, job_id, code="model_error", message="boom", owner=Owner("w", 1))
    with db.session() as s:
        moves = [(e.from_status, e.to_status) for e in events_of(s, job_id)]
    assert moves == [(None, "queued"), ("queued", "running"), ("running", "failed")]


def test_claim_race_has_one_winner_on_sqlite(db: Database) -> None:
    _race(db)


@pytest.mark.postgres
def test_claim_race_has_one_winner_on_postgres(pg_url: str) -> None:
    _race(Database(pg_url))


def _race(db: Database) -> None:
    job_id = new_job(db)
    winners: list[str] = []
    barrier = threading.Barrier(8)

    def contender(name: str) -> None:
        barrier.wait()
        with db.session() as s:
            if claim_job(s, job_id, worker_id=name, lease_seconds=30) is not None:
                winners.append(name)

    threads = [threading.Thread(target=contender, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    with db.session() as s:
        job = get_job(s, job_id)
        assert job is not None and job.worker_id == winners[0] and job.attempts == 1
    db.dispose()


# --- property-based: random call sequences never break the machine -----------------------------
OPS = ["claim", "succeed", "fail", "cancel_request", "cancel_running", "requeue", "expire_and_fail"]


class JobMachine(RuleBasedStateMachine):
    """Drives one job with random calls; each call either moves it legally or is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.db: Database | None = None
        self.model_status = JobStatus.QUEUED
        self.attempt = 0
        self.owner = ""

    @initialize()
    def setup(self) -> None:
        self.db = SHARED_DB
        self.job_id = new_job(self.db)

    def _call(self, op: str, worker: str) -> None:
        assert self.db is not None
        before = self.model_status
        owner = Owner(worker, self.attempt)
        try:
            with self.db.session() as s:
                if op == "claim":
                    job = claim_job(s, self.job_id, worker_id=worker, lease_seconds=30)
                    if job is None:
                        raise InvalidTransition(self.job_id, before, JobStatus.RUNNING)
                    self.attempt, self.owner = job.attempts, worker
                    target = JobStatus.RUNNING
                elif op == "succeed":
                    mark_succeeded(
                        s,
                        self.job_id,
                        owner=owner,
                        output_key="o",
                        report_key="r",
                        verdict="passed",
                        timings={},
                        validation_summary={},
                        cold_start=False,
                    )
                    target = JobStatus.SUCCEEDED
                elif op == "fail":
                    mark_failed(s, self.job_id, code="x", message="y", owner=owner)
                    target = JobStatus.FAILED
                elif op == "cancel_request":
                    target = request_cancel(s, self.job_id)
                elif op == "cancel_running":
                    mark_canceled(s, self.job_id, owner=owner)
                    target = JobStatus.CANCELED
                elif op == "requeue":
                    requeue_job(s, self.job_id, owner=owner, reason="test")
                    target = JobStatus.QUEUED
                else:
                    s.execute(update(Job).where(Job.id == self.job_id).values(lease_expires_at=utcnow()))
                    mark_failed(
                        s,
                        self.job_id,
                        code="worker_lost",
                        message="gone",
                        from_statuses=frozenset({JobStatus.QUEUED}),
                    )
                    target = JobStatus.FAILED
        except InvalidTransition:
            # Refused: nothing may have changed.
            assert status_of(self.db, self.job_id) == before
            return
        # Accepted: the move must be legal (or a no-op cancel request of a running job).
        assert target == before or transition_allowed(before, target), f"{before} -> {target} via {op}"
        if op in {"succeed", "fail", "cancel_running", "requeue"}:
            assert worker == self.owner, "only the owning worker may finish a running job"
        self.model_status = target

    @rule(op=st.sampled_from(OPS), worker=st.sampled_from(["w1", "w2"]))
    def call(self, op: str, worker: str) -> None:
        self._call(op, worker)

    @invariant()
    def table_matches_model(self) -> None:
        if self.db is not None:
            assert status_of(self.db, self.job_id) == self.model_status


SHARED_DB: Database


@pytest.fixture
def shared_db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    global SHARED_DB
    SHARED_DB = sqlite_copy(migrated_sqlite, tmp_path, "machine.db")
    return SHARED_DB


def test_random_transition_sequences(shared_db: Database) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        JobMachine,
        settings=settings(
            max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
