"""Standing offers: a free card group's next job, decided before the job arrives.

A dispatch round runs in a worker (``jobservice.fleet.dispatch``), so a job submitted to a quiet
fleet would wait for the bell, the round's lock, its read of the fleet and its commit before its
message goes out. Instead, a round that leaves groups free while no job waits undispatched asks the
policy what it would do with one new job of each model those groups may run, at each priority a job
is submitted with (``policy.standing_offers``): where the answer is "start it at once on this group,
warm", it records an offer (``fleet_offers``: group, model, priority). A submission of such a job
takes the offer in the transaction that inserts it (``take``): one compare-and-swap on the group's
row, no round and no fleet lock; its message is sent after the commit, as a round's are.

Why this is the round's decision: with nothing else waiting, the policy's choice for one new job is
the offer (the same ``plan``, on the fleet as the round left it). What could change it since is
guarded: the group must still look free and accept jobs (``card_groups.free_now``, in the
compare-and-swap); an offer is used once; a group's offers go when its card is released (they were
made before its last job); an offer expires when a silent worker would count as offline
(``until``); and every round withdraws all offers first (on PostgreSQL a round's delete waits for a
submission that holds an offer, and a submission skips an offer a round holds, so a round never
hands out a group a submission just took). A submission with no offer rings the bell as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import Session

from jobservice.db.tables import FleetGroup, FleetOffer
from jobservice.fleet.card_groups import free_now
from jobservice.fleet.policy import Decision, FleetState, standing_offers


def withdraw_all(session: Session) -> None:
    """Withdraw every offer (a round's first write after its lock: it decides afresh)."""
    session.execute(delete(FleetOffer))


def make(session: Session, state: FleetState, priorities: Iterable[int], *, until: datetime) -> None:
    """Record the offers of ``state`` (the fleet as the round leaves it) for jobs of ``priorities``,
    good until ``until``."""
    for decision in standing_offers(state, priorities):
        cost = state.models[decision.model]
        session.add(
            FleetOffer(
                group_id=decision.group,
                model=decision.model,
                priority=decision.priority,
                reason=decision.reason,
                overhead_s=cost.overhead_s,
                speed=cost.speed,
                until=until,
            )
        )


# Built once: a submission runs both (building a statement costs more than running it here).
# An offer is used once: taking it deletes it, in the statement that finds it (the row a round
# holds, or another submission, is skipped); the group's other offers go when its card is released
# (``card_groups.release_job``) or at the next round, whichever is first.
_STANDING = (
    select(FleetOffer.group_id)
    .join(FleetGroup, FleetGroup.id == FleetOffer.group_id)
    .where(
        FleetOffer.model == bindparam("model"),
        FleetOffer.priority == bindparam("priority"),
        FleetOffer.until > bindparam("now"),
        free_now(),
    )
    .order_by(FleetOffer.group_id)
    .limit(1)
    .with_for_update(of=FleetOffer, skip_locked=True)  # held by a round or a submission: not ours
)
_USE = (
    delete(FleetOffer)
    .where(
        FleetOffer.model == bindparam("model"),
        FleetOffer.priority == bindparam("priority"),
        FleetOffer.group_id == _STANDING.correlate(None).scalar_subquery(),
    )
    .returning(FleetOffer.group_id, FleetOffer.reason, FleetOffer.overhead_s, FleetOffer.speed)
    .execution_options(synchronize_session=False)
)
_TAKE = (
    update(FleetGroup)
    .where(FleetGroup.id == bindparam("group"), free_now())
    .values(next_job_id=bindparam("job"), busy_until=bindparam("until"), updated_at=bindparam("now"))
    .execution_options(synchronize_session=False)
)


def take(
    session: Session,
    *,
    job_id: uuid.UUID,
    model: str,
    priority: int,
    tenant: str,
    output_s: float,
    now: datetime,
) -> Decision | None:
    """In the transaction that records job ``job_id``: take an offer for its model and priority,
    making its group busy with it (``next_job_id``, ``busy_until`` by the offer's measured cost).
    The decision taken, or None when no offer stands (or another submission took it first)."""
    offer = session.execute(_USE, {"model": model, "priority": priority, "now": now}).first()
    if offer is None:
        return None
    busy_s = offer.overhead_s + offer.speed * max(0.0, output_s)
    taken = session.execute(
        _TAKE, {"group": offer.group_id, "job": job_id, "until": now + timedelta(seconds=busy_s), "now": now}
    )
    if taken.rowcount != 1:  # type: ignore[attr-defined]
        return None  # the group took a job since the round (its offer is gone too): the bell it is
    return Decision(
        group=offer.group_id, model=model, priority=priority, tenant=tenant, load=False, reason=offer.reason
    )
