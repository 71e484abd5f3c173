"""Alembic environment: migrates the database named by the caller or by Settings."""

from __future__ import annotations

from alembic import context

from jobservice.db.engine import build_engine
from jobservice.db.tables import Base
from jobservice.settings import Settings

config = context.config
target_metadata = Base.metadata
MIGRATION_LOCK = 0x6A6F6273  # "jobs": the advisory lock key of `jobservice db upgrade` on PostgreSQL


def _url() -> str:
    # jobservice.db.migrate passes the URL explicitly; the alembic CLI falls back to Settings.
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    return url or Settings().resolved_database_url()


def run_migrations_offline() -> None:
    """Emit SQL without a connection (``alembic upgrade --sql``)."""
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run migrations against a live database."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = build_engine(_url())
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",  # type: ignore[attr-defined]
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":  # type: ignore[attr-defined]
            # Every pod of the Kubernetes kit runs `jobservice db upgrade` before it starts: the
            # first takes this lock and migrates, the others wait and find the schema current (the
            # version is read after the lock; PostgreSQL's DDL is transactional, the lock ends with it).
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")  # type: ignore[attr-defined]
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
