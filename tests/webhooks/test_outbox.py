"""The outbox: retry schedule, 4xx versus 5xx, order per job, claims that expire."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from jobservice.db.engine import Database
from jobservice.db.tables import WebhookDelivery, utcnow
from jobservice.webhooks import outbox
from jobservice.webhooks.deliver import Outcome
from jobservice.webhooks.outbox import RetryPolicy, retry_delay
from jobservice.webhooks.tenant_secrets import current_secret
from tests.factories import copy_template

POLICY = RetryPolicy()
FAIL_5XX = Outcome(delivered=False, retry=True, status_code=503, error="HTTP 503")


def test_the_default_schedule_backs_off_and_lasts_over_a_day() -> None:
    rng = random.Random(1)
    nominal = [5, 30, 120, 600, 3600, 10800, 10800]
    for attempts, expected in enumerate(nominal, start=1):
        delay = retry_delay(attempts, POLICY, rng=rng)
        assert expected * 0.8 <= delay <= expected * 1.2
    # Time spent before giving up: the sum of delays until the horizon (26 h) is passed.
    elapsed, attempts = 0.0, 0
    while elapsed < POLICY.horizon_seconds:
        attempts += 1
        elapsed += retry_delay(attempts, POLICY, rng=rng)
    assert elapsed >= 24 * 3600 and 10 <= attempts <= 16
    assert retry_delay(3, RetryPolicy(base_seconds=0.1, max_seconds=1.0), rng=rng) <= 1.2


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.integration])]
)
def db(request: pytest.FixtureRequest, tmp_path: Path, migrated_sqlite: Path) -> Iterator[Database]:
    if request.param == "postgres":
        url = str(request.getfixturevalue("pg_url"))
    else:
        copy_template(migrated_sqlite, tmp_path, "o.db")
        url = f"sqlite:///{tmp_path}/o.db"
    database = Database(url)
    yield database
    database.dispose()


def test_a_secret_is_created_once_on_either_database(db: Database) -> None:
    with db.session() as session:
        first = current_secret(session, "acme").secret
    with db.session() as session:
        assert current_secret(session, "acme").secret == first and first.startswith("whsec_")


def _add(db: Database, subject: str, event: str) -> int:
    with db.session() as session:
        row = outbox.enqueue(
            session, subject=subject, tenant="default", event_type=event, url="https://example.com/h", data={}
        )
        session.flush()
        return row.id


def _attempt(db: Database, delivery_id: int, outcome: Outcome, policy: RetryPolicy = POLICY) -> str:
    with db.session() as session:
        before = session.get(WebhookDelivery, delivery_id)
        assert before is not None
        row = outbox.claim(session, delivery_id, attempts=before.attempts, seconds=60)
        assert row is not None
        attempt = row.attempts
    with db.session() as session:
        return outbox.record(session, delivery_id, attempt=attempt, outcome=outcome, policy=policy)


def test_5xx_is_retried_later_and_4xx_gives_up(db: Database) -> None:
    a, b = _add(db, "job:a", "job.start"), _add(db, "job:b", "job.start")
    assert _attempt(db, a, FAIL_5XX) == "pending"
    assert (
        _attempt(db, b, Outcome(delivered=False, retry=False, status_code=404, error="HTTP 404")) == "failed"
    )
    with db.session() as session:
        row = session.get(WebhookDelivery, a)
        assert row is not None and row.next_attempt_at is not None and row.next_attempt_at > utcnow()
        assert (row.attempts, row.last_status_code, row.claimed_until) == (1, 503, None)
        assert outbox.due_heads(session) == []  # a: not due yet; b: failed
        assert outbox.due_heads(session, now=utcnow() + timedelta(seconds=10)) == [(a, 1)]


def test_retries_stop_after_the_horizon(db: Database) -> None:
    a = _add(db, "job:a", "job.completed")
    with db.session() as session:
        row = session.get(WebhookDelivery, a)
        assert row is not None
        row.created_at = utcnow() - timedelta(hours=27)
    assert _attempt(db, a, FAIL_5XX) == "failed"


def test_only_the_oldest_pending_row_of_a_job_is_due(db: Database) -> None:
    start, done = _add(db, "job:x", "job.start"), _add(db, "job:x", "job.completed")
    other = _add(db, "job:y", "job.start")
    with db.session() as session:
        assert outbox.due_heads(session) == [(start, 0), (other, 0)]
        assert outbox.claim(session, done, attempts=0, seconds=60) is None  # waits for start
    assert _attempt(db, start, FAIL_5XX) == "pending"
    with db.session() as session:
        assert outbox.due_heads(session, now=utcnow() + timedelta(seconds=10)) == [(start, 1), (other, 0)]
    assert _attempt(db, start, Outcome(delivered=True, retry=False, status_code=200)) == "delivered"
    with db.session() as session:
        assert outbox.due_heads(session)[0] == (done, 0)


def test_a_claim_that_never_reports_expires_and_a_duplicate_message_is_skipped(db: Database) -> None:
    a = _add(db, f"job:{uuid.uuid4()}", "job.start")
    with db.session() as session:
        assert outbox.hold(session, a, attempts=0, seconds=60)
        assert not outbox.hold(session, a, attempts=0, seconds=60)  # the sweep does not send it twice
        assert outbox.claim(session, a, attempts=0, seconds=60) is not None  # the task: attempt 1
        assert outbox.claim(session, a, attempts=0, seconds=60) is None  # a redelivered message
        assert outbox.due_heads(session) == []  # claimed: the worker is on it
        later = utcnow() + timedelta(seconds=61)
        assert outbox.due_heads(session, now=later) == [(a, 1)]  # it died mid-POST: due again
