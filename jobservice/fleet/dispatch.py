"""Dispatch: give each free card group its next job, as ``jobservice.fleet.policy`` decides.

The queue stays Celery on Redis, but a message goes out only when a group is about to take it: each
group consumes a queue of its own (``group.<id>``, the idea of Celery's ``worker_direct``), which
holds at most the one job the group takes next. Every other queued job waits in the database, where
fair share can still reorder it: a 5,000-job nightly batch is 5,000 rows, not 5,000 messages that
would pin first-come-first-served order in Redis.

A round: lock the dispatch row (one dispatcher at a time, across processes and hosts), read the
fleet (``read_state``), ask ``plan`` for decisions, mark each chosen job ``dispatched_to`` its group
(with what was decided) and the group's ``next_job_id``, commit, then send the messages. Rounds run
in the workers, never in a request: when work is submitted and some group may be free (the API
rings the bell, ``request_round``, and a worker's dispatcher runs the round at once;
``jobservice.fleet.wake``), when a group's generation ends (its worker, so the card never waits),
and every maintenance round of every worker (anything missed). A failed send leaves the job
dispatched but unsent; the reaper sends it again or, if its group is gone, hands it back.

Every round first withdraws the free groups' standing offers and, when it leaves groups free with
nothing waiting, makes them again (``jobservice.fleet.offers``): a submission that takes one is
dispatched in its own transaction (``take_offer``) and sends its message itself (``send_all``).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from jobservice.broker import DispatchDecision, JobMessage, Send, sender
from jobservice.catalog import Catalog
from jobservice.db.engine import Database
from jobservice.db.rows import update_one
from jobservice.db.tables import FleetEvent, FleetGroup, FleetLock, Job, JobStatus, QueueCount, utcnow
from jobservice.fleet import costs as fleet_costs
from jobservice.fleet import offers, shares
from jobservice.fleet.card_groups import free_now, groups_with_presence, is_online
from jobservice.fleet.policy import (
    INTERACTIVE,
    CardGroupState,
    Decision,
    FleetState,
    PolicyParams,
    Resident,
    Waiting,
    plan,
)
from jobservice.fleet.presence import stale_after
from jobservice.fleet.usage import weights
from jobservice.settings import Settings
from jobservice.tracing import traceparent

if TYPE_CHECKING:
    from celery import Celery

    from jobservice.fleet.wake import DispatchBell

log = logging.getLogger(__name__)

PARAMS = PolicyParams()


@dataclass(frozen=True)
class Snapshot:
    """The fleet as the policy sees it, with the rows it came from."""

    state: FleetState
    groups: dict[str, FleetGroup]  # online groups by id
    known: dict[str, fleet_costs.Measured]  # what was measured of each model
    kind: str  # the card kind the costs are for


@dataclass(frozen=True)
class Dispatched:
    """A job handed to a group (its message is sent after the round commits)."""

    job_id: uuid.UUID
    group: str
    model: str
    priority: int
    decision: Decision
    trace: str | None = None  # the submission's W3C traceparent (jobs.trace_context), when traced

    @classmethod
    def of(cls, job: Job, decision: Decision) -> Dispatched:
        """``job`` handed out as ``decision`` says."""
        return cls(
            job.id,
            decision.group,
            decision.model,
            decision.priority,
            decision,
            traceparent(job.trace_context),
        )

    @property
    def message(self) -> JobMessage:
        """The message that tells the group's worker to run the job, with what was decided and the
        trace it continues."""
        return JobMessage(
            job_id=self.job_id,
            group=self.group,
            priority=self.priority,
            decision=decided(self.decision),
            trace=self.trace,
        )


def decided(decision: Decision) -> DispatchDecision:
    """What travels with a dispatch (and is stored with it) of the policy's ``decision``."""
    return DispatchDecision(
        model=decision.model, load=decision.load, evict=decision.evict, reason=decision.reason
    )


def _ts(value: datetime | None, default: float) -> float:
    return value.timestamp() if value is not None else default


def _iso_ts(value: object, default: float) -> float:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return default


def _recent_swaps(session: Session, now: datetime) -> dict[str, tuple[float, ...]]:
    """When each group evicted models to make room, over the last hour (one swap may evict several)."""
    rows = session.execute(
        select(FleetEvent.group_id, FleetEvent.at)
        .where(FleetEvent.kind == "evict", FleetEvent.at >= now - timedelta(hours=1))
        .distinct()
    )
    found: dict[str, list[float]] = {}
    for group_id, at in rows:
        found.setdefault(group_id, []).append(at.timestamp())
    return {group_id: tuple(sorted(times)) for group_id, times in found.items()}


def _group_state(
    group: FleetGroup, catalog: Catalog, now: float, running: str | None, swaps: tuple[float, ...] = ()
) -> CardGroupState:
    resident = {
        model: Resident(since=_iso_ts(held.get("since"), now), last_used=_iso_ts(held.get("last_used"), now))
        for model, held in (group.resident or {}).items()
        if isinstance(held, dict)
    }
    busy = group.job_id is not None or group.next_job_id is not None
    return CardGroupState(
        id=group.id,
        cards=group.cards,
        eligible=frozenset(m for m in group.eligible or [] if catalog.get(m) is not None),
        memory_gb_per_card=group.memory_gb_per_card,
        resident=resident,
        busy_until=max(now, _ts(group.busy_until, now)) if busy else None,
        running=running if busy else None,
        kind=group.kind,
        swaps=swaps,
    )


def _settle_next_jobs(session: Session, groups: list[FleetGroup]) -> dict[str, str | None]:
    """The model each group runs or takes next. A group whose next job no longer waits for it
    (canceled, handed back), or whose job is no longer running there, is free again."""
    ids = [g.job_id for g in groups if g.job_id] + [g.next_job_id for g in groups if g.next_job_id]
    rows = (
        {
            row.id: row
            for row in session.execute(
                select(Job.id, Job.model, Job.status, Job.dispatched_to).where(Job.id.in_(ids))
            )
        }
        if ids
        else {}
    )
    models: dict[str, str | None] = {}
    for group in groups:
        if group.next_job_id is not None:
            row = rows.get(group.next_job_id)
            if row is None or row.status != JobStatus.QUEUED or row.dispatched_to != group.id:
                group.next_job_id = None
        if group.job_id is not None:  # a release its worker could not write (the database was away)
            row = rows.get(group.job_id)
            if row is None or row.status != JobStatus.RUNNING or row.dispatched_to != group.id:
                group.job_id, group.busy_until = None, None
        current = group.job_id or group.next_job_id
        models[group.id] = rows[current].model if current in rows else None
    return models


def _waiting(session: Session) -> list[Waiting]:
    """The queue per (model, priority, tenant), less what is already dispatched, with each head."""
    counts = session.execute(
        select(
            QueueCount.model, QueueCount.priority, QueueCount.tenant, QueueCount.queued, QueueCount.output_s
        ).where(QueueCount.queued > 0)
    ).all()
    if not counts:
        return []
    sent: Counter[tuple[str, int, str]] = Counter()
    sent_output: dict[tuple[str, int, str], float] = {}
    for model, priority, tenant, seconds in session.execute(
        select(Job.model, Job.priority, Job.tenant, Job.output_seconds).where(
            Job.status == JobStatus.QUEUED, Job.dispatched_to.is_not(None)
        )
    ):
        sent[(model, priority, tenant)] += 1
        sent_output[(model, priority, tenant)] = sent_output.get((model, priority, tenant), 0.0) + (
            seconds or 0.0
        )
    found = []
    for model, priority, tenant, queued, output_s in counts:
        key = (model, priority, tenant)
        left = queued - sent[key]
        if left <= 0:
            continue
        head = _head(session, model, priority, tenant)
        if head is None:
            continue
        found.append(
            Waiting(
                model=model,
                priority=priority,
                tenant=tenant,
                jobs=left,
                output_s=max(0.0, float(output_s) - sent_output.get(key, 0.0)),
                oldest=head.created_at.timestamp(),
                next_output_s=float(head.output_seconds or 0.0),
            )
        )
    return found


def _head(session: Session, model: str, priority: int, tenant: str, skip: int = 0) -> Job | None:
    """The oldest queued job of (model, priority, tenant) not yet handed to a group, after ``skip``
    of them (fewer where fewer are left: the newest)."""
    queued = (
        select(Job)
        .where(
            Job.model == model,
            Job.status == JobStatus.QUEUED,
            Job.priority == priority,
            Job.tenant == tenant,
            Job.dispatched_to.is_(None),
            Job.cancel_requested_at.is_(None),
        )
        .order_by(Job.created_at, Job.id)
    )
    found = list(session.scalars(queued.limit(skip + 1)))
    return found[-1] if found else None


def arrival_rates(
    session: Session, *, now: datetime, window_s: float, priority: int | None = None
) -> dict[str, float]:
    """Jobs submitted per second over the last ``window_s``, per model (of one ``priority``, or all)."""
    since = now - timedelta(seconds=window_s)
    query = select(Job.model, func.count()).where(Job.created_at >= since)
    if priority is not None:
        query = query.where(Job.priority == priority)
    return {model: count / window_s for model, count in session.execute(query.group_by(Job.model))}


def read_state(
    session: Session, catalog: Catalog, settings: Settings, *, now: datetime | None = None
) -> Snapshot:
    """The fleet now, as the policy decides on it: only groups whose worker is online and that take
    jobs (not draining or unhealthy; ``jobservice.fleet.card_groups``)."""
    now = now or utcnow()
    stale = stale_after(settings)
    online = [
        g
        for g, w in groups_with_presence(session)
        if g.accepting and is_online(w, stale_after_seconds=stale, now=now)
    ]
    models_of = _settle_next_jobs(session, online)
    kind = Counter(g.kind for g in online).most_common(1)[0][0] if online else "cpu"
    costs, known = fleet_costs.model_costs(catalog, fleet_costs.speeds(session, kind), kind)
    swaps = _recent_swaps(session, now)
    t = now.timestamp()
    state = FleetState(
        now=t,
        groups=tuple(_group_state(g, catalog, t, models_of.get(g.id), swaps.get(g.id, ())) for g in online),
        models=costs,
        waiting=tuple(_waiting(session)),
        usage=shares.levels(session, costs, half_life_s=settings.fair_share_half_life_seconds, now=now),
        rates=arrival_rates(session, now=now, window_s=PARAMS.rate_window_s),
        params=PARAMS,
        interactive_rates=arrival_rates(
            session, now=now, window_s=PARAMS.rate_window_s, priority=INTERACTIVE
        ),
        weights=weights(session),
        activated=shares.activations(session),
    )
    return Snapshot(state=state, groups={g.id: g for g in online}, known=known, kind=kind)


def _lock(session: Session) -> None:
    """Take the dispatch row: other dispatchers wait until this round commits."""
    session.execute(update(FleetLock).where(FleetLock.name == "dispatch").values(at=utcnow()))


def _hand_over(session: Session, snapshot: Snapshot, decision: Decision) -> Dispatched | None:
    job = _head(session, decision.model, decision.priority, decision.tenant, decision.skip)
    if job is None:
        return None
    now = utcnow()
    waiting = (Job.id == job.id, Job.status == JobStatus.QUEUED, Job.dispatched_to.is_(None))
    decision_json = decided(decision).as_dict()
    if not update_one(
        session, Job, *waiting, dispatched_to=decision.group, enqueued_at=now, dispatch_decision=decision_json
    ):
        return None
    cost = snapshot.state.models[decision.model]
    seconds = (cost.load_s if decision.load else 0.0) + cost.run_s(float(job.output_seconds or 0.0))
    group = snapshot.groups[decision.group]
    group.next_job_id = job.id
    group.busy_until = now + timedelta(seconds=seconds)
    return Dispatched.of(job, decision)


def dispatch(db: Database, catalog: Catalog, settings: Settings, send: Send) -> list[Dispatched]:
    """One round (see the module docstring); returns the jobs handed out."""
    handed: list[Dispatched] = []
    with db.session() as session:
        _lock(session)
        offers.withdraw_all(session)
        snapshot = read_state(session, catalog, settings)
        waiting = {w.tenant for w in snapshot.state.waiting}
        if waiting:  # what a tenant that starts competing while nobody waits is lifted to
            least = min(snapshot.state.usage.get(t, 0.0) for t in waiting)
            shares.note_floor(session, least, now=datetime.fromtimestamp(snapshot.state.now, UTC))
        if not any(g.free for g in snapshot.state.groups):
            return []
        for decision in plan(snapshot.state):
            done = _hand_over(session, snapshot, decision)
            if done is not None:
                handed.append(done)
        offers.make(
            session,
            _after(snapshot, handed),
            (INTERACTIVE, settings.batch_priority),
            until=datetime.fromtimestamp(snapshot.state.now, UTC) + timedelta(seconds=stale_after(settings)),
        )
    send_all(db, handed, send)
    return handed


def _after(snapshot: Snapshot, handed: list[Dispatched]) -> FleetState:
    """The fleet as the round leaves it: the groups it gave a job busy, and the queue empty if it
    handed out every waiting job (else as it was: no offer is made while jobs wait)."""
    state = snapshot.state
    taken = {item.group: item.model for item in handed}
    groups = tuple(
        replace(
            g,
            busy_until=_ts(snapshot.groups[g.id].busy_until, state.now),
            running=taken[g.id],
        )
        if g.id in taken
        else g
        for g in state.groups
    )
    left = sum(w.jobs for w in state.waiting) - len(handed)
    return replace(state, groups=groups, waiting=state.waiting if left > 0 else ())


def take_offer(session: Session, job: Job) -> Decision | None:
    """In the transaction that records ``job`` (before its row is inserted): take a free group's
    standing offer for it (``jobservice.fleet.offers``) and mark it dispatched there, as a round
    would have. Its message (``Dispatched.of``) is sent after the commit (``send_all``); None when
    no offer stands."""
    now = utcnow()
    decision = offers.take(
        session,
        job_id=job.id,
        model=job.model,
        priority=job.priority,
        tenant=job.tenant,
        output_s=float(job.output_seconds or 0.0),
        now=now,
    )
    if decision is None:
        return None
    job.dispatched_to, job.enqueued_at = decision.group, now
    job.dispatch_decision = decided(decision).as_dict()
    return decision


def send_all(db: Database, handed: Iterable[Dispatched], send: Send) -> None:
    """Send the messages of jobs handed out (after their commit). A failed send leaves its job
    dispatched but unsent (``enqueued_at`` cleared): the reaper sends it again."""
    for item in handed:
        try:
            send(item.message)
        except Exception as exc:  # noqa: BLE001 - the reaper sends it again from the table
            log.warning(
                "job %s: its message to %s was not sent (%s); the reaper will", item.job_id, item.group, exc
            )
            with db.session() as session:
                session.execute(update(Job).where(Job.id == item.job_id).values(enqueued_at=None))
        else:
            log.info(
                "job %s -> %s (%s%s%s)",
                item.job_id,
                item.group,
                item.decision.reason,
                ", load" if item.decision.load else "",
                f", evict {','.join(item.decision.evict)}" if item.decision.evict else "",
            )


# Groups that look free: built once, as every submission reads it.
FREE_GROUPS = select(FleetGroup.eligible).where(free_now())


def free_group_for(db: Database, models: Iterable[str]) -> bool:
    """Whether some group that may serve one of ``models`` looks free (a cheap read, no lock)."""
    wanted = set(models)
    with db.reading() as conn:
        rows = conn.execute(FREE_GROUPS).all()
    return any(wanted.intersection(eligible or []) for (eligible,) in rows)


class Collaborators(Protocol):
    """What a dispatch round needs of a process's services (``jobservice.wiring.Services``)."""

    db: Database
    catalog: Catalog
    settings: Settings

    @property
    def celery(self) -> Celery:
        """The Celery app messages are sent with."""

    @property
    def dispatch_bell(self) -> DispatchBell:
        """The bell that wakes the workers' dispatchers (``jobservice.fleet.wake``)."""


def dispatch_round(services: Collaborators) -> list[Dispatched]:
    """One dispatch round with a process's collaborators, sending through its Celery app."""
    return dispatch(services.db, services.catalog, services.settings, sender(services.celery))


def request_round(services: Collaborators, models: Iterable[str]) -> bool:
    """New work of ``models`` is recorded: when a group that may run it looks free, ring the bell so
    that a worker's dispatcher runs the round now (a request never runs it: it would wait on the
    fleet-wide lock). True when it rang. A failure is logged and left to the upkeep rounds, which
    dispatch every few seconds: the row is the queue, the bell only a hint."""
    try:
        if not free_group_for(services.db, models):
            return False  # every group is busy: the next one to free up runs a round itself
        services.dispatch_bell.ring()
    except Exception as exc:  # noqa: BLE001 - the work is recorded; an upkeep round places it
        log.warning("could not wake a dispatcher (%s); an upkeep round will dispatch", exc)
        return False
    return True
