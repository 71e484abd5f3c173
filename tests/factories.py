"""Factories of test data: databases copied from the session's migrated template, and job rows.

Tests build rows through the same transition functions the service uses (``record_created``), so
a factory never writes a state the service could not reach.
"""

from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobservice.db.engine import Database
from jobservice.db.tables import Job, utcnow
from jobservice.jobs.transitions import record_created


def copy_template(template: Path, folder: Path, name: str = "jobs.db") -> Path:
    """A migrated SQLite file: a copy of the session's template (see ``migrated_sqlite``)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, folder / name)
    return folder / name


def sqlite_copy(template: Path, folder: Path, name: str = "jobs.db") -> Database:
    """A Database on a copy of the migrated template."""
    return Database(f"sqlite:///{copy_template(template, folder, name)}")


def new_job(
    db: Database,
    *,
    model: str = "reference-t2v",
    priority: int = 0,
    created_offset: float = 0.0,
    params: dict[str, Any] | None = None,
) -> uuid.UUID:
    """A queued text2video job, recorded as ``POST /jobs`` records one; returns its id."""
    job = Job(
        id=uuid.uuid4(),
        task="text2video",
        model=model,
        params=params or {"prompt": "x"},
        priority=priority,
        created_at=utcnow() + timedelta(seconds=created_offset),
        max_attempts=3,
    )
    with db.session() as s:
        record_created(s, job)
    return job.id


def online_group(
    db: Database,
    group_id: str,
    models: list[str],
    *,
    memory_gb_per_card: float | None = None,
    kind: str = "cpu",
) -> None:
    """A card group whose worker looks online (a presence row seen now), free and holding nothing:
    what a ``jobservice worker`` registers when it starts, without the process."""
    from jobservice.fleet.card_groups import register
    from jobservice.fleet.presence import announce_worker

    with db.session() as s:
        announce_worker(s, worker_id=group_id, hostname="test", pid=1, devices=kind, models=models, info={})
    with db.session() as s:
        register(
            s,
            group_id=group_id,
            devices=kind,
            kind=kind,
            cards=1,
            memory_gb_per_card=memory_gb_per_card,
            eligible=models,
            hostname="test",
        )


def down_for(db: Database, group_id: str, hours: float) -> None:
    """The group's worker stopped ``hours`` ago and its group has been down since (its whole ledger
    moved back by ``hours``, so it still tiles)."""
    from sqlalchemy import select, update

    from jobservice.db.tables import FleetGroup, LedgerSpan, WorkerRecord
    from jobservice.fleet.card_groups import mark_down

    back = timedelta(hours=hours)
    with db.session() as s:
        mark_down(s, group_id, at=utcnow(), reason="worker stopped")
    with db.session() as s:
        s.execute(update(WorkerRecord).where(WorkerRecord.id == group_id).values(stopped_at=utcnow() - back))
        for span in s.scalars(select(LedgerSpan).where(LedgerSpan.group_id == group_id)):
            span.started_at -= back
            span.ended_at = span.ended_at - back if span.ended_at else None
        group = s.get(FleetGroup, group_id)
        assert group is not None
        group.state_since -= back
