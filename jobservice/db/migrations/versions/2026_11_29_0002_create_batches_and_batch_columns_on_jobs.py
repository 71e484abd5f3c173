"""create batches, and the batch columns on jobs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

Nightly regression batches (jobservice.nightly): a ``batches`` table, and on ``jobs`` which batch,
case and repeat a job runs for. The new job columns are nullable, so existing rows need nothing.
Hand-written for SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("spec_digest", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_text", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=512), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("baseline_id", sa.Uuid(), nullable=True),
        sa.Column("total_jobs", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("results", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_batches_idempotency_key")),
    )
    op.create_index("ix_batches_name_created_at", "batches", ["name", "created_at"], unique=False)
    op.create_index("ix_batches_status_updated_at", "batches", ["status", "updated_at"], unique=False)

    # Nullable columns: existing rows need nothing, and no table is copied. On SQLite a copy of
    # jobs would drop and re-create it, and dropping it cascades to job_events; so there the
    # columns are added in place and the link to batches is kept by the application only.
    op.add_column("jobs", sa.Column("batch_id", sa.Uuid(), nullable=True))
    op.add_column("jobs", sa.Column("batch_case", sa.String(length=128), nullable=True))
    op.add_column("jobs", sa.Column("batch_repeat", sa.Integer(), nullable=True))
    if not _sqlite():
        op.create_foreign_key(
            op.f("fk_jobs_batch_id_batches"), "jobs", "batches", ["batch_id"], ["id"], ondelete="SET NULL"
        )
    op.create_index(
        "ix_jobs_batch_id_batch_case_batch_repeat",
        "jobs",
        ["batch_id", "batch_case", "batch_repeat"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_batch_id_batch_case_batch_repeat", table_name="jobs")
    if not _sqlite():
        op.drop_constraint(op.f("fk_jobs_batch_id_batches"), "jobs", type_="foreignkey")
    for column in ("batch_repeat", "batch_case", "batch_id"):
        if _sqlite():  # native DROP COLUMN (SQLite 3.35+), again without copying the table
            op.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
        else:
            op.drop_column("jobs", column)
    op.drop_index("ix_batches_status_updated_at", table_name="batches")
    op.drop_index("ix_batches_name_created_at", table_name="batches")
    op.drop_table("batches")


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")
