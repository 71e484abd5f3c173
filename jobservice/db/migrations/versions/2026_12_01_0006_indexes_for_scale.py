"""Indexes for a year of history: queue positions, cursor pages and quota counts as index ranges

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Measured with ``scripts/bench_scale.py`` (a million finished jobs, a queued batch of 10,000):

- queue position: ``(model, status, priority, created_at, id)`` (was without ``id``), so the count
  of jobs ahead, ``(priority, created_at, id) < (...)``, is one range read from the index alone;
- ``GET /jobs`` pages: every filtered listing walks ``(<filter>, created_at, id)`` backwards from
  the cursor (``(created_at, id) < (...)``): ``status`` gets ``id`` appended, ``model`` gets one;
- ``GET /batches/<id>/jobs`` pages: ``(batch_id, created_at, id)`` (no sort of the whole batch);
- the active-jobs quota counts interactive jobs only (``batch_id IS NULL``): ``(tenant, status,
  batch_id)`` makes that an index range instead of a heap visit per queued batch job.

Plain ``CREATE INDEX`` inside the migration's transaction: on a large table each takes a few
seconds (about 2-4 s per million rows) during which writes to ``jobs`` wait; run the upgrade in a
quiet moment, or create the indexes ``CONCURRENTLY`` by hand first (same names: this migration
then only drops the old ones).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import inspect

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (new name, columns, the index it replaces or None)
INDEXES: list[tuple[str, list[str], tuple[str, list[str]] | None]] = [
    (
        "ix_jobs_model_status_priority_created_at_id",
        ["model", "status", "priority", "created_at", "id"],
        ("ix_jobs_model_status_priority_created_at", ["model", "status", "priority", "created_at"]),
    ),
    (
        "ix_jobs_status_created_at_id",
        ["status", "created_at", "id"],
        ("ix_jobs_status_created_at", ["status", "created_at"]),
    ),
    ("ix_jobs_model_created_at_id", ["model", "created_at", "id"], None),
    ("ix_jobs_batch_id_created_at_id", ["batch_id", "created_at", "id"], None),
    (
        "ix_jobs_tenant_status_batch_id",
        ["tenant", "status", "batch_id"],
        ("ix_jobs_tenant_status", ["tenant", "status"]),
    ),
]


def _existing() -> set[str]:
    return {index["name"] for index in inspect(op.get_bind()).get_indexes("jobs") if index["name"]}


def upgrade() -> None:
    existing = _existing()
    for name, columns, replaces in INDEXES:
        if name not in existing:  # made CONCURRENTLY by hand beforehand
            op.create_index(name, "jobs", columns, unique=False)
        if replaces is not None and replaces[0] in existing:
            op.drop_index(replaces[0], table_name="jobs")


def downgrade() -> None:
    for name, _, replaces in reversed(INDEXES):
        if replaces is not None:
            op.create_index(replaces[0], "jobs", replaces[1], unique=False)
        op.drop_index(name, table_name="jobs")
