"""Running totals over finished jobs for GET /metrics, and an index on jobs.finished_at

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

``job_counters`` holds the counters and histogram buckets that ``jobservice.metrics`` derives from
the jobs table; ``job_counter_marks`` says up to when jobs have been counted. Each scrape adds only
the jobs created or finished since the mark (an index range on ``finished_at`` / ``created_at``),
never a GROUP BY over the whole table. The mark starts at the upgrade: jobs that finished before it
are not counted (Prometheus counters start at zero anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_counters",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("labels", sa.String(length=512), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "labels", name=op.f("pk_job_counters")),
    )
    marks = op.create_table(
        "job_counter_marks",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("counted_until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_job_counter_marks")),
    )
    now = datetime.now(UTC)
    # SQLite keeps naive UTC (see UTCDateTime), PostgreSQL a zoned timestamp.
    until = now.replace(tzinfo=None) if op.get_bind().dialect.name == "sqlite" else now
    op.bulk_insert(marks, [{"name": "jobs", "counted_until": until}])
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_finished_at", table_name="jobs")
    op.drop_table("job_counter_marks")
    op.drop_table("job_counters")
