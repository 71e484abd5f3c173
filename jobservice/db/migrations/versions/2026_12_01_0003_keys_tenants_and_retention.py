"""API keys, tenants, who-did-it on events, and retention columns

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

``api_keys`` (only a hash of each secret) and ``tenants`` (quota and retention overrides); on jobs
and batches the owning ``tenant`` (existing rows belong to ``default``) and the key that submitted
them; on jobs ``expires_at``/``expired_at`` for retention; on job events the ``actor``. Columns are
added in place (no table copy on SQLite, where dropping ``jobs`` would cascade to its events).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_INDEXES = {
    "ix_jobs_tenant_created_at_id": ["tenant", "created_at", "id"],
    "ix_jobs_tenant_status": ["tenant", "status"],
    "ix_jobs_expires_at": ["expires_at"],
}


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("hint", sa.String(length=32), nullable=False),
        sa.Column("limits", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_api_keys_secret_hash")),
    )
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("limits", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tenants")),
    )
    for table in ("jobs", "batches"):
        op.add_column(
            table, sa.Column("tenant", sa.String(length=64), nullable=False, server_default="default")
        )
        op.add_column(table, sa.Column("submitted_by", sa.String(length=32), nullable=True))
    op.add_column("jobs", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("job_events", sa.Column("actor", sa.String(length=300), nullable=True))
    for name, columns in JOB_INDEXES.items():
        op.create_index(name, "jobs", columns, unique=False)
    op.create_index("ix_batches_tenant_created_at", "batches", ["tenant", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_batches_tenant_created_at", table_name="batches")
    for name in JOB_INDEXES:
        op.drop_index(name, table_name="jobs")
    _drop("job_events", ["actor"])
    _drop("jobs", ["expired_at", "expires_at", "submitted_by", "tenant"])
    _drop("batches", ["submitted_by", "tenant"])
    op.drop_table("tenants")
    op.drop_table("api_keys")


def _drop(table: str, columns: list[str]) -> None:
    for column in columns:
        if op.get_bind().dialect.name == "sqlite":  # native DROP COLUMN, without copying the table
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        else:
            op.drop_column(table, column)
