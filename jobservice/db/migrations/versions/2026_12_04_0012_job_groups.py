"""Job groups: the jobs made from one manifest, and which group and row each job came from

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

``job_groups`` holds one row per accepted manifest (``POST /job-groups``, ``jobservice.groups``);
``jobs`` gains ``group_id`` and ``group_row`` (the manifest row, 1 = the first job), with an index
for a group's jobs in row order and one for its counts by status.

A group's jobs queue at batch priority and are admitted as a whole (``group_jobs``,
``jobs_per_hour``), like a batch's: they are not interactive work, so migration 0007's
``tenant_usage.active_jobs`` stops counting them. Its triggers count a job as interactive when
``batch_id IS NULL AND group_id IS NULL`` from here on (the PostgreSQL function is replaced and its
update trigger's condition re-created; SQLite's three triggers that read the condition are
re-created), and the counts are made again from the table in both directions.

Expand only: the new columns are nullable, so an API of the previous release inserts jobs as before.
On SQLite the link from ``jobs.group_id`` to ``job_groups.id`` is kept by the application (as 0002
does for ``batch_id``: adding a constraint there would copy the table and drop its triggers).
"""

# ruff: noqa: S608 - the SQL below is built from this file's own constants, never from input

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_INTERACTIVE = "{row}.batch_id IS NULL"  # migration 0007's
NEW_INTERACTIVE = "{row}.batch_id IS NULL AND {row}.group_id IS NULL"


def _active(interactive: str, row: str) -> str:
    """``row`` (OLD or NEW) is an interactive job that is queued or running."""
    return f"({row}.status IN ('queued', 'running') AND {interactive.format(row=row)})"


def _pg_function(interactive: str) -> str:
    """Migration 0007's function with ``interactive`` as the test of an interactive job."""
    return f"""
CREATE OR REPLACE FUNCTION jobservice_count_tenant_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  moved boolean := TG_OP = 'UPDATE'
    AND (OLD.tenant <> NEW.tenant OR OLD.created_at IS DISTINCT FROM NEW.created_at);
BEGIN
  IF TG_OP <> 'INSERT' THEN
    IF {_active(interactive, "OLD")} THEN
      UPDATE tenant_usage SET active_jobs = active_jobs - 1 WHERE tenant = OLD.tenant;
    END IF;
    IF TG_OP = 'DELETE' OR moved THEN
      UPDATE tenant_job_minutes SET jobs = jobs - 1 WHERE tenant = OLD.tenant
        AND minute = date_trunc('minute', OLD.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    END IF;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    IF {_active(interactive, "NEW")} THEN
      INSERT INTO tenant_usage AS u (tenant, active_jobs) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET active_jobs = u.active_jobs + 1;
    END IF;
    IF TG_OP = 'INSERT' OR moved THEN
      INSERT INTO tenant_job_minutes AS m (tenant, minute, jobs)
        VALUES (NEW.tenant, date_trunc('minute', NEW.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 1)
        ON CONFLICT (tenant, minute) DO UPDATE SET jobs = m.jobs + 1;
    END IF;
  END IF;
  RETURN NULL;
END $$
"""


def _pg_update_trigger(interactive: str) -> list[str]:
    return [
        "DROP TRIGGER jobs_tenant_usage_update ON jobs",
        "CREATE CONSTRAINT TRIGGER jobs_tenant_usage_update AFTER UPDATE ON jobs"
        " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ("
        f"{_active(interactive, 'OLD')} IS DISTINCT FROM {_active(interactive, 'NEW')}"
        " OR OLD.tenant <> NEW.tenant OR OLD.created_at IS DISTINCT FROM NEW.created_at)"
        " EXECUTE FUNCTION jobservice_count_tenant_usage()",
    ]


def _sqlite_triggers(interactive: str) -> list[str]:
    """Migration 0007's SQLite triggers that read the test of an interactive job, with ``interactive``."""
    old, new = _active(interactive, "OLD"), _active(interactive, "NEW")
    return [
        "DROP TRIGGER jobs_tenant_usage_insert",
        "DROP TRIGGER jobs_tenant_usage_delete",
        "DROP TRIGGER jobs_tenant_usage_update_active",
        f"""CREATE TRIGGER jobs_tenant_usage_insert AFTER INSERT ON jobs BEGIN
      INSERT INTO tenant_job_minutes (tenant, minute, jobs)
        VALUES (NEW.tenant, strftime('%Y-%m-%d %H:%M:00.000000', NEW.created_at), 1)
        ON CONFLICT (tenant, minute) DO UPDATE SET jobs = jobs + 1;
      INSERT INTO tenant_usage (tenant, active_jobs)
        SELECT NEW.tenant, 1 WHERE {new}
        ON CONFLICT (tenant) DO UPDATE SET active_jobs = active_jobs + 1;
    END""",
        f"""CREATE TRIGGER jobs_tenant_usage_delete AFTER DELETE ON jobs BEGIN
      UPDATE tenant_job_minutes SET jobs = jobs - 1
        WHERE tenant = OLD.tenant AND minute = strftime('%Y-%m-%d %H:%M:00.000000', OLD.created_at);
      UPDATE tenant_usage SET active_jobs = active_jobs - 1
        WHERE tenant = OLD.tenant AND {old};
    END""",
        f"""CREATE TRIGGER jobs_tenant_usage_update_active AFTER UPDATE ON jobs
      WHEN {old} IS NOT {new} OR OLD.tenant <> NEW.tenant
    BEGIN
      UPDATE tenant_usage SET active_jobs = active_jobs - 1
        WHERE tenant = OLD.tenant AND {old};
      INSERT INTO tenant_usage (tenant, active_jobs)
        SELECT NEW.tenant, 1 WHERE {new}
        ON CONFLICT (tenant) DO UPDATE SET active_jobs = active_jobs + 1;
    END""",
    ]


def _recount(interactive: str, *, postgres: bool) -> list[str]:
    """``tenant_usage`` made again from the jobs table (no job changes meanwhile on PostgreSQL)."""
    lock = ["LOCK TABLE jobs IN SHARE MODE"] if postgres else []
    return [
        *lock,
        "DELETE FROM tenant_usage",
        "INSERT INTO tenant_usage (tenant, active_jobs) SELECT tenant, count(*) FROM jobs"
        f" WHERE status IN ('queued', 'running') AND {interactive.format(row='jobs')} GROUP BY tenant",
    ]


def _counting(interactive: str) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    triggers = [_pg_function(interactive), *_pg_update_trigger(interactive)] if postgres else []
    for statement in triggers or _sqlite_triggers(interactive):
        op.execute(statement)
    for statement in _recount(interactive, postgres=postgres):
        op.execute(statement)


def upgrade() -> None:
    op.create_table(
        "job_groups",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("tenant", sa.String(length=64), server_default="default", nullable=False),
        sa.Column("submitted_by", sa.String(length=32), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("manifest_format", sa.String(length=8), nullable=False),
        sa.Column("manifest_sha256", sa.String(length=64), nullable=False),
        sa.Column("columns", sa.JSON(), nullable=False),
        sa.Column("total_jobs", sa.Integer(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("canceled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_groups")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_job_groups_idempotency_key")),
    )
    op.create_index("ix_job_groups_tenant_created_at", "job_groups", ["tenant", "created_at"], unique=False)
    op.add_column("jobs", sa.Column("group_id", sa.Uuid(), nullable=True))
    op.add_column("jobs", sa.Column("group_row", sa.Integer(), nullable=True))
    if not _sqlite():
        op.create_foreign_key(
            op.f("fk_jobs_group_id_job_groups"),
            "jobs",
            "job_groups",
            ["group_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.create_index("ix_jobs_group_id_created_at_id", "jobs", ["group_id", "created_at", "id"], unique=False)
    op.create_index("ix_jobs_group_id_status", "jobs", ["group_id", "status"], unique=False)
    _counting(NEW_INTERACTIVE)


def downgrade() -> None:
    _counting(OLD_INTERACTIVE)  # first: SQLite will not drop a column a trigger reads
    op.drop_index("ix_jobs_group_id_status", table_name="jobs")
    op.drop_index("ix_jobs_group_id_created_at_id", table_name="jobs")
    if not _sqlite():
        op.drop_constraint(op.f("fk_jobs_group_id_job_groups"), "jobs", type_="foreignkey")
    for column in ("group_row", "group_id"):
        # Plain DROP COLUMN (SQLite 3.35+): a batch rebuild of ``jobs`` would drop its triggers.
        op.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    op.drop_index("ix_job_groups_tenant_created_at", table_name="job_groups")
    op.drop_table("job_groups")


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")
