"""What the service looks like right now: queues per model and workers online with their cards.

Both are read at scrape time. The queue query touches only queued and running rows (the
``status, created_at`` index), and the workers table holds one row per worker process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobservice.catalog import Catalog
from jobservice.db.tables import FleetGroup, Job, JobStatus, QueueCount, WebhookDelivery, WorkerRecord
from jobservice.fleet.costs import memory_gb
from jobservice.fleet.placement import DeviceSpecError, parse_devices
from jobservice.fleet.presence import online_workers
from jobservice.webhooks.outbox import PENDING


@dataclass(frozen=True)
class ModelQueue:
    """One model's queued and running jobs."""

    queued: int = 0
    running: int = 0
    oldest_queued_seconds: float = 0.0
    output_seconds: float = 0.0  # of video the queued jobs will make (the queue counts' sum)


@dataclass(frozen=True)
class Card:
    """A card owned by an online worker, with its memory where the vendor tool reported it."""

    hostname: str
    devices: str
    card: str
    name: str
    total_bytes: float | None
    used_bytes: float | None


@dataclass
class Fleet:
    """Online workers counted by card group and by model, and their cards."""

    by_group: dict[tuple[str, str], int] = field(default_factory=dict)  # (devices, kind) -> workers
    by_model: dict[str, int] = field(default_factory=dict)
    cards: list[Card] = field(default_factory=list)


@dataclass(frozen=True)
class CardGroupNow:
    """A card group's residency and ledger state now."""

    id: str
    state: str
    resident: tuple[str, ...]
    memory_ratio: float | None  # resident memory of its first card over the card's
    hostname: str = ""
    pod: str = ""  # the Kubernetes pod its worker last ran in ("" elsewhere)
    accepting: bool = True  # not down, draining or unhealthy


@dataclass(frozen=True)
class WebhookBacklog:
    """Webhook deliveries still to make."""

    pending: int
    oldest_seconds: float


def groups(session: Session, catalog: Catalog) -> list[CardGroupNow]:
    """Every card group's state, residency, host and pod (one row each), the retired left out."""
    pods = {
        worker_id: str((info or {}).get("pod") or "")
        for worker_id, info in session.execute(
            select(WorkerRecord.id, WorkerRecord.info).where(
                WorkerRecord.id.in_(select(FleetGroup.id).scalar_subquery())
            )
        )
    }
    found = []
    query = select(FleetGroup).where(FleetGroup.retired_at.is_(None)).order_by(FleetGroup.id)
    for group in session.scalars(query):
        resident = tuple(sorted(group.resident or {}))
        ratio = None
        if group.memory_gb_per_card:
            used = sum(
                memory_gb(spec) / max(1, spec.cards) for m in resident if (spec := catalog.get(m)) is not None
            )
            ratio = round(used / group.memory_gb_per_card, 4)
        accepting = group.accepting and group.state != "down"
        found.append(
            CardGroupNow(
                group.id,
                group.state,
                resident,
                ratio,
                group.hostname or "",
                pods.get(group.id, ""),
                accepting,
            )
        )
    return found


def webhook_backlog(session: Session, *, now: datetime) -> WebhookBacklog:
    """How many webhook deliveries are pending, and the oldest one's age (the status index)."""
    count, oldest = session.execute(
        select(func.count(), func.min(WebhookDelivery.created_at)).where(WebhookDelivery.status == PENDING)
    ).one()
    age = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
    return WebhookBacklog(pending=int(count), oldest_seconds=age)


def retired_groups(session: Session) -> frozenset[str]:
    """The ids of the retired card groups (their series leave /metrics)."""
    return frozenset(session.scalars(select(FleetGroup.id).where(FleetGroup.retired_at.is_not(None))))


def queues(session: Session, *, models: list[str], now: datetime) -> dict[str, ModelQueue]:
    """Queued and running jobs per model (every catalog model appears, with zeros if idle)."""
    found: dict[str, dict[str, Any]] = {m: {} for m in models}
    query = (
        select(Job.model, Job.status, func.count(), func.min(Job.created_at))
        .where(Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
        .group_by(Job.model, Job.status)
    )
    for model, status, count, oldest in session.execute(query):
        entry = found.setdefault(model, {})
        if status == JobStatus.QUEUED:
            entry["queued"] = int(count)
            entry["oldest_queued_seconds"] = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
        else:
            entry["running"] = int(count)
    # The queue counts (kept by the jobs table's triggers) already sum each model's queued output.
    output = select(QueueCount.model, func.sum(QueueCount.output_s)).group_by(QueueCount.model)
    for model, seconds in session.execute(output):
        if seconds:
            found.setdefault(model, {})["output_seconds"] = max(0.0, float(seconds))
    return {model: ModelQueue(**entry) for model, entry in found.items()}


def fleet(session: Session, *, stale_after_seconds: float, now: datetime) -> Fleet:
    """Workers seen recently, by card group and model, with the cards they own."""
    result = Fleet()
    for worker in online_workers(session, stale_after_seconds=stale_after_seconds, now=now):
        kind = worker.devices.split(":", 1)[0]
        group = (worker.devices, kind)
        result.by_group[group] = result.by_group.get(group, 0) + 1
        for model in worker.models or []:
            result.by_model[model] = result.by_model.get(model, 0) + 1
        result.cards.extend(_cards_of(worker))
    return result


def _cards_of(worker: WorkerRecord) -> list[Card]:
    """The worker's own cards from the host inventory it last reported (at start, then every minute)."""
    try:
        device = parse_devices(worker.devices)
    except DeviceSpecError:
        return []
    host = (worker.info or {}).get("host") or {}
    cards = []
    for card in host.get("cards") or []:
        if (
            not isinstance(card, dict)
            or card.get("kind") != device.kind
            or card.get("index") not in device.indices
        ):
            continue
        total, free = card.get("total_mb"), card.get("free_mb")
        total_b = float(total) * 2**20 if isinstance(total, int | float) else None
        used_b = (
            total_b - float(free) * 2**20 if total_b is not None and isinstance(free, int | float) else None
        )
        cards.append(
            Card(
                hostname=worker.hostname,
                devices=worker.devices,
                card=f"{device.kind}:{card['index']}",
                name=str(card.get("name") or ""),
                total_bytes=total_b,
                used_bytes=used_b,
            )
        )
    return cards
