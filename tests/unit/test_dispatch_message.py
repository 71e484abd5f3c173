"""One eviction decision: the dispatcher decides, the message (format 2) and the job's row carry the
decision, the reaper sends it again unchanged, and the worker's group carries it out without ever
reading the queue (a message without one, from an older release, evicts the least recently used)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import update

from jobservice.broker import (
    DECISION_HEADER,
    MESSAGE_HEADER,
    MESSAGE_VERSION,
    TRACE_HEADER,
    DispatchDecision,
    JobMessage,
    message_version,
)
from jobservice.catalog import Catalog
from jobservice.db.engine import Database
from jobservice.db.tables import Job, utcnow
from jobservice.fleet import card_groups
from jobservice.fleet.dispatch import dispatch
from jobservice.fleet.placement import parse_devices
from jobservice.fleet.policy import Resident
from jobservice.jobs.queries import get_job
from jobservice.jobs.reaper import hand_back, reap
from jobservice.settings import Settings
from tests.factories import new_job, online_group
from workers.card_group import FleetMember

A, B, C = "fake-heavy-a", "fake-heavy-b", "fake-heavy-c"  # 3 GB each
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def settings(offline_settings: Settings) -> Settings:
    return offline_settings  # not the Redis-backed one: nothing here reaches a service


class Sent(list[JobMessage]):
    """A sender that keeps what it was given."""

    def __call__(self, message: JobMessage) -> None:
        self.append(message)


def job_row(db: Database, job_id: uuid.UUID) -> Job:
    with db.session() as s:
        job = get_job(s, job_id)
    assert job is not None
    return job


# --- the format -----------------------------------------------------------------------------------
def test_a_message_carries_the_decision_and_the_trace_in_headers() -> None:
    decision = DispatchDecision(model=B, load=True, evict=(A,), reason="unserved")
    message = JobMessage(job_id=uuid.uuid4(), group="g1", priority=6, decision=decision, trace=TRACE)
    headers = message.headers()
    assert headers == {
        MESSAGE_HEADER: MESSAGE_VERSION,
        DECISION_HEADER: {"model": B, "load": True, "evict": [A], "reason": "unserved"},
        TRACE_HEADER: TRACE,
    }
    assert MESSAGE_VERSION == 2
    # Celery hands custom headers to the task as attributes of its request (or in ``headers``).
    for request in (SimpleNamespace(**headers), SimpleNamespace(headers=headers)):
        read = JobMessage.received(message.job_id, request)
        assert (read.decision, read.trace, read.version) == (decision, TRACE, 2)
        assert message_version(request) == 2
    # Without a trace, no trace header; without a decision, no decision header.
    assert set(JobMessage(job_id=message.job_id, group="g1").headers()) == {MESSAGE_HEADER}


def test_an_older_releases_message_reads_as_version_1_without_a_decision() -> None:
    read = JobMessage.received(uuid.uuid4(), SimpleNamespace(headers={}))
    assert (read.version, read.decision, read.trace) == (1, None, None)
    garbled = SimpleNamespace(
        headers={MESSAGE_HEADER: "two", DECISION_HEADER: {"evict": "fake-heavy-a"}, TRACE_HEADER: 7}
    )
    read = JobMessage.received(uuid.uuid4(), garbled)
    assert (read.version, read.decision, read.trace) == (1, None, None)


@pytest.mark.parametrize(
    "raw",
    [None, "evict a", [], {"evict": [A]}, {"model": B, "evict": A}, {"model": B, "evict": [1]}],
)
def test_anything_but_a_decision_reads_as_none(raw: Any) -> None:
    assert DispatchDecision.from_dict(raw) is None


def test_a_decision_survives_json() -> None:
    decision = DispatchDecision(model=C, load=True, evict=(A, B), reason="backlog")
    assert DispatchDecision.from_dict(decision.as_dict()) == decision


# --- the dispatcher and the reaper ------------------------------------------------------------------
def holding(db: Database, group: str, *models: str) -> None:
    with db.session() as s:
        for model in models:
            card_groups.note_loaded(s, group, model, seconds=2.0, reason="test")


def test_the_dispatchers_decision_is_stored_and_sent_and_sent_again_unchanged(
    db: Database, catalog: Catalog, settings: Settings
) -> None:
    online_group(db, "g1", [A, B], memory_gb_per_card=4)
    holding(db, "g1", A)
    job_id = new_job(db, model=B)
    sent = Sent()
    handed = dispatch(db, catalog, settings, sent)
    assert [h.job_id for h in handed] == [job_id]
    expected = DispatchDecision(model=B, load=True, evict=(A,), reason="unserved")
    assert [(m.job_id, m.group, m.decision) for m in sent] == [(job_id, "g1", expected)]
    assert job_row(db, job_id).dispatch_decision == expected.as_dict()

    # The message is lost before it was sent (the broker was away): the reaper sends the same.
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(enqueued_at=None))
    again = Sent()
    result = reap(db, again, lambda queues: set(), lambda: {"g1"}, resend_after_seconds=10)
    assert result.resent == [str(job_id)]
    assert [(m.job_id, m.group, m.decision) for m in again] == [(job_id, "g1", expected)]

    # Handed back (its message gone): the decision goes with the dispatch.
    assert hand_back(db, job_id, "g1")
    assert job_row(db, job_id).dispatch_decision is None


def test_a_job_dispatched_by_an_older_release_is_sent_again_without_a_decision(db: Database) -> None:
    job_id = new_job(db, model=A)
    with db.session() as s:  # an older release's dispatcher wrote no decision
        s.execute(update(Job).where(Job.id == job_id).values(dispatched_to="g1", enqueued_at=None))
    sent = Sent()
    reap(db, sent, lambda queues: set(), lambda: {"g1"}, resend_after_seconds=10)
    assert [(m.job_id, m.decision) for m in sent] == [(job_id, None)]


# --- the worker's group carries it out ------------------------------------------------------------
class NoDatabase:
    """A database that fails on use: the eviction must not read the queue (or anything else)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the worker read the database ({name}) to choose an eviction")


def member(catalog: Catalog, memory_gb: float | None = 7.0) -> FleetMember:
    services: Any = SimpleNamespace(db=NoDatabase(), catalog=catalog)
    return FleetMember(
        services,
        group_id="g1",
        device=parse_devices("cpu"),
        memory_gb_per_card=memory_gb,
        eligible=[A, B, C],
    )


def held(**last_used: float) -> dict[str, Resident]:
    names = {"a": A, "b": B, "c": C}
    return {names[k]: Resident(since=0.0, last_used=t) for k, t in last_used.items()}


def test_the_worker_evicts_what_the_dispatcher_decided(catalog: Catalog) -> None:
    spec = catalog.get(C)
    assert spec is not None
    # Holding A (used long ago) and B (just used), 7 GB: C needs one of them out.
    both = held(a=100.0, b=900.0)
    assert member(catalog).evictions(spec, both, decided=(B,)) == (B,)  # not the least recently used
    assert member(catalog).evictions(spec, both, decided=(A,)) == (A,)


def test_without_a_decision_the_least_recently_used_goes(catalog: Catalog) -> None:
    spec = catalog.get(C)
    assert spec is not None
    assert member(catalog).evictions(spec, held(a=100.0, b=900.0), decided=None) == (A,)
    assert member(catalog).evictions(spec, held(a=900.0, b=100.0), decided=None) == (B,)
    assert member(catalog).evictions(spec, held(a=100.0), decided=None) == ()  # it fits beside A


def test_a_decision_that_leaves_too_little_room_is_completed_least_recently_used_first(
    catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    spec = catalog.get(C)
    assert spec is not None
    # The dispatcher saw the group hold A only (a note of B's load was lost) and decided nothing;
    # C cannot fit beside both: the least recently used goes too, and the log says why.
    assert member(catalog).evictions(spec, held(a=100.0, b=900.0), decided=()) == (A,)
    assert "after the dispatcher's evictions" in caplog.text
    # A decided model the process no longer holds is skipped, and nothing more is needed.
    assert member(catalog).evictions(spec, held(b=900.0), decided=(A,)) == ()
    # Without declared memory the decision is carried out as it is.
    assert member(catalog, memory_gb=None).evictions(spec, held(a=1.0, b=2.0), decided=(B,)) == (B,)


def test_sent_again_messages_keep_their_age(db: Database) -> None:
    """A message sent long ago whose job is still queued and dispatched is not sent twice while it
    lives in the broker (the decision rides on the one that is there)."""
    job_id = new_job(db, model=A)
    decision = DispatchDecision(model=A, load=True)
    with db.session() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                dispatched_to="g1",
                enqueued_at=utcnow() - timedelta(seconds=60),
                dispatch_decision=decision.as_dict(),
            )
        )
    sent = Sent()
    reap(db, sent, lambda queues: {str(job_id)}, lambda: {"g1"}, resend_after_seconds=10)
    assert sent == [] and job_row(db, job_id).dispatch_decision == decision.as_dict()


@pytest.mark.parametrize(("skip", "handed_out"), [(0, 0), (1, 1), (9, 2)])
def test_a_decision_that_leaves_the_oldest_jobs_to_a_warm_group_hands_out_the_next(
    db: Database,
    catalog: Catalog,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    skip: int,
    handed_out: int,
) -> None:
    # The policy's ``skip``: a group that loads while another holds the model warm takes the job the
    # warm one would start last; the dispatcher hands out that one, not the oldest (past the end of
    # the queue: the newest).
    from jobservice.fleet import dispatch as dispatcher
    from jobservice.fleet.policy import Decision

    online_group(db, "g1", [A, B], memory_gb_per_card=4)
    ids = [new_job(db, model=A, created_offset=k) for k in range(3)]
    tenant = job_row(db, ids[0]).tenant
    decision = Decision(group="g1", model=A, priority=0, tenant=tenant, load=True, skip=skip)
    monkeypatch.setattr(dispatcher, "plan", lambda state: [decision])
    handed = dispatch(db, catalog, settings, Sent())
    assert [h.job_id for h in handed] == [ids[handed_out]]
