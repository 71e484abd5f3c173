"""Migration 0005 (webhooks) goes down and up again on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from jobservice.db.engine import build_engine
from jobservice.db.migrate import alembic_config, upgrade


def _round_trip(url: str) -> None:
    upgrade(url)
    engine = build_engine(url)
    try:
        assert {"webhook_secrets", "webhook_deliveries"} <= set(inspect(engine).get_table_names())
        assert {"webhook_url", "webhook_events"} <= {
            c["name"] for c in inspect(engine).get_columns("batches")
        }
        command.downgrade(alembic_config(url), "0004")
        inspector = inspect(engine)
        assert "webhook_deliveries" not in inspector.get_table_names()
        assert "webhook_url" not in {c["name"] for c in inspector.get_columns("jobs")}
        upgrade(url)
        assert "webhook_url" in {c["name"] for c in inspect(engine).get_columns("jobs")}
    finally:
        engine.dispose()


def test_sqlite_round_trip(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'db.sqlite'}")


@pytest.mark.postgres
def test_postgres_round_trip(pg_url: str) -> None:
    _round_trip(pg_url)
