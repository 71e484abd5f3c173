"""Fair share in the service: each tenant's level, the lift of a tenant that starts competing, and
the floor a tenant is lifted to when nobody else waits.

The rule itself is pure (``jobservice.fleet.policy``: ``fair_usage``, ``lift``, ``fair_key``), and
the simulator (``jobservice.fleet.simulate``) and the ETA forecast call the same functions; this
module reads their inputs from the database and writes what they decide:

- a tenant's **level** is its charged card-seconds (``tenant_shares``, decayed with the fair-share
  half-life; ``jobservice.fleet.usage`` charges each attempt when it ends) plus, for each of its jobs
  handed to a group and not yet ended, the larger of what that job should cost and what it used so
  far, divided by its weight;
- a tenant that submits with no job waiting to be dispatched **starts competing**: in the same
  transaction as its new rows (its share row locked), its level is lifted to the least level among
  the other tenants with jobs waiting, less a newcomer credit of
  ``fair_share_newcomer_credit_seconds`` x the cards of the online groups, and ``activated_at`` is
  recorded (the newest goes first on a tie); with nobody else waiting it is lifted to the **floor**,
  the least waiting level the dispatcher last saw (one row, decayed like the levels).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.orm import Session

from jobservice.catalog import Catalog
from jobservice.db.rows import insert_missing
from jobservice.db.tables import FairShareFloor, FleetGroup, Job, JobStatus, QueueCount, TenantShare, utcnow
from jobservice.fleet import costs as fleet_costs
from jobservice.fleet.card_groups import groups_with_presence, is_online
from jobservice.fleet.policy import InFlight, ModelCost, decayed, fair_usage, lift, weight_of
from jobservice.fleet.presence import stale_after
from jobservice.fleet.usage import weights
from jobservice.settings import Settings


def charged(session: Session, *, half_life_s: float, now: datetime) -> dict[str, float]:
    """Each tenant's charged card-seconds, decayed to ``now``."""
    return {
        row.tenant: decayed(row.usage, (now - row.as_of).total_seconds(), half_life_s)
        for row in session.scalars(select(TenantShare))
    }


def inflight(session: Session, models: Mapping[str, ModelCost], *, now: datetime) -> list[InFlight]:
    """Every job handed to a group and not yet ended: what it should cost, and what it used so far."""
    rows = session.execute(
        select(
            Job.tenant, Job.model, Job.output_seconds, Job.claimed_at, Job.status, Job.dispatch_decision
        ).where(
            or_(
                Job.status == JobStatus.RUNNING,
                (Job.status == JobStatus.QUEUED) & Job.dispatched_to.is_not(None),
            )
        )
    )
    found = []
    for tenant, model, output_s, claimed_at, status, decision in rows:
        cost = models.get(model)
        if cost is None:
            continue
        held = (now - claimed_at).total_seconds() if status == JobStatus.RUNNING and claimed_at else 0.0
        load = bool((decision or {}).get("load"))  # the dispatcher's decision: it pays for a load
        estimate = cost.card_seconds(float(output_s or 0.0), load=load)
        found.append(InFlight(tenant, estimate, max(0.0, held) * cost.cards))
    return found


def levels(
    session: Session, models: Mapping[str, ModelCost], *, half_life_s: float, now: datetime | None = None
) -> dict[str, float]:
    """Every tenant's fair-share level now (``policy.fair_usage`` on what the database holds)."""
    now = now or utcnow()
    return fair_usage(
        charged(session, half_life_s=half_life_s, now=now),
        inflight(session, models, now=now),
        weights(session),
    )


def activations(session: Session) -> dict[str, float]:
    """When each tenant last began competing (POSIX seconds)."""
    rows = session.execute(select(TenantShare.tenant, TenantShare.activated_at))
    return {tenant: at.timestamp() for tenant, at in rows if at is not None}


# Built once: every submission reads it (``start_competing``), in one statement: each tenant's
# queued jobs less those handed to a group (a group's ``next_job_id``, not yet claimed).
_QUEUED = (
    select(QueueCount.tenant, func.sum(QueueCount.queued).label("queued"))
    .where(QueueCount.queued > 0)
    .group_by(QueueCount.tenant)
    .subquery()
)
_HANDED = (
    select(Job.tenant, func.count().label("handed"))
    .join(FleetGroup, FleetGroup.next_job_id == Job.id)
    .where(Job.status == JobStatus.QUEUED)
    .group_by(Job.tenant)
    .subquery()
)
_UNDISPATCHED = select(_QUEUED.c.tenant, _QUEUED.c.queued - func.coalesce(_HANDED.c.handed, 0)).outerjoin(
    _HANDED, _HANDED.c.tenant == _QUEUED.c.tenant
)

# The tenant's share row, locked until commit (``start_competing``).
_SHARE = (
    select(TenantShare)
    .where(TenantShare.tenant == bindparam("tenant"))
    .with_for_update()
    .execution_options(populate_existing=True)
)


def undispatched(session: Session) -> dict[str, int]:
    """Each tenant's jobs queued and not yet handed to a group (a job handed to a group waits only
    for its worker to claim it: each group holds at most one such job); tenants with none left out."""
    left = {tenant: int(count or 0) for tenant, count in session.execute(_UNDISPATCHED)}
    return {tenant: count for tenant, count in left.items() if count > 0}


def floor(session: Session, *, half_life_s: float, now: datetime) -> float | None:
    """The least level the dispatcher last saw among waiting tenants, decayed to ``now``."""
    row = session.get(FairShareFloor, 1)
    if row is None:
        return None
    return decayed(row.level, (now - row.as_of).total_seconds(), half_life_s)


def note_floor(session: Session, level: float, *, now: datetime) -> None:
    """Remember ``level``, the least level among waiting tenants now (the dispatcher, every round)."""
    insert_missing(session, FairShareFloor, {"id": 1, "level": level, "as_of": now}, ["id"])
    row = session.get(FairShareFloor, 1, populate_existing=True)
    assert row is not None
    row.level, row.as_of = level, now


def credit(settings: Settings, cards: int) -> float:
    """The newcomer credit, in level: ``fair_share_newcomer_credit_seconds`` of every online card."""
    return settings.fair_share_newcomer_credit_seconds * max(0, cards)


def start_competing(
    session: Session,
    *,
    tenant: str,
    inserted: int,
    catalog: Catalog,
    settings: Settings,
    now: datetime | None = None,
) -> bool:
    """Called in the transaction that inserted ``inserted`` new queued jobs of ``tenant`` that wait
    to be dispatched (not one a group took at once): if it had no other job waiting to be
    dispatched, it starts competing (see the module docstring). Returns whether it did."""
    now = now or utcnow()
    waiting = undispatched(session)
    if waiting.get(tenant, 0) - inserted > 0:
        return False  # it was competing already
    row = session.scalar(_SHARE, {"tenant": tenant})
    if row is None:  # its first time: the row is made (or another submission's is kept), then locked
        insert_missing(session, TenantShare, {"tenant": tenant, "usage": 0.0, "as_of": now}, ["tenant"])
        row = session.scalar(_SHARE, {"tenant": tenant})
    assert row is not None
    half_life_s = settings.fair_share_half_life_seconds
    rivals = [t for t in waiting if t != tenant]
    least = None if rivals else floor(session, half_life_s=half_life_s, now=now)  # V with nobody waiting
    level = lifted = 0.0
    if rivals or (least is not None and least > 0.0):
        online = [
            g
            for g, w in groups_with_presence(session)
            if is_online(w, stale_after_seconds=stale_after(settings), now=now)
        ]
        newcomer = credit(settings, sum(g.cards for g in online))
        # Levels are never negative, so a lift to V - credit <= 0 changes nothing: levels unread.
        if rivals or least is None or least > newcomer:
            kind = online[0].kind if online else "cpu"
            models, _ = fleet_costs.model_costs(catalog, fleet_costs.speeds(session, kind), kind)
            now_levels = levels(session, models, half_life_s=half_life_s, now=now)
            level = now_levels.get(tenant, 0.0)
            others = [now_levels.get(t, 0.0) for t in rivals]
            lifted, _ = lift(level, others=others, floor=least, credit=newcomer)
    stored = decayed(row.usage, (now - row.as_of).total_seconds(), half_life_s)
    if lifted > level and math.isfinite(lifted):
        stored += (lifted - level) * weight_of(weights(session), tenant)
    row.usage, row.as_of, row.activated_at = stored, max(row.as_of, now), now
    return True
