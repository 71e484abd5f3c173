"""Migration 0012 (job groups): the table and columns come and go, jobs and their events stay, and
the interactive-jobs counter follows the rule of the revision it is at."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import func, inspect, select, update

from jobservice.db.engine import Database, build_engine
from jobservice.db.migrate import alembic_config, upgrade
from jobservice.db.tables import Job, JobEvent, JobGroup, JobStatus, TenantUsageCount, utcnow
from jobservice.jobs.transitions import record_created_many


def active(db: Database) -> int | None:
    with db.session() as session:
        return session.scalar(select(TenantUsageCount.active_jobs).where(TenantUsageCount.tenant == "acme"))


def round_trip(url: str) -> None:
    upgrade(url)
    db = Database(url)
    try:
        group_id = uuid.uuid4()
        with db.session() as session:
            session.add(JobGroup(id=group_id, tenant="acme", manifest_format="csv", manifest_sha256="0" * 64))
            session.flush()
            now = utcnow()
            jobs = [
                Job(id=uuid.uuid4(), task="text2video", model="m", params={}, tenant="acme", created_at=now,
                    updated_at=now, max_attempts=3, group_id=group_id if n else None, group_row=n or None)
                for n in range(3)
            ]  # fmt: skip
            record_created_many(session, jobs)
        assert active(db) == 1  # the group's two jobs are not interactive
        command.downgrade(alembic_config(url), "0011")
        engine = build_engine(url)
        try:
            assert "job_groups" not in inspect(engine).get_table_names()
            assert not {"group_id", "group_row"} & {c["name"] for c in inspect(engine).get_columns("jobs")}
        finally:
            engine.dispose()
        with db.session() as session:
            assert session.scalar(select(func.count()).select_from(JobEvent)) == 3  # nothing cascaded
        assert active(db) == 3  # 0007's rule: every job outside a batch is interactive
        with db.session() as session:  # and 0007's triggers count again
            cancel = update(Job).where(Job.id == jobs[1].id).values(status=JobStatus.CANCELED)
            session.execute(cancel.execution_options(synchronize_session=False))
        assert active(db) == 2
        upgrade(url)
        assert active(db) == 2  # the rows lost their group with the column: counted as interactive
    finally:
        db.dispose()


def test_sqlite_round_trip(tmp_path: Path) -> None:
    round_trip(f"sqlite:///{tmp_path / 'db.sqlite'}")


@pytest.mark.postgres
def test_postgres_round_trip(pg_url: str) -> None:
    round_trip(pg_url)
