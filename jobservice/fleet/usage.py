"""Usage: the card-seconds each job used, by phase, charged to its tenant or written off.

A worker records one row per attempt when the attempt ends (``job_usage``): the seconds it spent
loading the model (when it paid for a load), generating, and finishing while it still held the card
(the gate and upload overlap the next job's generation, and that overlap is not counted twice), each
multiplied by the group's cards of the model (a 4-card job counts four times). Failed and canceled
attempts are charged like any other; an attempt the service lost (its worker died, it lost its
lease) is recorded as ``charged = false`` and never billed.

The same accounting feeds fair share: each charged row adds its card-seconds to the tenant's decayed
usage (``tenant_shares``: halved every ``fair_share_half_life_seconds``); ``jobservice.fleet.shares``
adds the tenant's jobs on the cards and divides by its weight.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from jobservice.db.rows import insert_missing
from jobservice.db.tables import Job, JobUsage, Tenant, TenantShare, utcnow
from jobservice.fleet.policy import decayed

PHASES = ("load", "generate", "finish")
WASTED = frozenset({"worker_lost", "lease_lost"})  # the service's fault: never charged


@dataclass(frozen=True)
class Phases:
    """Wall seconds of one attempt in each phase while it held its group's cards."""

    load_s: float = 0.0
    generate_s: float = 0.0
    finish_s: float = 0.0

    @property
    def seconds(self) -> float:
        """All of them."""
        return self.load_s + self.generate_s + self.finish_s


def record_attempt(
    session: Session,
    *,
    job_id: uuid.UUID,
    attempt: int,
    tenant: str,
    model: str,
    group_id: str,
    card_kind: str,
    cards: int,
    phases: Phases,
    outcome: str,
    half_life_s: float,
    at: datetime | None = None,
) -> dict[str, Any]:
    """Record one attempt's card time and add it to the job's ``usage``; returns the new ``usage``.
    Charged attempts also add to the tenant's fair-share usage."""
    at = at or utcnow()
    charged = outcome not in WASTED
    card_seconds = round(phases.seconds * cards, 3)
    session.add(
        JobUsage(
            job_id=job_id,
            attempt=attempt,
            tenant=tenant,
            model=model,
            group_id=group_id,
            card_kind=card_kind,
            cards=cards,
            load_s=round(phases.load_s, 3),
            generate_s=round(phases.generate_s, 3),
            finish_s=round(phases.finish_s, 3),
            card_seconds=card_seconds,
            outcome=outcome,
            charged=charged,
            recorded_at=at,
        )
    )
    if charged:
        charge_tenant(session, tenant, card_seconds, at=at, half_life_s=half_life_s)
    current = session.scalar(select(Job.usage).where(Job.id == job_id)) or {}
    usage = add_attempt(current, phases=phases, cards=cards, card_kind=card_kind, charged=charged)
    session.execute(
        update(Job).where(Job.id == job_id).values(usage=usage).execution_options(synchronize_session=False)
    )
    return usage


def add_attempt(
    usage: dict[str, Any], *, phases: Phases, cards: int, card_kind: str, charged: bool
) -> dict[str, Any]:
    """A job's ``usage`` with one more attempt in it (the shape ``GET /jobs/<id>`` shows)."""
    card_seconds = float(usage.get("card_seconds", 0.0))
    wasted = float(usage.get("wasted_card_seconds", 0.0))
    by_phase: dict[str, float] = {p: float((usage.get("phases") or {}).get(p, 0.0)) for p in PHASES}
    spent = {
        "load": phases.load_s * cards,
        "generate": phases.generate_s * cards,
        "finish": phases.finish_s * cards,
    }
    if charged:
        card_seconds += sum(spent.values())
        by_phase = {p: round(by_phase[p] + spent[p], 3) for p in PHASES}
    else:
        wasted += sum(spent.values())
    return {
        "card_seconds": round(card_seconds, 3),
        "phases": by_phase,
        "cards": cards,
        "card_kind": card_kind,
        "attempts": int(usage.get("attempts", 0)) + 1,
        "wasted_card_seconds": round(wasted, 3),
    }


def charge_tenant(
    session: Session, tenant: str, card_seconds: float, *, at: datetime, half_life_s: float
) -> None:
    """Add card-seconds to the tenant's decayed usage (its row locked: concurrent charges add up)."""
    insert_missing(session, TenantShare, {"tenant": tenant, "usage": 0.0, "as_of": at}, ["tenant"])
    query = select(TenantShare).where(TenantShare.tenant == tenant).with_for_update()
    row = session.scalar(query.execution_options(populate_existing=True))
    assert row is not None
    elapsed = (at - row.as_of).total_seconds()
    row.usage = decayed(row.usage, elapsed, half_life_s) + card_seconds
    row.as_of = max(row.as_of, at)


def weights(session: Session) -> dict[str, float]:
    """Every tenant's fair-share weight that is not the default 1."""
    rows = session.execute(select(Tenant.name, Tenant.weight).where(Tenant.weight != 1.0))
    return {name: float(weight) for name, weight in rows if weight and weight > 0}


# --- reports ----------------------------------------------------------------------------------------
GROUPINGS = ("tenant", "model", "group", "card_kind", "outcome")
BUCKETS = ("hour", "day", "none")


@dataclass(frozen=True)
class UsageRow:
    """Card-seconds of one group of attempts in one time bucket."""

    bucket: datetime | None
    keys: dict[str, str]
    jobs: int
    attempts: int
    card_seconds: float
    load: float
    generate: float
    finish: float
    wasted_card_seconds: float
    failed: int
    canceled: int


def _bucket(at: datetime, bucket: str) -> datetime | None:
    if bucket == "hour":
        return at.replace(minute=0, second=0, microsecond=0)
    if bucket == "day":
        return at.replace(hour=0, minute=0, second=0, microsecond=0)
    return None


def usage_report(
    session: Session,
    *,
    group_by: Iterable[str],
    bucket: str,
    since: datetime,
    until: datetime,
    tenant: str | None = None,
) -> list[UsageRow]:
    """Attempts recorded in ``[since, until)`` (of one tenant, or all), summed per bucket and the
    ``group_by`` keys. Charged card-seconds and wasted ones are kept apart."""
    keys = [k for k in group_by if k in GROUPINGS]
    query = select(JobUsage).where(JobUsage.recorded_at >= since, JobUsage.recorded_at < until)
    if tenant is not None:
        query = query.where(JobUsage.tenant == tenant)
    totals: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in session.scalars(query.order_by(JobUsage.recorded_at).execution_options(yield_per=2000)):
        when = _bucket(row.recorded_at, bucket)
        labels = tuple(str(getattr(row, "group_id" if k == "group" else k)) for k in keys)
        entry = totals.setdefault(
            (when, labels),
            {
                "jobs": set(),
                "attempts": 0,
                "card_seconds": 0.0,
                "load": 0.0,
                "generate": 0.0,
                "finish": 0.0,
                "wasted": 0.0,
                "failed": 0,
                "canceled": 0,
            },
        )
        entry["jobs"].add(row.job_id)
        entry["attempts"] += 1
        if row.charged:
            entry["card_seconds"] += row.card_seconds
            entry["load"] += row.load_s * row.cards
            entry["generate"] += row.generate_s * row.cards
            entry["finish"] += row.finish_s * row.cards
            entry["failed"] += row.outcome == "failed"
            entry["canceled"] += row.outcome == "canceled"
        else:
            entry["wasted"] += row.card_seconds
    return [
        UsageRow(
            bucket=when,
            keys=dict(zip(keys, labels, strict=True)),
            jobs=len(entry["jobs"]),
            attempts=entry["attempts"],
            card_seconds=round(entry["card_seconds"], 3),
            load=round(entry["load"], 3),
            generate=round(entry["generate"], 3),
            finish=round(entry["finish"], 3),
            wasted_card_seconds=round(entry["wasted"], 3),
            failed=entry["failed"],
            canceled=entry["canceled"],
        )
        for (when, labels), entry in sorted(totals.items(), key=lambda kv: (kv[0][0] or utcnow(), kv[0][1]))
    ]


def charged_total(session: Session, *, tenant: str, since: datetime, until: datetime) -> float:
    """A tenant's charged card-seconds in ``[since, until)`` (one number, for checks)."""
    total = session.scalar(
        select(func.coalesce(func.sum(JobUsage.card_seconds), 0.0)).where(
            JobUsage.tenant == tenant,
            JobUsage.charged.is_(True),
            JobUsage.recorded_at >= since,
            JobUsage.recorded_at < until,
        )
    )
    return float(total or 0.0)
