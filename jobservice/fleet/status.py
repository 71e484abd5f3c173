"""The fleet as people read it: each group's residency, job and ledger, each model's queue and cost.

One function builds it (``fleet_status``); ``GET /fleet``, ``jobservice fleet status`` and the
Fleet page all show what it returns.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.catalog import Catalog
from jobservice.db.tables import FleetEvent, QueueCount, utcnow
from jobservice.fleet import costs as fleet_costs
from jobservice.fleet.card_groups import STATES, groups_with_presence, is_online, ledger
from jobservice.fleet.presence import stale_after
from jobservice.settings import Settings


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def fleet_status(
    session: Session,
    catalog: Catalog,
    settings: Settings,
    *,
    hours: float = 24.0,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Every group but the retired (residency, current and next job, whether it takes jobs, the last
    ``hours`` of its ledger with its loads and evictions marked) and every model (queued jobs, which
    groups serve it, what it costs)."""
    now = now or utcnow()
    since = now - timedelta(hours=hours)
    stale = stale_after(settings)
    events = list(
        session.scalars(
            select(FleetEvent).where(FleetEvent.at >= since).order_by(FleetEvent.at, FleetEvent.id)
        )
    )
    groups = []
    for group, worker in groups_with_presence(session):
        spans = ledger(session, group.id, since=since, until=now)
        seconds = dict.fromkeys(STATES, 0.0)
        timeline = []
        for span in spans:
            start, end = max(span.started_at, since), min(span.ended_at or now, now)
            if end <= start:
                continue
            seconds[span.state] += (end - start).total_seconds()
            timeline.append(
                {
                    "state": span.state,
                    "model": span.model,
                    "job_id": str(span.job_id) if span.job_id else None,
                    "start": start.isoformat(),
                    "end": end.isoformat(),
                    "open": span.ended_at is None,
                }
            )
        resident = []
        used = 0.0
        for model, held in sorted((group.resident or {}).items()):
            spec = catalog.get(model)
            gb = fleet_costs.memory_gb(spec) / max(1, spec.cards) if spec else 0.0
            used += gb
            resident.append(
                {
                    "model": model,
                    "since": held.get("since"),
                    "last_used": held.get("last_used"),
                    "memory_gb_per_card": gb,
                }
            )
        mine = [e for e in events if e.group_id == group.id]
        groups.append(
            {
                "id": group.id,
                "devices": group.devices,
                "kind": group.kind,
                "cards": group.cards,
                "hostname": group.hostname,
                "online": is_online(worker, stale_after_seconds=stale, now=now),
                "last_seen_at": _iso(worker.last_seen_at) if worker else None,
                "memory_gb_per_card": group.memory_gb_per_card,
                "memory_used_gb_per_card": round(used, 2),
                "eligible": list(group.eligible or []),
                "resident": resident,
                "state": group.state,
                "state_model": group.state_model,
                "state_since": _iso(group.state_since),
                "accepting": group.accepting and is_online(worker, stale_after_seconds=stale, now=now),
                "draining_since": _iso(group.draining_since),
                "unhealthy_since": _iso(group.unhealthy_since),
                "health": list(group.health or []),
                "job_id": str(group.job_id) if group.job_id else None,
                "next_job_id": str(group.next_job_id) if group.next_job_id else None,
                "ledger_seconds": {k: round(v, 1) for k, v in seconds.items()},
                "timeline": timeline,
                "loads": [_event(e) for e in mine if e.kind in {"load", "load_failed"}],
                "evictions": [_event(e) for e in mine if e.kind == "evict"],
            }
        )
    return {
        "at": now.isoformat(),
        "since": since.isoformat(),
        "groups": groups,
        "models": _models(session, catalog, groups),
    }


def _event(event: FleetEvent) -> dict[str, Any]:
    return {
        "at": event.at.isoformat(),
        "kind": event.kind,
        "model": event.model,
        "reason": event.reason,
        "seconds": event.seconds,
        "job_id": str(event.job_id) if event.job_id else None,
    }


def _models(session: Session, catalog: Catalog, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    queued: dict[str, dict[int, int]] = {}
    for model, priority, count in session.execute(
        select(QueueCount.model, QueueCount.priority, QueueCount.queued).where(QueueCount.queued > 0)
    ):
        by_priority = queued.setdefault(model, {})
        by_priority[priority] = by_priority.get(priority, 0) + count
    rows = fleet_costs.speeds(session)
    out = []
    for spec in catalog.all():
        kinds = sorted({kind for (model, kind) in rows if model == spec.id})
        measured = {kind: fleet_costs.measured(spec, rows.get((spec.id, kind))) for kind in kinds}
        default = fleet_costs.measured(spec, None)
        out.append(
            {
                "id": spec.id,
                "cards": spec.cards,
                "memory_gb": fleet_costs.memory_gb(spec),
                "per_run": fleet_costs.per_run(spec),
                "queued": sum(queued.get(spec.id, {}).values()),
                "queued_by_priority": {str(p): n for p, n in sorted(queued.get(spec.id, {}).items())},
                "eligible_groups": [g["id"] for g in groups if spec.id in g["eligible"]],
                "resident_on": [g["id"] for g in groups if any(r["model"] == spec.id for r in g["resident"])],
                "cost": {
                    kind: {
                        "seconds_per_output_second": m.speed,
                        "seconds_per_job": round(m.overhead_s, 3),
                        "load_s": m.load_s,
                        "samples": round(m.samples, 2),
                    }
                    for kind, m in measured.items()
                }
                or {
                    "default": {
                        "seconds_per_output_second": default.speed,
                        "seconds_per_job": 0.0,
                        "load_s": default.load_s,
                        "samples": 0,
                    }
                },
            }
        )
    return out
