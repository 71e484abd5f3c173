"""Per-tenant usage counters kept by triggers, so that admission reads two rows instead of counting

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Admission (``jobservice.quotas.admit``) counted a tenant's active interactive jobs and its jobs of
the last hour while holding the tenant's lock: O(backlog) under a lock, so a tenant with 6,660
queued jobs took ~24 ms per submission and its submissions queued behind each other
(``scripts/bench_scale.py``). Triggers on ``jobs`` now keep:

- ``tenant_usage.active_jobs``: the tenant's interactive (``batch_id IS NULL``) jobs that are
  queued or running;
- ``tenant_job_minutes``: how many jobs (batch jobs too) the tenant created in each UTC minute.

On PostgreSQL they are constraint triggers deferred to commit: the counter rows are locked only
while a transaction commits, never across a submission's round trips, and a transaction's own new
rows are not in the counters it reads (``jobservice.quotas.usage.admission_usage`` says so). SQLite
has one writer at a time anyway: its triggers are immediate and the counts include its own rows.
The upgrade counts what is there; ``downgrade`` drops it all.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PG_FUNCTION = """
CREATE FUNCTION jobservice_count_tenant_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  moved boolean := TG_OP = 'UPDATE'
    AND (OLD.tenant <> NEW.tenant OR OLD.created_at IS DISTINCT FROM NEW.created_at);
BEGIN
  IF TG_OP <> 'INSERT' THEN
    IF OLD.status IN ('queued', 'running') AND OLD.batch_id IS NULL THEN
      UPDATE tenant_usage SET active_jobs = active_jobs - 1 WHERE tenant = OLD.tenant;
    END IF;
    IF TG_OP = 'DELETE' OR moved THEN
      UPDATE tenant_job_minutes SET jobs = jobs - 1 WHERE tenant = OLD.tenant
        AND minute = date_trunc('minute', OLD.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    END IF;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    IF NEW.status IN ('queued', 'running') AND NEW.batch_id IS NULL THEN
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

# The update trigger fires only when a row enters or leaves the counts: a claim (queued ->
# running), progress and heartbeats change nothing counted and touch no counter row.
PG_TRIGGERS = [
    "CREATE CONSTRAINT TRIGGER jobs_tenant_usage_insert AFTER INSERT ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobservice_count_tenant_usage()",
    "CREATE CONSTRAINT TRIGGER jobs_tenant_usage_delete AFTER DELETE ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobservice_count_tenant_usage()",
    "CREATE CONSTRAINT TRIGGER jobs_tenant_usage_update AFTER UPDATE ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ("
    "((OLD.status IN ('queued', 'running') AND OLD.batch_id IS NULL)"
    " IS DISTINCT FROM (NEW.status IN ('queued', 'running') AND NEW.batch_id IS NULL))"
    " OR OLD.tenant <> NEW.tenant OR OLD.created_at IS DISTINCT FROM NEW.created_at)"
    " EXECUTE FUNCTION jobservice_count_tenant_usage()",
]
PG_BACKFILL = [
    "LOCK TABLE jobs IN SHARE MODE",  # no job changes between these counts and the triggers
    "INSERT INTO tenant_usage (tenant, active_jobs) SELECT tenant, count(*) FROM jobs"
    " WHERE status IN ('queued', 'running') AND batch_id IS NULL GROUP BY tenant",
    # Only the minutes admission can still read (the reaper drops older ones).
    "INSERT INTO tenant_job_minutes (tenant, minute, jobs)"
    " SELECT tenant, date_trunc('minute', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*)"
    " FROM jobs WHERE created_at >= now() - interval '2 hours' GROUP BY 1, 2",
]

# SQLite stores naive UTC text 'YYYY-MM-DD HH:MM:SS.ffffff' (jobservice.db.tables.UTCDateTime).
SQLITE_TRIGGERS = [
    """CREATE TRIGGER jobs_tenant_usage_insert AFTER INSERT ON jobs BEGIN
      INSERT INTO tenant_job_minutes (tenant, minute, jobs)
        VALUES (NEW.tenant, strftime('%Y-%m-%d %H:%M:00.000000', NEW.created_at), 1)
        ON CONFLICT (tenant, minute) DO UPDATE SET jobs = jobs + 1;
      INSERT INTO tenant_usage (tenant, active_jobs)
        SELECT NEW.tenant, 1 WHERE NEW.status IN ('queued', 'running') AND NEW.batch_id IS NULL
        ON CONFLICT (tenant) DO UPDATE SET active_jobs = active_jobs + 1;
    END""",
    """CREATE TRIGGER jobs_tenant_usage_delete AFTER DELETE ON jobs BEGIN
      UPDATE tenant_job_minutes SET jobs = jobs - 1
        WHERE tenant = OLD.tenant AND minute = strftime('%Y-%m-%d %H:%M:00.000000', OLD.created_at);
      UPDATE tenant_usage SET active_jobs = active_jobs - 1
        WHERE tenant = OLD.tenant AND OLD.status IN ('queued', 'running') AND OLD.batch_id IS NULL;
    END""",
    """CREATE TRIGGER jobs_tenant_usage_update_active AFTER UPDATE ON jobs
      WHEN (OLD.status IN ('queued', 'running') AND OLD.batch_id IS NULL)
        IS NOT (NEW.status IN ('queued', 'running') AND NEW.batch_id IS NULL) OR OLD.tenant <> NEW.tenant
    BEGIN
      UPDATE tenant_usage SET active_jobs = active_jobs - 1
        WHERE tenant = OLD.tenant AND OLD.status IN ('queued', 'running') AND OLD.batch_id IS NULL;
      INSERT INTO tenant_usage (tenant, active_jobs)
        SELECT NEW.tenant, 1 WHERE NEW.status IN ('queued', 'running') AND NEW.batch_id IS NULL
        ON CONFLICT (tenant) DO UPDATE SET active_jobs = active_jobs + 1;
    END""",
    """CREATE TRIGGER jobs_tenant_usage_update_minute AFTER UPDATE ON jobs
      WHEN OLD.created_at IS NOT NEW.created_at OR OLD.tenant <> NEW.tenant
    BEGIN
      UPDATE tenant_job_minutes SET jobs = jobs - 1
        WHERE tenant = OLD.tenant AND minute = strftime('%Y-%m-%d %H:%M:00.000000', OLD.created_at);
      INSERT INTO tenant_job_minutes (tenant, minute, jobs)
        VALUES (NEW.tenant, strftime('%Y-%m-%d %H:%M:00.000000', NEW.created_at), 1)
        ON CONFLICT (tenant, minute) DO UPDATE SET jobs = jobs + 1;
    END""",
]
SQLITE_BACKFILL = [
    "INSERT INTO tenant_usage (tenant, active_jobs) SELECT tenant, count(*) FROM jobs"
    " WHERE status IN ('queued', 'running') AND batch_id IS NULL GROUP BY tenant",
    "INSERT INTO tenant_job_minutes (tenant, minute, jobs)"
    " SELECT tenant, strftime('%Y-%m-%d %H:%M:00.000000', created_at), count(*) FROM jobs"
    " WHERE created_at >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-2 hours') GROUP BY 1, 2",
]


def upgrade() -> None:
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("active_jobs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_tenant_usage")),
    )
    op.create_table(
        "tenant_job_minutes",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "minute", name=op.f("pk_tenant_job_minutes")),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in (
        PG_BACKFILL + [PG_FUNCTION, *PG_TRIGGERS] if postgres else SQLITE_BACKFILL + SQLITE_TRIGGERS
    ):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER jobs_tenant_usage_{name} ON jobs")
        op.execute("DROP FUNCTION jobservice_count_tenant_usage()")
    else:
        for name in ("insert", "delete", "update_active", "update_minute"):
            op.execute(f"DROP TRIGGER jobs_tenant_usage_{name}")
    op.drop_table("tenant_job_minutes")
    op.drop_table("tenant_usage")
