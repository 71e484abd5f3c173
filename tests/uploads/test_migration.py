"""Migration 0013 (the pending-uploads index): it comes and goes, and the uploads stay."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import func, inspect, select

from jobservice.db.engine import Database, build_engine
from jobservice.db.migrate import alembic_config, upgrade
from jobservice.db.tables import Upload, utcnow

INDEX = "ix_uploads_tenant_status_expires_at"


def indexes(url: str) -> set[str]:
    engine = build_engine(url)
    try:
        return {ix["name"] for ix in inspect(engine).get_indexes("uploads") if ix["name"]}
    finally:
        engine.dispose()


def round_trip(url: str) -> None:
    upgrade(url)
    assert INDEX in indexes(url)
    db = Database(url)
    try:
        now = utcnow()
        with db.session() as session:
            session.add(
                Upload(id=uuid.uuid4(), tenant="acme", kind="image", filename="a.png", content_type="image/png",
                       size=9, key="uploads/x/image", part_size=9, parts=1, status="pending", created_at=now,
                       expires_at=now)
            )  # fmt: skip
        command.downgrade(alembic_config(url), "0012")
        assert INDEX not in indexes(url) and "ix_uploads_tenant" in indexes(url)
        with db.session() as session:
            assert session.scalar(select(func.count()).select_from(Upload)) == 1  # nothing lost
        upgrade(url)
        assert INDEX in indexes(url)
    finally:
        db.dispose()


def test_sqlite_round_trip(tmp_path: Path) -> None:
    round_trip(f"sqlite:///{tmp_path / 'db.sqlite'}")


@pytest.mark.postgres
def test_postgres_round_trip(pg_url: str) -> None:
    round_trip(pg_url)
