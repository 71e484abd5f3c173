"""Migration 0002 (batches): one head, data kept, and a round trip on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from jobservice.db.engine import build_engine
from jobservice.db.migrate import alembic_config, heads, upgrade


def test_one_head() -> None:
    assert len(heads()) == 1, f"the migration graph has {len(heads())} heads: {heads()}"


def test_sqlite_upgrade_keeps_jobs_and_their_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url, "0001")
    job_id = uuid.uuid4().hex
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        conn.execute(
            "INSERT INTO jobs (id, task, model, params, source, priority, status, stage, progress, input_keys,"
            " input_meta, attempts, max_attempts, created_at, updated_at, timings, validation_summary)"
            " VALUES (?, 'text2video', 'm', '{}', 'api', 0, 'queued', 'queued', 0, '{}', '{}', 0, 3,"
            " '2026-01-01', '2026-01-01', '{}', '{}')",
            (job_id,),
        )
        conn.execute(
            "INSERT INTO job_events (job_id, at, attempt, detail) VALUES (?, '2026-01-01', 0, 'x')", (job_id,)
        )
    upgrade(url)
    command.downgrade(alembic_config(url), "0001")
    upgrade(url)
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM job_events").fetchone() == (1,), (
            "no cascade from a table copy"
        )
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'jobs'").fetchone()[0]
    assert "ck_jobs_job_status" in sql and "batch_id" in sql


@pytest.mark.postgres
def test_postgres_round_trip(pg_url: str) -> None:
    engine = build_engine(pg_url)
    try:
        columns = {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert {"batch_id", "batch_case", "batch_repeat"} <= columns
        referred = [fk["referred_table"] for fk in inspect(engine).get_foreign_keys("jobs")]
        assert sorted(referred) == ["batches", "job_groups"]  # job_groups: migration 0012
        command.downgrade(alembic_config(pg_url), "0001")
        assert "batches" not in inspect(engine).get_table_names()
        upgrade(pg_url)
        assert "batches" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
