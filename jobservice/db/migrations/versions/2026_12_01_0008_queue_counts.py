"""Queued jobs per model and priority, kept by triggers, so a new job's queue position is not a count

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

The answer to ``POST /jobs`` carries the new job's queue position: a COUNT of the queued jobs of its
model ahead of it, O(queue) (12 of a submission's 31 ms with 6,660 queued, ``scripts/bench_scale.py``).
``queue_counts`` holds how many jobs of each (model, priority) are queued, kept by triggers on
``jobs`` like migration 0007's (deferred to commit on PostgreSQL, immediate on SQLite); a new job's
position is then the queued jobs of higher priority plus those of its own priority, less the few
queued after it (``jobservice.jobs.queries.count_ahead_of_new``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PG_FUNCTION = """
CREATE FUNCTION jobservice_count_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' AND OLD.status = 'queued' THEN
    UPDATE queue_counts SET queued = queued - 1 WHERE model = OLD.model AND priority = OLD.priority;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.status = 'queued' THEN
    INSERT INTO queue_counts AS q (model, priority, queued) VALUES (NEW.model, NEW.priority, 1)
      ON CONFLICT (model, priority) DO UPDATE SET queued = q.queued + 1;
  END IF;
  RETURN NULL;
END $$
"""

# The update trigger fires only when a row enters or leaves a count: progress, heartbeats and
# endings of running jobs touch no counter row; a claim (queued -> running) does.
PG_TRIGGERS = [
    "CREATE CONSTRAINT TRIGGER jobs_queue_counts_insert AFTER INSERT ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.status = 'queued')"
    " EXECUTE FUNCTION jobservice_count_queue()",
    "CREATE CONSTRAINT TRIGGER jobs_queue_counts_delete AFTER DELETE ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.status = 'queued')"
    " EXECUTE FUNCTION jobservice_count_queue()",
    "CREATE CONSTRAINT TRIGGER jobs_queue_counts_update AFTER UPDATE ON jobs"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((OLD.status = 'queued' OR NEW.status = 'queued')"
    " AND (OLD.status <> NEW.status OR OLD.model <> NEW.model OR OLD.priority <> NEW.priority))"
    " EXECUTE FUNCTION jobservice_count_queue()",
]

SQLITE_TRIGGERS = [
    """CREATE TRIGGER jobs_queue_counts_insert AFTER INSERT ON jobs WHEN NEW.status = 'queued' BEGIN
      INSERT INTO queue_counts (model, priority, queued) VALUES (NEW.model, NEW.priority, 1)
        ON CONFLICT (model, priority) DO UPDATE SET queued = queued + 1;
    END""",
    """CREATE TRIGGER jobs_queue_counts_delete AFTER DELETE ON jobs WHEN OLD.status = 'queued' BEGIN
      UPDATE queue_counts SET queued = queued - 1 WHERE model = OLD.model AND priority = OLD.priority;
    END""",
    """CREATE TRIGGER jobs_queue_counts_update AFTER UPDATE ON jobs
      WHEN (OLD.status = 'queued' OR NEW.status = 'queued')
        AND (OLD.status <> NEW.status OR OLD.model <> NEW.model OR OLD.priority <> NEW.priority)
    BEGIN
      UPDATE queue_counts SET queued = queued - 1
        WHERE model = OLD.model AND priority = OLD.priority AND OLD.status = 'queued';
      INSERT INTO queue_counts (model, priority, queued)
        SELECT NEW.model, NEW.priority, 1 WHERE NEW.status = 'queued'
        ON CONFLICT (model, priority) DO UPDATE SET queued = queued + 1;
    END""",
]

BACKFILL = (
    "INSERT INTO queue_counts (model, priority, queued) SELECT model, priority, count(*) FROM jobs"
    " WHERE status = 'queued' GROUP BY model, priority"
)


def upgrade() -> None:
    op.create_table(
        "queue_counts",
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("queued", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("model", "priority", name=op.f("pk_queue_counts")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("LOCK TABLE jobs IN SHARE MODE")  # no job changes between the count and the triggers
        for statement in [BACKFILL, PG_FUNCTION, *PG_TRIGGERS]:
            op.execute(statement)
    else:
        for statement in [BACKFILL, *SQLITE_TRIGGERS]:
            op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in ("insert", "delete", "update"):
        op.execute(f"DROP TRIGGER jobs_queue_counts_{name}" + (" ON jobs" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION jobservice_count_queue()")
    op.drop_table("queue_counts")
