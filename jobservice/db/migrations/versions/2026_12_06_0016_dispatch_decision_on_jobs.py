"""One eviction decision: what the dispatcher decided is stored with the dispatch

Revision ID: 0014_dispatch_decision
Revises: 0015_fair_share_eta
Create Date: 2026-12-06

``jobs`` gains ``dispatch_decision``: what the dispatcher decided when it handed a queued job to a
card group (the model, whether it loads it, what it evicts first, why). The message format 2
(``jobservice.broker``) carries the same decision to the worker, which carries it out; the column
lets the reaper send a lost message again with the same decision.

Expand only: a nullable column. A previous release neither writes nor reads it, and a job it
dispatched has none (its message has none either: the worker falls back to the least recently used).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_dispatch_decision"
down_revision: str | Sequence[str] | None = "0015_fair_share_eta"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("dispatch_decision", sa.JSON(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+): a batch rebuild of ``jobs`` would drop its triggers.
    op.execute("ALTER TABLE jobs DROP COLUMN dispatch_decision")
