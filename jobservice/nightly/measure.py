"""How a batch's jobs are measured: undisturbed by the worker's own finishing, unless the spec says not.

A regression batch compares times, so by default its jobs start only once their worker has finished
its earlier jobs (workers/finisher.py): nothing of that worker runs beside the measured generation,
at the cost of the overlap (the card idles while the previous job is gated and stored). A spec with
``undisturbed: false`` keeps the overlap for throughput; its runs' reports then show the finishing
that ran beside them (``host.finishing_ms``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.db.tables import Batch, Job


def measured_alone(session: Session, job_id: uuid.UUID) -> bool:
    """Whether ``job_id`` is a batch job to be measured undisturbed (one indexed read, no spec body)."""
    row = session.execute(
        select(Job.batch_id, Batch.spec["undisturbed"].as_boolean())
        .outerjoin(Batch, Batch.id == Job.batch_id)
        .where(Job.id == job_id)
    ).first()
    if row is None or row[0] is None:
        return False
    return row[1] is not False  # absent: the default, undisturbed
