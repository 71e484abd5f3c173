"""The round off the request path: a submission records its job and rings the dispatcher's bell
(when a group that may run it looks free); a worker's dispatcher takes the token and runs the round.
Against the test Redis (the integration tier)."""

from __future__ import annotations

import uuid

import redis
from flask.testing import FlaskClient
from sqlalchemy import update

from jobservice.broker import BrokerInspector, group_queue
from jobservice.db.tables import FleetGroup
from jobservice.fleet import wake
from jobservice.fleet.dispatch import request_round
from jobservice.http.app import create_app
from jobservice.jobs.queries import get_job
from jobservice.wiring import Services, build_services
from tests.factories import online_group
from workers.dispatcher import Dispatcher

T2V = "reference-t2v"


def tokens(services: Services) -> int:
    return int(redis.Redis.from_url(services.settings.broker_url).llen(wake.KEY))


def test_the_bell_holds_one_token_whoever_rings(services: Services) -> None:
    bell = services.dispatch_bell
    for _ in range(5):
        bell.ring()
    assert tokens(services) == 1  # a burst of submissions is one round
    assert bell.wait(0.1) is True
    assert bell.wait(0.1) is False  # taken: the next waiter waits for the next ring
    bell.close()


def test_it_rings_only_when_a_group_that_may_run_the_work_looks_free(services: Services) -> None:
    assert request_round(services, [T2V]) is False  # no group at all
    online_group(services.db, "g1", ["reference-talking-head"])
    assert request_round(services, [T2V]) is False  # a free group, but not for this model
    assert tokens(services) == 0
    online_group(services.db, "g2", [T2V])
    with services.db.session() as s:  # busy: its next job is on its way
        s.execute(update(FleetGroup).where(FleetGroup.id == "g2").values(next_job_id=uuid.uuid4()))
    assert request_round(services, [T2V]) is False  # the group runs a round itself when it frees up
    with services.db.session() as s:
        s.execute(update(FleetGroup).where(FleetGroup.id == "g2").values(next_job_id=None))
    assert request_round(services, ["reference-talking-head", T2V]) is True
    assert tokens(services) == 1


def test_a_submission_runs_no_round_and_the_worker_dispatcher_does(
    services: Services, client: FlaskClient
) -> None:
    online_group(services.db, "g1", [T2V])
    answer = client.post("/jobs", json={"model": T2V, "prompt": "a bell", "num_frames": 8})
    assert answer.status_code == 202, answer.get_data(as_text=True)
    job_id = uuid.UUID(answer.get_json()["id"])
    with services.db.session() as s:
        job = get_job(s, job_id)
        assert job is not None and job.dispatched_to is None  # the request handed nothing out
    assert tokens(services) == 1

    dispatcher = Dispatcher(services)  # as a worker's main process runs it (one wait, one round)
    try:
        assert dispatcher.run_once(wait_seconds=1.0) is True
        assert dispatcher.run_once(wait_seconds=0.1) is False  # one token, one round
    finally:
        dispatcher.bell.close()
    with services.db.session() as s:
        job = get_job(s, job_id)
        assert job is not None and job.dispatched_to == "g1" and job.dispatch_decision is not None
    inspector = BrokerInspector.of(services.settings)
    try:
        assert inspector.pending_job_ids({group_queue("g1")}) == {str(job_id)}
    finally:
        inspector.close()


def test_a_broker_away_costs_the_submission_nothing(services: Services) -> None:
    """The bell is a hint: with Redis unreachable the job is still accepted (an upkeep round places
    it once the broker is back)."""
    online_group(services.db, "g1", [T2V])
    away = build_services(services.settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}))
    try:
        client = create_app(services=away).test_client()
        answer = client.post("/jobs", json={"model": T2V, "prompt": "no bell", "num_frames": 8})
        assert answer.status_code == 202, answer.get_data(as_text=True)
        with services.db.session() as s:
            job = get_job(s, uuid.UUID(answer.get_json()["id"]))
            assert job is not None and job.status == "queued" and job.dispatched_to is None
    finally:
        away.db.dispose()
