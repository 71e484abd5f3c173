"""Traces across hosts: the submitting request's trace context on each job

Revision ID: 0014_trace_context
Revises: 0013
Create Date: 2026-12-06

With ``JOBSERVICE_OTLP_ENDPOINT`` set, ``POST /jobs`` (and every other way a job is made) stores the
W3C trace context of the request (``traceparent``, ``tracestate``) on the job; the worker that claims
the job continues that trace, and so do its webhooks (``jobservice.tracing``). A job is dispatched
long after, and often far from, the request, so its Celery message cannot carry it reliably.

Expand only: a nullable column the previous release neither reads nor writes; no row is rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_trace_context"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both databases (a batch recreate on SQLite would drop the jobs table's
    # queue-count triggers).
    op.add_column("jobs", sa.Column("trace_context", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as batch:  # SQLite 3.35+ drops a column in place
        batch.drop_column("trace_context")
