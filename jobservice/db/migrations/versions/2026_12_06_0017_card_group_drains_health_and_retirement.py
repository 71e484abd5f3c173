"""Card groups that drain, fall ill and retire

Revision ID: 0015_group_lifecycle
Revises: 0014_dispatch_decision
Create Date: 2026-12-06

``fleet_groups`` gains:

- ``draining_since``: its worker was asked to stop (SIGTERM, a warm shutdown) and takes no new job;
  the dispatcher sends it nothing, the job it runs finishes. Cleared when a worker registers it.
- ``unhealthy_since`` and ``health``: a card of the group is not healthy (NVML, nvidia-smi or
  npu-smi says why; ``health`` holds each problem as a sentence); the group takes no job and its
  ledger is in the new ``unhealthy`` state while it runs none, until the card is healthy again.
- ``retired_at``: the group was down longer than the retention (``JOBSERVICE_GROUP_RETENTION_HOURS``)
  with no worker, or an operator forgot it (``jobservice fleet forget``): its ledger is closed and it
  is gone from /fleet and /metrics; its row, ledger and events stay as history.

Expand only: four nullable columns. A previous release neither writes nor reads them (its
dispatcher may still send a draining or unhealthy group a job, which this release's worker hands
back when it refuses the claim).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_group_lifecycle"
down_revision: str | Sequence[str] | None = "0014_dispatch_decision"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("draining_since", "unhealthy_since", "health", "retired_at")


def upgrade() -> None:
    op.add_column("fleet_groups", sa.Column("draining_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("fleet_groups", sa.Column("unhealthy_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("fleet_groups", sa.Column("health", sa.JSON(), nullable=True))
    op.add_column("fleet_groups", sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for column in reversed(COLUMNS):
        op.execute(f"ALTER TABLE fleet_groups DROP COLUMN {column}")
