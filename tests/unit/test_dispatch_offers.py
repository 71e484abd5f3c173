"""Standing offers: a dispatch round that leaves a group free while nothing waits records what the
policy would start there at once, and a submission takes it in the transaction that records the
job (dispatched and sent from the request, no round, no bell). Guarded: a taken, stale or
withdrawn offer is never taken, a busy or draining group is never given a second job, and on
PostgreSQL a submission skips an offer a round is withdrawing instead of waiting for it.
Against the test Redis and PostgreSQL (the integration tier)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import select, update

from jobservice.broker import BrokerInspector, group_queue
from jobservice.db.tables import FleetGroup, FleetOffer, Job, TenantShare, utcnow
from jobservice.fleet import card_groups, wake
from jobservice.fleet.dispatch import dispatch_round
from jobservice.fleet.policy import (
    INTERACTIVE,
    CardGroupState,
    FleetState,
    ModelCost,
    Resident,
    Waiting,
    standing_offers,
)
from jobservice.http.app import create_app
from jobservice.jobs.queries import get_job
from jobservice.settings import Settings
from jobservice.wiring import Services, build_services
from tests.factories import new_job, online_group

T2V = "reference-t2v"
OTHER = "fake-good"


# --- the policy's part (pure) ---------------------------------------------------------------------
def state(*groups: CardGroupState, waiting: tuple[Waiting, ...] = ()) -> FleetState:
    models = {m: ModelCost(m, load_s=30.0, speed=2.0) for m in ("a", "b")}
    return FleetState(now=1000.0, groups=groups, models=models, waiting=waiting)


def group(gid: str, *held: str, busy: bool = False) -> CardGroupState:
    return CardGroupState(
        id=gid,
        cards=1,
        eligible=frozenset({"a", "b"}),
        resident={m: Resident(since=0.0, last_used=900.0) for m in held},
        busy_until=1100.0 if busy else None,
    )


def test_the_policy_offers_a_free_group_for_each_model_it_holds_warm() -> None:
    offered = standing_offers(state(group("g1", "a"), group("g2", "b", busy=True)), (INTERACTIVE, 5))
    assert {(d.group, d.model, d.priority, d.load, d.evict) for d in offered} == {
        ("g1", "a", 0, False, ()),
        ("g1", "a", 5, False, ()),
    }  # not b: g1 would load it (a decision a round makes), and g2 is busy


def test_one_offer_per_model_and_none_while_jobs_wait() -> None:
    both = standing_offers(state(group("g1", "a"), group("g2", "a")), (INTERACTIVE,))
    assert [(d.model, d.priority) for d in both] == [("a", 0)]  # the group plan would pick
    queued = Waiting("b", 0, "t", jobs=1, output_s=4.0, oldest=990.0, next_output_s=4.0)
    assert standing_offers(state(group("g1", "a"), waiting=(queued,)), (INTERACTIVE,)) == []


# --- the service's part ---------------------------------------------------------------------------
def hold(services: Services, group_id: str, model: str) -> None:
    now = utcnow()
    with services.db.session() as s:
        card_groups.note_resident(s, group_id, {model: (now, now)})


def offers(services: Services) -> set[tuple[str, str, int]]:
    with services.db.session() as s:
        return {(o.group_id, o.model, o.priority) for o in s.scalars(select(FleetOffer))}


def post(client: FlaskClient, prompt: str = "an offer", model: str = T2V) -> uuid.UUID:
    answer = client.post("/jobs", json={"model": model, "prompt": prompt, "num_frames": 8})
    assert answer.status_code == 202, answer.get_data(as_text=True)
    return uuid.UUID(answer.get_json()["id"])


def job_row(services: Services, job_id: uuid.UUID) -> Job:
    with services.db.session() as s:
        job = get_job(s, job_id)
    assert job is not None
    return job


def tokens(services: Services) -> int:
    return int(redis.Redis.from_url(services.settings.broker_url).llen(wake.KEY))


def pending(services: Services, group_id: str) -> set[str]:
    inspector = BrokerInspector.of(services.settings)
    try:
        return inspector.pending_job_ids({group_queue(group_id)})
    finally:
        inspector.close()


def ready(services: Services) -> None:
    """One free group, g1, holding the text2video model warm, and the round that offers it."""
    online_group(services.db, "g1", [T2V, OTHER])
    hold(services, "g1", T2V)
    assert dispatch_round(services) == []
    batch = services.settings.batch_priority
    assert offers(services) == {("g1", T2V, INTERACTIVE), ("g1", T2V, batch)}  # not OTHER: a load


def test_a_submission_takes_the_offer_and_is_sent_from_the_request(
    services: Services, client: FlaskClient
) -> None:
    ready(services)
    job_id = post(client)
    job = job_row(services, job_id)
    assert job.dispatched_to == "g1" and job.enqueued_at is not None
    assert job.dispatch_decision == {"model": T2V, "load": False, "evict": [], "reason": "warm"}
    with services.db.session() as s:
        g1 = s.get(FleetGroup, "g1")
        assert g1 is not None and g1.next_job_id == job_id and g1.busy_until is not None
    assert pending(services, "g1") == {str(job_id)}  # its message, sent by the request
    assert tokens(services) == 0  # no round was asked for

    second = post(client, "after the offer")  # g1 is busy now (its offer stands till the next round)
    assert job_row(services, second).dispatched_to is None
    assert pending(services, "g1") == {str(job_id)}
    with services.db.session() as s:
        g1 = s.get(FleetGroup, "g1")
        assert g1 is not None and g1.next_job_id == job_id


def test_a_groups_offers_go_when_its_card_is_released(services: Services, client: FlaskClient) -> None:
    """Offers were made before the group's last job: free again, it takes a new job only as the
    round its worker runs next decides (until then a submission waits for that round)."""
    ready(services)
    first = post(client)
    with services.db.session() as s:
        card_groups.take_job(s, "g1", first, model=T2V)
    assert offers(services) == {("g1", T2V, services.settings.batch_priority)}  # the one taken is gone
    with services.db.session() as s:
        card_groups.release_job(s, "g1", first)
    assert offers(services) == set()
    assert job_row(services, post(client, "after the release")).dispatched_to is None
    dispatch_round(services)  # the round after the release hands it out and offers nothing
    assert offers(services) == set()


def test_no_offer_is_made_while_a_job_waits(services: Services, client: FlaskClient) -> None:
    online_group(services.db, "g1", [T2V])
    hold(services, "g1", T2V)
    new_job(services.db, model=OTHER)  # queued, and no group may run it
    dispatch_round(services)
    assert offers(services) == set()
    assert job_row(services, post(client)).dispatched_to is None  # the round decides, with the queue


def test_taking_an_offer_starts_the_tenant_competing_only_if_nothing_else_of_its_waits(
    services: Services, client: FlaskClient
) -> None:
    ready(services)
    other = new_job(services.db, model="reference-talking-head")  # the tenant's, waiting for a round
    assert job_row(services, post(client)).dispatched_to == "g1"
    with services.db.session() as s:  # it was competing already (its other job waits)
        assert s.get(TenantShare, "default") is None
    with services.db.session() as s:
        s.execute(update(Job).where(Job.id != other).values(status="succeeded"))
        s.execute(update(Job).where(Job.id == other).values(status="canceled"))
        s.execute(update(FleetGroup).values(next_job_id=None, busy_until=None))
    dispatch_round(services)
    assert job_row(services, post(client, "alone")).dispatched_to == "g1"
    with services.db.session() as s:  # nothing else of its waited: it starts competing now
        share = s.get(TenantShare, "default")
        assert share is not None and share.activated_at is not None


@pytest.mark.parametrize("change", ["draining", "busy", "stale", "withdrawn"])
def test_an_offer_is_not_taken_once_its_group_or_time_has_moved_on(
    services: Services, client: FlaskClient, change: str
) -> None:
    ready(services)
    with services.db.session() as s:
        if change == "draining":
            card_groups.start_draining(s, "g1")
        elif change == "busy":  # a job dispatched to it by a path that is no round
            s.execute(update(FleetGroup).where(FleetGroup.id == "g1").values(job_id=uuid.uuid4()))
        elif change == "stale":  # its worker fell silent
            s.execute(update(FleetOffer).values(until=utcnow() - timedelta(seconds=1)))
    if change == "withdrawn":  # a round that hands g1 a queued job withdraws the offer first
        queued = new_job(services.db)
        dispatch_round(services)
        assert job_row(services, queued).dispatched_to == "g1"
        assert offers(services) == set()
    job_id = post(client)
    assert job_row(services, job_id).dispatched_to is None
    assert str(job_id) not in pending(services, "g1")


# --- PostgreSQL: a round and submissions at once --------------------------------------------------
@pytest.fixture
def pg_services(settings: Settings, pg_url: str) -> Iterator[Services]:
    svc = build_services(settings.model_copy(update={"database_url": pg_url}))
    yield svc
    svc.db.dispose()


def posted_at_once(services: Services, count: int) -> list[uuid.UUID]:
    """``count`` submissions in threads at the same moment (each its own client)."""
    clients = [create_app(services=services).test_client() for _ in range(count)]
    start = threading.Barrier(count)
    found: list[uuid.UUID] = []

    def submit(client: FlaskClient) -> None:
        start.wait()
        found.append(post(client, "at once"))

    threads = [threading.Thread(target=submit, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(found) == count
    return found


@pytest.mark.postgres
def test_two_submissions_at_once_take_one_offer(pg_services: Services) -> None:
    ready(pg_services)
    jobs = posted_at_once(pg_services, 4)
    taken = [j for j in jobs if job_row(pg_services, j).dispatched_to == "g1"]
    assert len(taken) == 1
    with pg_services.db.session() as s:
        g1 = s.get(FleetGroup, "g1")
        assert g1 is not None and g1.next_job_id == taken[0]
    assert pending(pg_services, "g1") == {str(taken[0])}


@pytest.mark.postgres
def test_a_submission_skips_an_offer_a_round_is_withdrawing(pg_services: Services, pg_url: str) -> None:
    ready(pg_services)
    holder = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
    holder.execute("DELETE FROM fleet_offers")  # as a round does first; held until rollback
    try:
        (job_id,) = posted_at_once(pg_services, 1)  # answers: it does not wait for the round
        assert job_row(pg_services, job_id).dispatched_to is None
    finally:
        holder.rollback()
        holder.close()
    assert offers(pg_services)  # the withdrawal never happened: the offer stands for the next job


def test_with_the_broker_away_an_offered_job_is_accepted_and_left_for_the_reaper(services: Services) -> None:
    """The job takes the offer and is committed before its message is sent: a send that fails
    leaves it dispatched but unsent (``enqueued_at`` cleared), which the reaper sends again."""
    ready(services)
    away = build_services(services.settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}))
    try:
        started = time.monotonic()
        job_id = post(create_app(services=away).test_client(), "no broker")
        assert time.monotonic() - started < 10  # the publish timeout, not a hang
    finally:
        away.db.dispose()
    job = job_row(services, job_id)
    assert job.status == "queued" and job.dispatched_to == "g1" and job.enqueued_at is None
