"""Queue positions: a page's positions are each job's own, in the dispatcher's order, on SQLite and
PostgreSQL; and a cursor walk visits every job once."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jobservice.caches import Caches
from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus
from jobservice.families.deployment import default_catalog
from jobservice.fleet import eta
from jobservice.jobs.presenters import job_view, job_views, list_jobs
from jobservice.jobs.queries import get_job
from jobservice.jobs.transitions import claim_job, mark_canceled
from jobservice.settings import Settings
from tests.factories import new_job, online_group, sqlite_copy


@dataclass
class Reader:
    """What ``eta.latest`` reads of ``Services``: a database and a fresh process's caches."""

    db: Database
    caches: Caches = field(default_factory=Caches)


MODELS = ("reference-t2v", "reference-talking-head")


def _mixed_queue(db: Database) -> list[uuid.UUID]:
    """Jobs of two models and three priorities, some sharing a creation time, some not queued."""
    rng = random.Random(12)
    ids = [
        new_job(
            db,
            model=rng.choice(MODELS),
            priority=rng.choice((0, 0, 5, 6)),
            created_offset=float(rng.choice((-30, -20, -20, -10, 0, 0, 5))),
        )
        for _ in range(40)
    ]
    with db.session() as s:  # one running and one canceled: they have no position and hold no place
        claim_job(s, ids[3], worker_id="w", lease_seconds=30)
    with db.session() as s:
        mark_canceled(s, ids[7], from_statuses=frozenset({JobStatus.QUEUED}), detail="test")
    return ids


def _check(db: Database) -> None:
    """A page of views gets the positions the forecast gives one job at a time; within each model they
    are the dispatcher's order (every interactive job before every batch job) with no gap."""
    for model in MODELS:
        online_group(db, f"g-{model}", [model])
    ids = _mixed_queue(db)
    settings = Settings(_env_file=None, database_url="sqlite://", auth="off")  # type: ignore[call-arg]
    assert eta.refresh(db, default_catalog(), settings, force=True)
    forecast = eta.latest(Reader(db))
    with db.session() as s:
        jobs: list[Job] = [j for j in (get_job(s, i) for i in ids) if j is not None]
        one_by_one = {
            j.id: job_view(j, forecast=forecast, behind=eta.behind_of(s, forecast, j)).queue_position
            for j in jobs
            if j.status == "queued"
        }
        assert len(one_by_one) == 38 and None not in one_by_one.values()
        page, _ = list_jobs(s, limit=50)
        views = job_views(s, page, forecast=forecast)
    assert {uuid.UUID(v.id): v.queue_position for v in views if v.status == "queued"} == one_by_one
    assert all(v.queue_position is None for v in views if v.status != "queued")
    for model in MODELS:
        queued = [j for j in jobs if j.model == model and j.status == "queued" and j.dispatched_to is None]
        handed = sum(1 for j in jobs if j.model == model and j.status == "queued" and j.dispatched_to)
        places = sorted((one_by_one[j.id], j.priority) for j in queued)
        assert [p for p, _ in places] == list(range(handed, handed + len(queued))), model
        assert [priority for _, priority in places] == sorted(priority for _, priority in places), model


def test_batched_positions_match_counts_on_sqlite(tmp_path: Path, migrated_sqlite: Path) -> None:
    _check(sqlite_copy(migrated_sqlite, tmp_path))


@pytest.mark.postgres
def test_batched_positions_match_counts_on_postgres(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        _check(db)
    finally:
        db.dispose()


def _walk(db: Database, **filters: object) -> list[uuid.UUID]:
    seen: list[uuid.UUID] = []
    cursor = None
    with db.session() as s:
        while True:
            page, cursor = list_jobs(s, limit=7, cursor=cursor, **filters)  # type: ignore[arg-type]
            seen.extend(j.id for j in page)
            if cursor is None:
                return seen


def _check_cursor_walk(db: Database) -> None:
    ids = _mixed_queue(db)  # several jobs share a created_at: the id breaks the tie
    with db.session() as s:
        jobs = [j for j in (get_job(s, i) for i in ids) if j is not None]
    newest_first = [j.id for j in sorted(jobs, key=lambda j: (j.created_at, j.id), reverse=True)]
    assert _walk(db) == newest_first
    talking = [i for i in newest_first if next(j for j in jobs if j.id == i).model == MODELS[1]]
    assert _walk(db, model=MODELS[1]) == talking


def test_cursor_walk_visits_every_job_once_on_sqlite(tmp_path: Path, migrated_sqlite: Path) -> None:
    _check_cursor_walk(sqlite_copy(migrated_sqlite, tmp_path))


@pytest.mark.postgres
def test_cursor_walk_visits_every_job_once_on_postgres(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        _check_cursor_walk(db)
    finally:
        db.dispose()
