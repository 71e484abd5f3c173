"""The fleet: card groups and their ledger, loads, measured speeds, usage, fair share and ETAs

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

``jobservice.fleet`` decides which card group runs which job and what each group holds:

- ``jobs`` gains ``dispatched_to`` (the group a queued job was handed to; its message is in that
  group's queue), ``output_seconds`` (seconds of video it will make) and ``usage`` (the card-seconds
  it used, by phase), and an index to take a tenant's oldest queued job of a model and priority;
- ``queue_counts`` is kept per tenant too, with the seconds of video queued (the dispatcher's demand
  and fair share read it instead of the jobs); its triggers are replaced;
- ``tenants`` gains ``weight`` (fair share, default 1);
- new tables: ``fleet_groups`` (what each group may serve, holds and runs), ``fleet_ledger`` (every
  second of every group in one state), ``fleet_events`` (loads and evictions), ``model_speeds``
  (measured generation speed and load time), ``tenant_shares`` (decayed card-seconds per tenant),
  ``job_usage`` (card-seconds per attempt), ``fleet_locks`` and ``fleet_forecasts`` (ETAs).

Expand only: every new column is nullable or defaulted, so workers and APIs of the previous release
keep working against the upgraded database (their jobs are picked up from the table by the new
dispatcher; messages they sent to ``model.<id>`` queues are left unread).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PG_FUNCTION = """
CREATE FUNCTION jobservice_count_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' AND OLD.status = 'queued' THEN
    UPDATE queue_counts SET queued = queued - 1, output_s = output_s - COALESCE(OLD.output_seconds, 0)
      WHERE model = OLD.model AND priority = OLD.priority AND tenant = OLD.tenant;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.status = 'queued' THEN
    INSERT INTO queue_counts AS q (model, priority, tenant, queued, output_s)
      VALUES (NEW.model, NEW.priority, NEW.tenant, 1, COALESCE(NEW.output_seconds, 0))
      ON CONFLICT (model, priority, tenant)
      DO UPDATE SET queued = q.queued + 1, output_s = q.output_s + EXCLUDED.output_s;
  END IF;
  RETURN NULL;
END $$
"""

# Fired only when a row enters or leaves a count, or changes what it counts in.
PG_UPDATE_WHEN = (
    "(OLD.status = 'queued' OR NEW.status = 'queued') AND (OLD.status <> NEW.status"
    " OR OLD.model <> NEW.model OR OLD.priority <> NEW.priority OR OLD.tenant <> NEW.tenant"
    " OR OLD.output_seconds IS DISTINCT FROM NEW.output_seconds)"
)
PG_TRIGGERS = [
    "CREATE CONSTRAINT TRIGGER jobs_queue_counts_insert AFTER INSERT ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.status = 'queued')"
    " EXECUTE FUNCTION jobservice_count_queue()",
    "CREATE CONSTRAINT TRIGGER jobs_queue_counts_delete AFTER DELETE ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.status = 'queued')"
    " EXECUTE FUNCTION jobservice_count_queue()",
    "CREATE CONSTRAINT TRIGGER jobs_queue_counts_update AFTER UPDATE ON jobs"
    f" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({PG_UPDATE_WHEN})"
    " EXECUTE FUNCTION jobservice_count_queue()",
]

SQLITE_TRIGGERS = [
    """CREATE TRIGGER jobs_queue_counts_insert AFTER INSERT ON jobs WHEN NEW.status = 'queued' BEGIN
      INSERT INTO queue_counts (model, priority, tenant, queued, output_s)
        VALUES (NEW.model, NEW.priority, NEW.tenant, 1, COALESCE(NEW.output_seconds, 0))
        ON CONFLICT (model, priority, tenant)
        DO UPDATE SET queued = queued + 1, output_s = output_s + excluded.output_s;
    END""",
    """CREATE TRIGGER jobs_queue_counts_delete AFTER DELETE ON jobs WHEN OLD.status = 'queued' BEGIN
      UPDATE queue_counts SET queued = queued - 1, output_s = output_s - COALESCE(OLD.output_seconds, 0)
        WHERE model = OLD.model AND priority = OLD.priority AND tenant = OLD.tenant;
    END""",
    """CREATE TRIGGER jobs_queue_counts_update AFTER UPDATE ON jobs
      WHEN (OLD.status = 'queued' OR NEW.status = 'queued') AND (OLD.status <> NEW.status
        OR OLD.model <> NEW.model OR OLD.priority <> NEW.priority OR OLD.tenant <> NEW.tenant
        OR OLD.output_seconds IS NOT NEW.output_seconds)
    BEGIN
      UPDATE queue_counts SET queued = queued - 1, output_s = output_s - COALESCE(OLD.output_seconds, 0)
        WHERE model = OLD.model AND priority = OLD.priority AND tenant = OLD.tenant
          AND OLD.status = 'queued';
      INSERT INTO queue_counts (model, priority, tenant, queued, output_s)
        SELECT NEW.model, NEW.priority, NEW.tenant, 1, COALESCE(NEW.output_seconds, 0)
        WHERE NEW.status = 'queued'
        ON CONFLICT (model, priority, tenant)
        DO UPDATE SET queued = queued + 1, output_s = output_s + excluded.output_s;
    END""",
]

BACKFILL = (
    "INSERT INTO queue_counts (model, priority, tenant, queued, output_s)"
    " SELECT model, priority, tenant, count(*), COALESCE(sum(output_seconds), 0) FROM jobs"
    " WHERE status = 'queued' GROUP BY model, priority, tenant"
)

# 0008's forms, for the downgrade.
OLD_BACKFILL = (
    "INSERT INTO queue_counts (model, priority, queued) SELECT model, priority, count(*) FROM jobs"
    " WHERE status = 'queued' GROUP BY model, priority"
)


def _drop_queue_triggers(postgres: bool) -> None:
    for name in ("insert", "delete", "update"):
        op.execute(f"DROP TRIGGER jobs_queue_counts_{name}" + (" ON jobs" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION jobservice_count_queue()")


def _queue_counts_table(*, per_tenant: bool) -> None:
    columns: list[sa.Column[object]] = [
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
    ]
    keys = ["model", "priority"]
    if per_tenant:
        columns.append(sa.Column("tenant", sa.String(length=64), nullable=False))
        keys.append("tenant")
    columns.append(sa.Column("queued", sa.Integer(), nullable=False))
    if per_tenant:
        columns.append(sa.Column("output_s", sa.Float(), nullable=False, server_default="0"))
    op.create_table("queue_counts", *columns, sa.PrimaryKeyConstraint(*keys, name=op.f("pk_queue_counts")))


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")  # no job changes until the triggers exist
    # Plain ADD COLUMN on both databases (a batch rebuild of ``jobs`` on SQLite would drop its triggers).
    op.add_column("jobs", sa.Column("dispatched_to", sa.String(length=255), nullable=True))
    op.add_column("jobs", sa.Column("output_seconds", sa.Float(), nullable=True))
    op.add_column("jobs", sa.Column("usage", sa.JSON(), nullable=True))
    op.create_index(
        "ix_jobs_model_status_priority_tenant_created_at_id",
        "jobs",
        ["model", "status", "priority", "tenant", "created_at", "id"],
    )
    op.add_column("tenants", sa.Column("weight", sa.Float(), nullable=False, server_default="1"))

    _drop_queue_triggers(postgres)
    op.drop_table("queue_counts")
    _queue_counts_table(per_tenant=True)
    op.execute(BACKFILL)
    if postgres:
        op.execute(PG_FUNCTION)
    for statement in PG_TRIGGERS if postgres else SQLITE_TRIGGERS:
        op.execute(statement)
    _create_fleet_tables()


def _create_fleet_tables() -> None:
    stamp = sa.DateTime(timezone=True)
    op.create_table(
        "fleet_groups",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("devices", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("cards", sa.Integer(), nullable=False),
        sa.Column("memory_gb_per_card", sa.Float(), nullable=True),
        sa.Column("eligible", sa.JSON(), nullable=False),
        sa.Column("resident", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_model", sa.String(length=128), nullable=True),
        sa.Column("state_since", stamp, nullable=False),
        sa.Column("span_id", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("next_job_id", sa.Uuid(), nullable=True),
        sa.Column("busy_until", stamp, nullable=True),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("started_at", stamp, nullable=False),
        sa.Column("updated_at", stamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_groups")),
    )
    op.create_table(
        "fleet_ledger",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("cards", sa.Integer(), nullable=False),
        sa.Column("started_at", stamp, nullable=False),
        sa.Column("ended_at", stamp, nullable=True),
        sa.Column("reason", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_ledger")),
    )
    op.create_index("ix_fleet_ledger_group_id_started_at", "fleet_ledger", ["group_id", "started_at"])
    op.create_index("ix_fleet_ledger_ended_at", "fleet_ledger", ["ended_at"])
    op.create_table(
        "fleet_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("at", stamp, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.String(length=128), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_events")),
    )
    op.create_index("ix_fleet_events_at", "fleet_events", ["at"])
    op.create_index("ix_fleet_events_group_id_at", "fleet_events", ["group_id", "at"])
    op.create_table(
        "model_speeds",
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("card_kind", sa.String(length=8), nullable=False),
        sa.Column("samples", sa.Float(), nullable=False),
        sa.Column("sum_x", sa.Float(), nullable=False),
        sa.Column("sum_y", sa.Float(), nullable=False),
        sa.Column("sum_xx", sa.Float(), nullable=False),
        sa.Column("sum_xy", sa.Float(), nullable=False),
        sa.Column("loads", sa.Integer(), nullable=False),
        sa.Column("load_s", sa.Float(), nullable=True),
        sa.Column("updated_at", stamp, nullable=False),
        sa.PrimaryKeyConstraint("model", "card_kind", name=op.f("pk_model_speeds")),
    )
    op.create_table(
        "tenant_shares",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("usage", sa.Float(), nullable=False),
        sa.Column("as_of", stamp, nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_tenant_shares")),
    )
    op.create_table(
        "job_usage",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("card_kind", sa.String(length=8), nullable=False),
        sa.Column("cards", sa.Integer(), nullable=False),
        sa.Column("load_s", sa.Float(), nullable=False),
        sa.Column("generate_s", sa.Float(), nullable=False),
        sa.Column("finish_s", sa.Float(), nullable=False),
        sa.Column("card_seconds", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("charged", sa.Boolean(), nullable=False),
        sa.Column("recorded_at", stamp, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_usage_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_usage")),
    )
    op.create_index("ix_job_usage_recorded_at", "job_usage", ["recorded_at"])
    op.create_index("ix_job_usage_tenant_recorded_at", "job_usage", ["tenant", "recorded_at"])
    op.create_index("ix_job_usage_job_id", "job_usage", ["job_id"])
    op.create_table(
        "fleet_locks",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("at", stamp, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_fleet_locks")),
    )
    op.execute("INSERT INTO fleet_locks (name, at) VALUES ('dispatch', CURRENT_TIMESTAMP)")
    op.create_table(
        "fleet_forecasts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("computed_at", stamp, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_forecasts")),
    )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in (
        "fleet_forecasts",
        "fleet_locks",
        "job_usage",
        "tenant_shares",
        "model_speeds",
        "fleet_events",
        "fleet_ledger",
        "fleet_groups",
    ):
        op.drop_table(table)
    _drop_queue_triggers(postgres)
    op.drop_table("queue_counts")
    _queue_counts_table(per_tenant=False)
    op.execute(OLD_BACKFILL)
    # 0008's triggers, as it made them.
    from importlib import import_module

    previous = import_module("jobservice.db.migrations.versions.2026_12_01_0008_queue_counts")
    if postgres:
        op.execute(previous.PG_FUNCTION)
    for statement in previous.PG_TRIGGERS if postgres else previous.SQLITE_TRIGGERS:
        op.execute(statement)
    op.drop_index("ix_jobs_model_status_priority_tenant_created_at_id", table_name="jobs")
    # Plain DROP COLUMN (SQLite 3.35+): a batch rebuild of ``jobs`` would drop its triggers.
    for table, column in (
        ("tenants", "weight"),
        ("jobs", "usage"),
        ("jobs", "output_seconds"),
        ("jobs", "dispatched_to"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
