"""Webhooks: a webhook URL and event filter on jobs and batches, per-tenant secrets, an outbox

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

``jobs`` and ``batches`` gain ``webhook_url`` and ``webhook_events`` (a comma list of ``start``,
``completed``). ``webhook_secrets`` holds each tenant's signing secret (``whsec_...``) and, for a
grace period after a rotation, the previous one. ``webhook_deliveries`` is the outbox: one row per
event, written in the same transaction as the state change and delivered by ``jobservice.webhooks``.
Rows of one subject (``job:<id>`` or ``batch:<id>``) are delivered in ``id`` order.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("jobs", "batches")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("webhook_url", sa.Text(), nullable=True))
        op.add_column(table, sa.Column("webhook_events", sa.String(length=64), nullable=True))
    op.create_table(
        "webhook_secrets",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("previous_secret", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_webhook_secrets")),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("message_id", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("batch_id", sa.Uuid(), nullable=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("event_type", sa.String(length=32), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_webhook_deliveries_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["batches.id"],
            name=op.f("fk_webhook_deliveries_batch_id_batches"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("message_id", name=op.f("uq_webhook_deliveries_message_id")),
    )
    op.create_index(
        "ix_webhook_deliveries_status_next_attempt_at",
        "webhook_deliveries",
        ["status", "next_attempt_at"],
        unique=False,
    )
    op.create_index("ix_webhook_deliveries_subject_id", "webhook_deliveries", ["subject", "id"], unique=False)
    op.create_index("ix_webhook_deliveries_job_id_id", "webhook_deliveries", ["job_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_job_id_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_subject_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_status_next_attempt_at", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_secrets")
    for table in TABLES:
        for column in ("webhook_events", "webhook_url"):
            if op.get_bind().dialect.name == "sqlite":  # native DROP COLUMN, no table copy
                op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
            else:
                op.drop_column(table, column)
