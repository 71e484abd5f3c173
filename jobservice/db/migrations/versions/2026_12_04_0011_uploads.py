"""Direct uploads: the uploads table

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

``uploads`` holds each file a client declared with ``POST /uploads`` and sends straight to the
object store (``jobservice.uploads``): its tenant, declared name, type and size, its key and the
store's multipart upload id, and once completed the content check's facts. Expand only: a new
table that the previous release never reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "uploads",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=False),
        sa.Column("content_type", sa.String(length=128), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("multipart_id", sa.String(length=1024), nullable=True),
        sa.Column("part_size", sa.BigInteger(), nullable=False),
        sa.Column("parts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uploads")),
    )
    op.create_index("ix_uploads_expires_at", "uploads", ["expires_at"])
    op.create_index("ix_uploads_tenant", "uploads", ["tenant"])


def downgrade() -> None:
    op.drop_index("ix_uploads_tenant", table_name="uploads")
    op.drop_index("ix_uploads_expires_at", table_name="uploads")
    op.drop_table("uploads")
