"""Worker presence: each worker process records the cards it owns and the models it serves."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.db.tables import WorkerRecord, utcnow
from jobservice.settings import Settings


def announce_worker(
    session: Session,
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    devices: str,
    models: list[str],
    info: dict[str, Any],
) -> None:
    """Insert or refresh a worker's presence row."""
    now = utcnow()
    record = session.get(WorkerRecord, worker_id)
    if record is None:
        session.add(
            WorkerRecord(
                id=worker_id,
                hostname=hostname,
                pid=pid,
                devices=devices,
                models=models,
                info=info,
                started_at=now,
                last_seen_at=now,
            )
        )
        return
    record.hostname, record.pid, record.devices = hostname, pid, devices
    record.models, record.info = list(models), dict(info)
    record.last_seen_at, record.stopped_at = now, None


def touch_worker(session: Session, worker_id: str) -> None:
    """Mark a worker as seen now."""
    record = session.get(WorkerRecord, worker_id)
    if record is not None:
        record.last_seen_at = utcnow()


def refresh_host(session: Session, worker_id: str, host: dict[str, Any]) -> None:
    """Replace the host inventory a worker reported (its cards' memory now) in its presence row."""
    record = session.get(WorkerRecord, worker_id)
    if record is not None:
        record.info = {**dict(record.info or {}), "host": host, "host_at": utcnow().isoformat()}


def retire_worker(session: Session, worker_id: str) -> None:
    """Mark a worker as stopped (clean shutdown)."""
    record = session.get(WorkerRecord, worker_id)
    if record is not None:
        record.stopped_at = utcnow()


def stale_after(settings: Settings) -> float:
    """How long a worker may stay silent before it counts as offline (three missed rounds)."""
    return max(15.0, settings.reap_interval_seconds * 3 + 5)


def online_workers(
    session: Session, *, stale_after_seconds: float, now: datetime | None = None
) -> list[WorkerRecord]:
    """Workers seen recently and not stopped."""
    cutoff = (now or utcnow()) - timedelta(seconds=stale_after_seconds)
    query = select(WorkerRecord).where(WorkerRecord.last_seen_at >= cutoff, WorkerRecord.stopped_at.is_(None))
    return list(session.scalars(query.order_by(WorkerRecord.id)))


def worker_view(record: WorkerRecord) -> dict[str, Any]:
    """The public view of a worker."""
    return {
        "id": record.id,
        "hostname": record.hostname,
        "pid": record.pid,
        "devices": record.devices,
        "models": list(record.models or []),
        "info": dict(record.info or {}),
        "started_at": record.started_at.isoformat(),
        "last_seen_at": record.last_seen_at.isoformat(),
    }
