"""Fair share's lift and ETA revisions: when a tenant began competing, the last level it is lifted
to, and each job's log of ETA moves

Revision ID: 0015_fair_share_eta
Revises: 0014_trace_context
Create Date: 2026-12-06

Fair share lifts a tenant that starts competing (it submits with no job waiting to be dispatched)
to the least level among the tenants already waiting, less a small newcomer credit
(``jobservice.fleet.policy.lift``): ``tenant_shares.activated_at`` records when (the newest goes
first on a tie), and ``fair_share_floor`` keeps, in one row, the least level seen among waiting
tenants, for a tenant that starts when nobody else waits. ``jobs.eta_revisions`` is a job's log of
ETA moves with their causes (``jobservice.fleet.eta``), at most the last 20.

Expand only: new nullable columns and a new table, which the previous release neither reads nor
minds.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_fair_share_eta"
down_revision: str | Sequence[str] | None = "0014_trace_context"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenant_shares", sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "fair_share_floor",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("as_of", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fair_share_floor")),
    )
    op.add_column("jobs", sa.Column("eta_revisions", sa.JSON(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+): a batch rebuild of ``jobs`` would drop its triggers.
    op.execute("ALTER TABLE jobs DROP COLUMN eta_revisions")
    op.drop_table("fair_share_floor")
    op.execute("ALTER TABLE tenant_shares DROP COLUMN activated_at")
