"""The pending-uploads quota: an index to count a tenant's not-yet-completed uploads

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

``POST /uploads`` admits a declaration against the tenant's ``pending_uploads`` and
``pending_upload_mb`` quotas (``jobservice.quotas.admit.admit_upload``): it counts the tenant's
uploads that are ``pending`` and not expired. ``(tenant, status, expires_at)`` makes that count an
index range over at most the cap's worth of rows, however many completed uploads the tenant holds
(they stay until they expire, 24 h by default); the count reads no heap row for the ones it skips.

Expand only: a new index on ``uploads``, which the previous release neither needs nor minds. A
plain ``CREATE INDEX``: the table holds a day of uploads, so the write lock it takes is brief.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_uploads_tenant_status_expires_at"


def upgrade() -> None:
    op.create_index(INDEX, "uploads", ["tenant", "status", "expires_at"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="uploads")
