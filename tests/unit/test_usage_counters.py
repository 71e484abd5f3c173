"""The counters that triggers keep (migrations 0007, 0008, 0009) agree with counting the jobs table.

A random history of inserts, status changes (claims, requeues, endings), backdated rows, batch jobs,
job-group jobs (not interactive either, migration 0012) and deletions, on SQLite here and on PostgreSQL in the integration tier; after it, what admission
reads from the counters equals COUNT(*) over the rows, for several windows.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import delete, func, insert, select, update

from jobservice.db.engine import Database
from jobservice.db.migrate import alembic_config, upgrade
from jobservice.db.tables import Batch, Job, JobGroup, JobStatus, QueueCount, TenantJobMinute, utcnow
from jobservice.quotas.usage import admission_usage, count_active, count_created_since, forget_old_minutes
from tests.factories import sqlite_copy

TENANTS = ("acme", "beta", "gamma")
MODELS = ("reference-t2v", "reference-talking-head")
ENDINGS = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED)


def play_history(db: Database, seed: int, *, fleet: bool = True) -> None:
    """A random history; ``fleet``: with the columns of migrations 0009 (tenant moves, seconds of
    video) and 0012 (job groups)."""
    rng = random.Random(seed)
    now = utcnow()
    with db.session() as s:
        batch = Batch(id=uuid.uuid4(), name="nightly", spec_digest="0" * 64, tenant="acme")
        s.add(batch)
        group = JobGroup(id=uuid.uuid4(), tenant="beta", manifest_format="csv", manifest_sha256="0" * 64)
        if fleet:
            s.add(group)
    ids: list[uuid.UUID] = []
    for _ in range(300):
        roll = rng.random()
        with db.session() as s:
            if roll < 0.45 or not ids:
                values: dict[str, Any] = {
                    "id": uuid.uuid4(),
                    "task": "text2video",
                    "model": rng.choice(MODELS),
                    "priority": rng.choice((0, 6)),
                    "params": {},
                    "max_attempts": 3,
                    "tenant": rng.choice(TENANTS),
                    "created_at": now - timedelta(seconds=rng.uniform(0, 5400)),
                    "batch_id": batch.id if rng.random() < 0.2 else None,
                    "status": rng.choice([JobStatus.QUEUED, JobStatus.QUEUED, JobStatus.SUCCEEDED]),
                }
                if fleet:
                    values["output_seconds"] = rng.choice([None, 2.5, 10.0, 37.48])
                    if values["batch_id"] is None and rng.random() < 0.2:
                        values["group_id"] = group.id
                # Only the columns given: before migration 0009 the table has none of its columns.
                s.execute(insert(Job).values(**values))
                ids.append(values["id"])
            elif roll < 0.85:
                move = rng.choice([JobStatus.RUNNING, JobStatus.QUEUED, *ENDINGS])
                values = {"status": move, "progress": 0.5}
                if rng.random() < 0.1:
                    values["priority"] = rng.choice((0, 3, 6))
                if fleet and rng.random() < 0.1:
                    values["tenant"] = rng.choice(TENANTS)
                if fleet and rng.random() < 0.1:
                    values["output_seconds"] = rng.choice([None, 4.0, 12.5])
                s.execute(update(Job).where(Job.id == rng.choice(ids)).values(**values))
            elif roll < 0.93:
                again = now - timedelta(seconds=rng.uniform(0, 5400))
                s.execute(update(Job).where(Job.id == rng.choice(ids)).values(created_at=again))
            else:
                victim = ids.pop(rng.randrange(len(ids)))
                s.execute(delete(Job).where(Job.id == victim))


def assert_counters_agree(db: Database) -> None:
    now = utcnow()
    with db.session() as s:
        for tenant in TENANTS:
            for minutes in (60, 37.5, 90):
                since = now - timedelta(minutes=minutes)
                exact = (count_active(s, tenant), count_created_since(s, tenant, since))
                assert admission_usage(s, tenant, since) == exact, (tenant, minutes)


def assert_queue_counts_agree(db: Database) -> None:
    """The queue counters equal the queued rows, and a position from them equals the count of the
    jobs ahead, for every queued job (not only new ones: the formula is exact for any)."""
    with db.session() as s:
        rows = s.execute(
            select(
                Job.model,
                Job.priority,
                Job.tenant,
                func.count(),
                func.coalesce(func.sum(Job.output_seconds), 0),
            )
            .where(Job.status == JobStatus.QUEUED)
            .group_by(Job.model, Job.priority, Job.tenant)
        ).all()
        columns = (
            QueueCount.model,
            QueueCount.priority,
            QueueCount.tenant,
            QueueCount.queued,
            QueueCount.output_s,
        )
        counted = {(m, p, t): (n, o) for m, p, t, n, o in s.execute(select(*columns))}
        assert {k: v[0] for k, v in counted.items() if v[0]} == {(m, p, t): n for m, p, t, n, _ in rows}
        for m, p, t, _, seconds in rows:
            assert counted[(m, p, t)][1] == pytest.approx(float(seconds or 0.0), abs=1e-6), (m, p, t)


def check(db: Database) -> None:
    for seed in range(3):
        play_history(db, seed)
        assert_counters_agree(db)
        assert_queue_counts_agree(db)
    # Old minutes are dropped; the last two hours stay, and the counts with them.
    with db.session() as s:
        forget_old_minutes(s)
    with db.session() as s:
        oldest = s.scalar(select(TenantJobMinute.minute).order_by(TenantJobMinute.minute).limit(1))
    assert oldest is None or oldest >= utcnow() - timedelta(hours=2, minutes=1)
    assert_counters_agree(db)


def upgrade_over_existing_jobs(url: str) -> None:
    """Jobs made before migration 0007 are counted by its upgrade."""
    command.downgrade(alembic_config(url), "0006")  # before both counters' migrations
    db = Database(url)
    try:
        play_history(db, seed=7, fleet=False)
        upgrade(url)
        assert_counters_agree(db)
        assert_queue_counts_agree(db)
    finally:
        db.dispose()


def test_the_upgrade_counts_existing_jobs_on_sqlite(tmp_path: Path, migrated_sqlite: Path) -> None:
    sqlite_copy(migrated_sqlite, tmp_path).dispose()
    upgrade_over_existing_jobs(f"sqlite:///{tmp_path / 'jobs.db'}")


@pytest.mark.integration
@pytest.mark.postgres
def test_the_upgrade_counts_existing_jobs_on_postgresql(pg_url: str) -> None:
    upgrade_over_existing_jobs(pg_url)


def test_counters_agree_with_the_jobs_table_on_sqlite(tmp_path: Path, migrated_sqlite: Path) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    try:
        check(db)
    finally:
        db.dispose()


@pytest.mark.integration
@pytest.mark.postgres
def test_counters_agree_with_the_jobs_table_on_postgresql(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        check(db)
    finally:
        db.dispose()
