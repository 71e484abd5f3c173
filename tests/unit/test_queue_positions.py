"""Queue positions: the batched answer for a page equals one count per job, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus
from jobservice.jobs.presenters import job_views, list_jobs
from jobservice.jobs.queries import get_job, queue_position, queue_positions
from jobservice.jobs.transitions import claim_job, mark_canceled
from tests.factories import new_job, sqlite_copy
from tests.unit.test_usage_counters import rows_ahead

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
    ids = _mixed_queue(db)
    with db.session() as s:
        jobs: list[Job] = [j for j in (get_job(s, i) for i in ids) if j is not None]
        one_by_one = {j.id: queue_position(s, j) for j in jobs if j.status == "queued"}
        assert len(one_by_one) == 38
        assert one_by_one == {j.id: rows_ahead(s, j) for j in jobs if j.status == "queued"}
        assert queue_positions(s, jobs) == one_by_one
        some = jobs[5:17]  # a page: a subset, in another order
        assert queue_positions(s, some) == {j.id: one_by_one[j.id] for j in some if j.id in one_by_one}
        assert queue_positions(s, []) == {}
        per_model = sorted(one_by_one.values())
        assert per_model.count(0) == 2, "each model has exactly one job at the front"
        page, _ = list_jobs(s, limit=50)
        views = job_views(s, page)
    assert {uuid.UUID(v.id): v.queue_position for v in views if v.status == "queued"} == one_by_one
    assert all(v.queue_position is None for v in views if v.status != "queued")


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
