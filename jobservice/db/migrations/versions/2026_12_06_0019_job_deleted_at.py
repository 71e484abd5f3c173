"""Deleting a job is a column: ``jobs.deleted_at``

Revision ID: 0019_job_deleted_at
Revises: 0015_group_lifecycle
Create Date: 2026-12-06

``jobs`` gains ``deleted_at``: when the job was deleted on request (``DELETE /jobs/<id>``, or
``DELETE /v1/videos/<id>``, which calls the same ``jobservice.retention.deletion.delete_job``). A
deleted job's files are gone and it is gone from every list and read (404 ``job_deleted``); the
row stays for the counters and the audit trail.

Until this release, only ``DELETE /v1/videos`` deleted, and it marked the job with an event whose
text (``DELETED_DETAIL`` below) later reads matched. The upgrade sets ``deleted_at`` of those jobs
to that event's time, so none comes back. The downgrade writes the event for every job deleted
since, so the previous release still treats them as deleted.

Expand only: a nullable column, and no index (every read filters it beside an indexed key).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_job_deleted_at"
down_revision: str | Sequence[str] | None = "0018_batches_are_job_groups"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DELETED_DETAIL = "files deleted on request (DELETE /v1/videos)"  # the event earlier releases matched


def upgrade() -> None:
    op.add_column("jobs", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(
        sa.text(
            "UPDATE jobs SET deleted_at = (SELECT min(e.at) FROM job_events e"
            " WHERE e.job_id = jobs.id AND e.detail = :detail)"
            " WHERE expired_at IS NOT NULL AND EXISTS (SELECT 1 FROM job_events e"
            " WHERE e.job_id = jobs.id AND e.detail = :detail)"
        ).bindparams(detail=DELETED_DETAIL)
    )


def downgrade() -> None:
    op.execute(
        sa.text(
            "INSERT INTO job_events (job_id, at, attempt, detail, actor)"
            " SELECT id, deleted_at, attempts, :detail, 'system' FROM jobs"
            " WHERE deleted_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM job_events e"
            " WHERE e.job_id = jobs.id AND e.detail = :detail)"
        ).bindparams(detail=DELETED_DETAIL)
    )
    # Plain DROP COLUMN (SQLite 3.35+): a batch rebuild of ``jobs`` would drop its triggers.
    op.execute("ALTER TABLE jobs DROP COLUMN deleted_at")
