"""Retry on a failed gate: what a job was promised and each try the gate failed

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

``jobs`` gains ``retry_on_validation_failure`` (how many more tries with the next seed a failed
gate may start; resolved when the job is accepted) and ``validation_attempts`` (each try the gate
failed: seed, verdict, failed checks, its video and report keys, card-seconds; see
``jobservice.jobs.retries``).

Expand only: the new count defaults to 0 on the server, so an API of the previous release inserts
jobs that never retry, and its workers, which do not read the columns, fail a gate as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("retry_on_validation_failure", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column("jobs", sa.Column("validation_attempts", sa.JSON(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+): a batch rebuild of ``jobs`` would drop its triggers.
    for column in ("validation_attempts", "retry_on_validation_failure"):
        op.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
