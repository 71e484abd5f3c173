"""A free card group's standing offers: ``fleet_offers``

Revision ID: 0020_fleet_offers
Revises: 0019_job_deleted_at
Create Date: 2026-12-06

Each dispatch round records, for every group it leaves free while nothing else waits, the jobs the
policy would start there at once (a model the group holds, a priority), and a submission of such a
job takes the offer in its own transaction (``jobservice.fleet.offers``): a compare-and-swap on the
group's row, no dispatch round, no fleet lock. Every round replaces all offers.

Expand only: a new table. A previous release neither writes nor reads it; its rounds leave whatever
offers were there until this release's next round replaces them, and a stale offer is never taken
(its group must still look free and accept jobs, and ``until`` not past). While both releases'
workers run, a previous release's round may hand a group a job in the same moment a submission takes
the group's offer: the group then has two jobs dispatched to it and runs them in turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_fleet_offers"
down_revision: str | Sequence[str] | None = "0019_job_deleted_at"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_offers",
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("overhead_s", sa.Float(), nullable=False),
        sa.Column("speed", sa.Float(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "model", "priority", name=op.f("pk_fleet_offers")),
    )
    op.create_index("ix_fleet_offers_model_priority", "fleet_offers", ["model", "priority"])


def downgrade() -> None:
    op.drop_index("ix_fleet_offers_model_priority", table_name="fleet_offers")
    op.drop_table("fleet_offers")
