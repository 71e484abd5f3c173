"""Batches are job groups: every nightly run gets its job group, and its jobs carry it

Revision ID: 0018_batches_are_job_groups
Revises: 0015_group_lifecycle
Create Date: 2026-12-06

A nightly run is a job group with a spec (``jobservice.nightly.service``): its ``job_groups`` row
has the batch's id, ``manifest_format`` ``spec`` and the spec's digest, and its jobs carry
``group_id`` beside ``batch_id``, so that progress, cancel, job pages and retention are the group's.
Every set may have a webhook for ``group.started`` / ``group.completed`` (``job_groups`` gains the
nullable ``webhook_url`` and ``webhook_events``; a batch's are its spec's). This migration makes
existing batches so, without loss:

- one ``job_groups`` row per batch that has none: its id, name, tenant, key, source and creation
  time, ``total_jobs`` and ``models`` counted from its jobs, ``canceled_at`` for a canceled batch;
- ``jobs.group_id`` set to ``batch_id`` where it is empty;
- a batch left ``creating`` by an interrupted creation (that state is gone: a batch is now created
  with all its jobs in one transaction) becomes ``canceled`` with the reason, so ``POST
  /batches/<id>/resume`` queues its missing slots (one without a spec has nothing to queue, and
  says so).

A migration reaches the database, not the object store: ``jobservice db upgrade`` then copies a
batch's objects from ``batches/<id>/`` to ``groups/<id>/`` and points its spec and jobs at the
copies (``jobservice.groups.relocate``); until then the rows keep naming the old keys, which stay
readable, and the retention sweep deletes both prefixes once every job of the set expired.
Downgrading removes the ``spec`` groups and
the jobs' links to them; ``creating`` rows stay canceled.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0018_batches_are_job_groups"
down_revision: str | Sequence[str] | None = "0015_group_lifecycle"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SPEC_FORMAT = "spec"  # jobservice.nightly.service.SPEC_FORMAT
INTERRUPTED = "Its creation was interrupted (before this release); resume it to queue its missing runs."
NO_SPEC = (
    "Its creation was interrupted before its spec was stored, so it has nothing to run; run the spec again."
)

# The columns this migration reads or writes, by name (the tables' own types, enough to bind values).
TYPES: dict[str, Any] = {
    "id": sa.Uuid,
    "batch_id": sa.Uuid,
    "group_id": sa.Uuid,
    "spec": sa.JSON,
    "columns": sa.JSON,
    "models": sa.JSON,
    "total_jobs": sa.Integer,
    "created_at": sa.DateTime(timezone=True),
    "finished_at": sa.DateTime(timezone=True),
    "updated_at": sa.DateTime(timezone=True),
    "canceled_at": sa.DateTime(timezone=True),
}


def _table(name: str, columns: str) -> sa.TableClause:
    return sa.table(name, *(sa.column(c, TYPES.get(c, sa.String)) for c in columns.split()))


batches = _table(
    "batches",
    "id name spec_digest spec source status error tenant submitted_by created_at finished_at updated_at"
    " webhook_url webhook_events",
)
jobs = _table("jobs", "batch_id group_id model")
groups = _table(
    "job_groups",
    "id name tenant submitted_by source manifest_format manifest_sha256 columns total_jobs models"
    " idempotency_key created_at canceled_at webhook_url webhook_events",
)


def upgrade() -> None:
    op.add_column("job_groups", sa.Column("webhook_url", sa.Text(), nullable=True))
    op.add_column("job_groups", sa.Column("webhook_events", sa.String(64), nullable=True))
    bind = op.get_bind()
    now = datetime.now(UTC)
    for batch_id, spec in bind.execute(
        sa.select(batches.c.id, batches.c.spec).where(batches.c.status == "creating")
    ):
        error = INTERRUPTED if (spec or {}).get("cases") else NO_SPEC
        bind.execute(
            batches.update()
            .where(batches.c.id == batch_id)
            .values(status="canceled", error=error, finished_at=now, updated_at=now)
        )
    counts: dict[object, dict[str, int]] = {}
    for batch_id, model, count in bind.execute(
        sa.select(jobs.c.batch_id, jobs.c.model, sa.func.count())
        .where(jobs.c.batch_id.is_not(None))
        .group_by(jobs.c.batch_id, jobs.c.model)
    ):
        counts.setdefault(batch_id, {})[model] = count
    known = set(bind.scalars(sa.select(groups.c.id)))
    rows = []
    for batch in bind.execute(sa.select(batches)):
        if batch.id in known:
            continue
        models = dict(sorted(counts.get(batch.id, {}).items(), key=lambda item: (-item[1], item[0])))
        rows.append(
            {
                "id": batch.id,
                "name": batch.name or "",
                "tenant": batch.tenant or "default",
                "submitted_by": batch.submitted_by,
                "source": (batch.source or "cli")[:16],
                "manifest_format": SPEC_FORMAT,
                "manifest_sha256": batch.spec_digest,
                "columns": [],
                "total_jobs": sum(models.values()),
                "models": json.loads(json.dumps(models)),
                "idempotency_key": None,
                "created_at": batch.created_at,
                "canceled_at": batch.finished_at if batch.status == "canceled" else None,
                "webhook_url": batch.webhook_url,
                "webhook_events": batch.webhook_events,
            }
        )
    if rows:
        bind.execute(groups.insert(), rows)
    bind.execute(
        jobs.update()
        .where(jobs.c.batch_id.is_not(None), jobs.c.group_id.is_(None))
        .values(group_id=jobs.c.batch_id)
    )


def downgrade() -> None:
    bind = op.get_bind()
    spec_groups = sa.select(groups.c.id).where(groups.c.manifest_format == SPEC_FORMAT)
    bind.execute(jobs.update().where(jobs.c.group_id.in_(spec_groups)).values(group_id=None))
    bind.execute(groups.delete().where(groups.c.manifest_format == SPEC_FORMAT))
    with op.batch_alter_table("job_groups") as table:
        table.drop_column("webhook_events")
        table.drop_column("webhook_url")
